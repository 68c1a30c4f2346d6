/* One N16CX output block of a float channel map whose lanes come from anywhere (a
 * ChannelShuffle, a channel slice off the 16-lane grid): pixels [s0, s1) of
 *
 *     dst[s, l] = src_of_lane(l)[s, lane_of(l)]     (0 for lanes no op covers: padding)
 *
 * The block is described by nops permute ops, each reading two source blocks a[k], b[k]
 * (b[k] == a[k] when the op has one): lane l of op k takes lane idx[k][l] of the 32-lane
 * pair (a[k], b[k]) -- below 16 from a, 16 and up from b -- and writes the output lanes set
 * in mask[k].  The ops' masks are disjoint.
 *
 * With AVX-512 one op is one vpermt2ps and a masked move per pixel: a ShuffleNet block
 * (16 single-lane runs over 4-8 source blocks) costs 2-4 permutes a pixel instead of 16
 * scalar copies.  Without it the lanes are copied one by one from precomputed lane pointers
 * (branch-free: padding lanes read lane 0 of the first source and are masked to 0).
 */
#ifndef PPL_CHMAP_FP32_H
#define PPL_CHMAP_FP32_H

#include <stddef.h>
#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#define PPL_CHMAP_PERMUTES 1
#else
#define PPL_CHMAP_PERMUTES 0
#endif

#define PPL_CHMAP_LANES 16

#if defined(__AVX512F__)
/* nops is a constant at every call (the switch below): the indices and masks stay in
 * registers and the op loop unrolls, leaving two loads and one permute per op a pixel. */
static inline __attribute__((always_inline)) void ppl_chmap_pixels_avx512(
        float *dst, const float *const *a, const float *const *b, const int32_t *idx,
        const uint32_t *mask, const int nops, ptrdiff_t s0, ptrdiff_t s1) {
    __m512i ix[8];
    __mmask16 m[8];
    const float *pa[8], *pb[8];   /* local copies: the stores to dst cannot change them */
    ptrdiff_t s;
    int k;
    for (k = 0; k < nops; k++) {
        ix[k] = _mm512_loadu_si512(idx + k * PPL_CHMAP_LANES);
        m[k] = (__mmask16)mask[k];
        pa[k] = a[k];
        pb[k] = b[k];
    }
    for (s = s0; s < s1; s++) {
        const ptrdiff_t o = s * PPL_CHMAP_LANES;
        /* the first op zeroes the lanes it does not write (padding); the others merge */
        __m512 v = _mm512_maskz_permutex2var_ps(m[0], _mm512_loadu_ps(pa[0] + o), ix[0],
                                                _mm512_loadu_ps(pb[0] + o));
        for (k = 1; k < nops; k++)
            v = _mm512_mask_mov_ps(v, m[k],
                                   _mm512_permutex2var_ps(_mm512_loadu_ps(pa[k] + o), ix[k],
                                                          _mm512_loadu_ps(pb[k] + o)));
        _mm512_storeu_ps(dst + o, v);
    }
}
#endif

static inline void ppl_chmap_block_fp32(float *dst, const float *const *a, const float *const *b,
                                        const int32_t *idx, const uint32_t *mask, int nops,
                                        ptrdiff_t s0, ptrdiff_t s1) {
    ptrdiff_t s;
    int k;
#if defined(__AVX512F__)
    switch (nops) {
#define PPL_CHMAP_CASE(K) \
    case K: ppl_chmap_pixels_avx512(dst, a, b, idx, mask, K, s0, s1); return;
    PPL_CHMAP_CASE(1) PPL_CHMAP_CASE(2) PPL_CHMAP_CASE(3) PPL_CHMAP_CASE(4)
    PPL_CHMAP_CASE(5) PPL_CHMAP_CASE(6) PPL_CHMAP_CASE(7) PPL_CHMAP_CASE(8)
#undef PPL_CHMAP_CASE
    default:   /* no op: a block of padding only */
        for (s = s0; s < s1; s++)
            _mm512_storeu_ps(dst + s * PPL_CHMAP_LANES, _mm512_setzero_ps());
        (void)k;
    }
#else
    int l;
    const uint32_t *lane[PPL_CHMAP_LANES];
    uint32_t keep[PPL_CHMAP_LANES];
    uint32_t *out = (uint32_t *)dst;
    for (l = 0; l < PPL_CHMAP_LANES; l++) {
        lane[l] = nops ? (const uint32_t *)a[0] : (const uint32_t *)dst;
        keep[l] = 0;
    }
    for (k = 0; k < nops; k++)
        for (l = 0; l < PPL_CHMAP_LANES; l++)
            if (mask[k] >> l & 1) {
                const int32_t j = idx[k * PPL_CHMAP_LANES + l];
                lane[l] = (const uint32_t *)(j < PPL_CHMAP_LANES ? a[k] : b[k])
                          + (j & (PPL_CHMAP_LANES - 1));
                keep[l] = ~0u;
            }
    for (s = s0; s < s1; s++) {
        const ptrdiff_t o = s * PPL_CHMAP_LANES;
        for (l = 0; l < PPL_CHMAP_LANES; l++)
            out[o + l] = lane[l][o] & keep[l];
    }
#endif
}

#endif
