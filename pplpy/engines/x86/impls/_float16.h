/* float32 <-> float16 conversion on the bits, in loops gcc vectorises (Cast, CastLike).
 *
 * Converting through gcc's _Float16 calls libgcc's software routines an element at a time:
 * Cast of (1, 64, 112, 112) float32 to float16 took 6.5 ms, ONNX Runtime's 0.06.  These are
 * branch-free formulas on the IEEE bit patterns (after F. Giesen's public-domain
 * float_to_half_fast3_rtne and half_to_float_fast5), so the loops below become vector code
 * with the module's baseline flags:
 *
 *   float32 -> float16  round to nearest even, as numpy and the conversion instruction do;
 *                       past the largest half (65504, rounding included) +-inf; float16
 *                       subnormals from the float adding 0.5 (which rounds its low bits
 *                       away, to nearest even); NaN -> a quiet NaN with the sign kept.
 *   float16 -> float32  exact: the exponent rebiased by one multiplication by 2**112, which
 *                       also normalises the subnormals; inf and NaN (payload kept) mapped
 *                       to the float's all-ones exponent.
 */
#ifndef PPL_FLOAT16_H
#define PPL_FLOAT16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t ppl_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ppl_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ppl_float_to_half(float f) {
    const uint32_t bits = ppl_f32_bits(f);
    const uint32_t sign = bits & 0x80000000u;
    const uint32_t x = bits ^ sign;                       /* |f| */
    /* normal halves: rebias the exponent (127 -> 15), round the 13 dropped bits to even */
    const uint32_t normal = (x + 0xC8000FFFu + ((x >> 13) & 1u)) >> 13;
    /* |f| < 2**-14: subnormal halves, rounded by the float addition itself */
    const uint32_t sub = ppl_f32_bits(ppl_bits_f32(x) + 0.5f) - 0x3F000000u;
    /* |f| >= 65536 (2**16): inf, or a quiet NaN */
    const uint32_t big = x > 0x7F800000u ? 0x7E00u : 0x7C00u;
    const uint32_t h = x >= 0x47800000u ? big : (x < 0x38800000u ? sub : normal);
    return (uint16_t)(h | (sign >> 16));
}

static inline float ppl_half_to_float(uint16_t h) {
    const uint32_t magnitude = ((uint32_t)h & 0x7FFFu) << 13;  /* exponent and mantissa */
    const float scaled = ppl_bits_f32(magnitude) * 0x1p112f;  /* rebias 15 -> 127 */
    uint32_t bits = ppl_f32_bits(scaled);
    bits |= magnitude >= (31u << 23) ? 0x7F800000u : 0u;      /* inf / NaN */
    return ppl_bits_f32(bits | (((uint32_t)h & 0x8000u) << 16));
}

/* y[i] = (float16) x[i], i < n. */
static inline void ppl_floats_to_halves(const float *x, uint16_t *y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) y[i] = ppl_float_to_half(x[i]);
}

/* y[i] = (float) x[i], i < n. */
static inline void ppl_halves_to_floats(const uint16_t *x, float *y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) y[i] = ppl_half_to_float(x[i]);
}

#endif /* PPL_FLOAT16_H */
