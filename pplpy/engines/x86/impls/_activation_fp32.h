/* Activations on vectors of PPL_VLEN floats: one formula per activation for every x86 tier.
 *
 *   ppl_apply_activation(v, code, p0, p1)   one vector, code from post_ops.py
 *   ppl_activation(x, y, n, code, p0, p1)   a flat buffer: full vectors, then one
 *                                           zero-padded tail vector (no scalar loop)
 *
 * Two users: the eltwise kernels (_eltwise_fp32.pxi, on flat NDARRAY or N16CX buffers) and the
 * brgemm epilogue (_brgemm_fp32.h, fused into GEMM and convolution), so a fused activation and
 * a stand-alone one compute the same bits.  The including file defines PPL_VLEN (16, 8, 4)
 * and compiles with its tier's -m flags; the code is GCC vector extensions, which gcc lowers
 * to that tier's instructions.  Include it only from modules of one tier (see _brgemm_fp32.h).
 *
 * Conventions, as numpy: a NaN input gives NaN (relu and clip pass it through: comparisons
 * with NaN are false, so every select below keeps x; thresholded_relu and shrink excepted,
 * see there); an infinite input gives f's limit.
 * No libm call: exp is Cephes' expf reduction with a polynomial fitted for this file (see
 * ppl_exp_c; on AVX-512 with vrndscaleps / vscalefps), log is Cephes' logf on whole vectors,
 * and so are sin/cos/tan (Cephes' range reduction, accurate for |x| up to 2**23; lanes past
 * it, rare, go to libm's sinf/cosf/tanf, whose reduction is exact for every float), the
 * inverse and hyperbolic functions; erf is a polynomial fitted for this file.
 * Accuracy: relative error within a few 1e-7 (about 2 ulp) on each function's domain,
 * absolute near a zero of sin/cos/tan; erf GELU is the exception (up to 1e-6 above x = -2,
 * up to 4.3e-6 in its left tail below, where |y| < 0.05, and 0 past x = -5.66: see
 * ppl_gelu).  sqrt and rounding are the tier's instructions
 * (SSE4.1 is the lowest tier).
 *
 * Most activations map 0 to a finite value, so an N16CX tensor can be processed as one flat
 * buffer: its zero padding lanes stay finite (they do not stay 0; consumers ignore them).
 * Not log (-inf), reciprocal (inf) and acosh (NaN): their ops run in NDARRAY only (the
 * keeps_padding column of ops/onnx/elementwise.py's table).
 */
#ifndef PPL_ACTIVATION_FP32_H
#define PPL_ACTIVATION_FP32_H

#ifndef PPL_VLEN
#error "define PPL_VLEN (floats per vector register) before including _activation_fp32.h"
#endif

#include <stddef.h>
#include <math.h>
#include <immintrin.h>

#ifndef PPL_BRGEMM_FP32_H /* _brgemm_fp32.h declares the same two types before including us */
typedef float ppl_vf __attribute__((vector_size(PPL_VLEN * 4)));
typedef int ppl_vi __attribute__((vector_size(PPL_VLEN * 4)));
#endif
typedef unsigned ppl_vu __attribute__((vector_size(PPL_VLEN * 4)));

/* Activation codes: must match post_ops.py and post_ops.pxd (a test checks). */
enum {
    PPL_ACT_NONE = 0,
    PPL_ACT_RELU = 1,             /* max(x, 0) */
    PPL_ACT_LEAKY_RELU = 2,       /* x >= 0 ? x : p0 * x */
    PPL_ACT_CLIP = 3,             /* min(max(x, p0), p1) */
    PPL_ACT_SIGMOID = 4,          /* 1 / (1 + exp(-x)) */
    PPL_ACT_TANH = 5,             /* tanh(x) */
    PPL_ACT_HARD_SWISH = 6,       /* x * min(max(x / 6 + 1/2, 0), 1) */
    PPL_ACT_ABS = 7,              /* |x| */
    PPL_ACT_NEG = 8,              /* -x */
    PPL_ACT_EXP = 9,              /* exp(x) */
    PPL_ACT_LOG = 10,             /* log(x): -inf at 0 */
    PPL_ACT_SQRT = 11,            /* sqrt(x) */
    PPL_ACT_RECIPROCAL = 12,      /* 1 / x: inf at 0 */
    PPL_ACT_FLOOR = 13,           /* floor(x) */
    PPL_ACT_CEIL = 14,            /* ceil(x) */
    PPL_ACT_ROUND = 15,           /* x rounded to nearest, ties to even */
    PPL_ACT_SIGN = 16,            /* -1, 0 or 1 */
    PPL_ACT_ERF = 17,             /* erf(x) */
    PPL_ACT_SIN = 18,             /* sin(x) */
    PPL_ACT_COS = 19,             /* cos(x) */
    PPL_ACT_TAN = 20,             /* tan(x) */
    PPL_ACT_ASIN = 21,            /* asin(x) */
    PPL_ACT_ACOS = 22,            /* acos(x) */
    PPL_ACT_ATAN = 23,            /* atan(x) */
    PPL_ACT_SINH = 24,            /* sinh(x) */
    PPL_ACT_COSH = 25,            /* cosh(x) */
    PPL_ACT_ASINH = 26,           /* asinh(x) */
    PPL_ACT_ACOSH = 27,           /* acosh(x): NaN at 0 */
    PPL_ACT_ATANH = 28,           /* atanh(x) */
    PPL_ACT_HARD_SIGMOID = 29,    /* min(max(p0 * x + p1, 0), 1) */
    PPL_ACT_SOFTPLUS = 30,        /* log(1 + exp(x)) */
    PPL_ACT_SOFTSIGN = 31,        /* x / (1 + |x|) */
    PPL_ACT_ELU = 32,             /* x >= 0 ? x : p0 * (exp(x) - 1) */
    PPL_ACT_SELU = 33,            /* p1 * (x > 0 ? x : p0 * (exp(x) - 1)) */
    PPL_ACT_CELU = 34,            /* max(x, 0) + min(0, p0 * (exp(x / p0) - 1)) */
    PPL_ACT_GELU = 35,            /* x * Phi(x); p0 != 0: the tanh approximation of Phi */
    PPL_ACT_MISH = 36,            /* x * tanh(log(1 + exp(x))) */
    PPL_ACT_THRESHOLDED_RELU = 37, /* x > p0 ? x : 0 */
    PPL_ACT_SHRINK = 38,          /* x < -p1 ? x + p0 : x > p1 ? x - p0 : 0 */
    PPL_ACT_SWISH = 39,           /* x * sigmoid(p0 * x) */
};
/* Every activation code but NONE, once: X(name) for each PPL_ACT_<name>.  The kernels that
 * dispatch on a code at run time (ppl_activation below, the post-op chains of
 * _post_chain_fp32.h) expand it into one case per code, so that an activation added to the
 * enum above and here reaches all of them. */
#define PPL_FOR_EACH_ACTIVATION(X)                                                      \
    X(RELU) X(LEAKY_RELU) X(CLIP) X(SIGMOID) X(TANH) X(HARD_SWISH) X(ABS) X(NEG) X(EXP)     \
    X(LOG) X(SQRT) X(RECIPROCAL) X(FLOOR) X(CEIL) X(ROUND) X(SIGN) X(ERF) X(SIN) X(COS)     \
    X(TAN) X(ASIN) X(ACOS) X(ATAN) X(SINH) X(COSH) X(ASINH) X(ACOSH) X(ATANH)              \
    X(HARD_SIGMOID) X(SOFTPLUS) X(SOFTSIGN) X(ELU) X(SELU) X(CELU) X(GELU) X(MISH)          \
    X(THRESHOLDED_RELU) X(SHRINK) X(SWISH)

#define PPL_ACT_INLINE static inline __attribute__((always_inline))

PPL_ACT_INLINE ppl_vf ppl_act_splat(float s) {
#if PPL_VLEN == 16
    return (ppl_vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
#elif PPL_VLEN == 8
    return (ppl_vf){s, s, s, s, s, s, s, s};
#elif PPL_VLEN == 4
    return (ppl_vf){s, s, s, s};
#else
#error "PPL_VLEN must be 4, 8 or 16"
#endif
}

/* mask ? a : b lane by lane (mask lanes are 0 or -1, as vector comparisons give). */
PPL_ACT_INLINE ppl_vf ppl_act_select(ppl_vi mask, ppl_vf a, ppl_vf b) {
    return (ppl_vf)(((ppl_vi)a & mask) | ((ppl_vi)b & ~mask));
}

/* max(x, lo) and min(x, hi) with NaN x kept (x < lo and x > hi are false for it): one
 * vmaxps / vminps (maxps / minps), whose second operand is what an unordered compare
 * returns, as it is for equal operands (+-0): the same bits as the select in the comment,
 * in one instruction instead of a compare and a blend (measured on Zen 4, fma tier: swish
 * over a buffer in L1 2.90 -> 2.56 ns per vector). */
PPL_ACT_INLINE ppl_vf ppl_act_max_keepnan(ppl_vf x, float lo) {
    /* ppl_act_select(x < ppl_act_splat(lo), ppl_act_splat(lo), x) */
#if PPL_VLEN == 16 && defined(__AVX512F__)
    return (ppl_vf)_mm512_max_ps((__m512)ppl_act_splat(lo), (__m512)x);
#elif PPL_VLEN == 8 && defined(__AVX__)
    return (ppl_vf)_mm256_max_ps((__m256)ppl_act_splat(lo), (__m256)x);
#elif PPL_VLEN == 4
    return (ppl_vf)_mm_max_ps((__m128)ppl_act_splat(lo), (__m128)x);
#else
    return ppl_act_select(x < ppl_act_splat(lo), ppl_act_splat(lo), x);
#endif
}
PPL_ACT_INLINE ppl_vf ppl_act_min_keepnan(ppl_vf x, float hi) {
    /* ppl_act_select(x > ppl_act_splat(hi), ppl_act_splat(hi), x) */
#if PPL_VLEN == 16 && defined(__AVX512F__)
    return (ppl_vf)_mm512_min_ps((__m512)ppl_act_splat(hi), (__m512)x);
#elif PPL_VLEN == 8 && defined(__AVX__)
    return (ppl_vf)_mm256_min_ps((__m256)ppl_act_splat(hi), (__m256)x);
#elif PPL_VLEN == 4
    return (ppl_vf)_mm_min_ps((__m128)ppl_act_splat(hi), (__m128)x);
#else
    return ppl_act_select(x > ppl_act_splat(hi), ppl_act_splat(hi), x);
#endif
}

PPL_ACT_INLINE ppl_vf ppl_act_load(const float *p) {
    ppl_vf v;
    __builtin_memcpy(&v, p, sizeof v); /* unaligned */
    return v;
}

PPL_ACT_INLINE void ppl_act_store(float *p, ppl_vf v) { __builtin_memcpy(p, &v, sizeof v); }

/* The first n (0 <= n <= PPL_VLEN) floats at p, the other lanes 0: a tail read no further
 * than the buffer's end. */
PPL_ACT_INLINE ppl_vf ppl_act_load_partial(const float *p, ptrdiff_t n) {
#if PPL_VLEN == 16 && defined(__AVX512F__)
    /* A masked load: no call to memcpy, whose clobbered registers would make a caller
     * holding a register tile spill it (masked-off lanes never fault). */
    return (ppl_vf)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#elif PPL_VLEN == 8 && defined(__AVX2__)
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (ppl_vf)_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes));
#else
    ppl_vf v = ppl_act_splat(0.0f);
    __builtin_memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
#endif
}

PPL_ACT_INLINE void ppl_act_store_partial(float *p, ppl_vf v, ptrdiff_t n) {
#if PPL_VLEN == 16 && defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)v);
#elif PPL_VLEN == 8 && defined(__AVX2__)
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes), (__m256)v);
#else
    __builtin_memcpy(p, &v, (size_t)n * sizeof(float));
#endif
}

/* ---- Helpers ---------------------------------------------------------------------- */

PPL_ACT_INLINE ppl_vf ppl_act_abs(ppl_vf x) { return (ppl_vf)((ppl_vu)x & 0x7fffffffu); }

/* |mag| with the sign of sgn. */
PPL_ACT_INLINE ppl_vf ppl_act_copysign(ppl_vf mag, ppl_vf sgn) {
    return (ppl_vf)(((ppl_vu)mag & 0x7fffffffu) | ((ppl_vu)sgn & 0x80000000u));
}

/* p[0] + p[1] t + ... + p[n-1] t^(n-1), Horner's scheme (n a constant after inlining). */
PPL_ACT_INLINE ppl_vf ppl_act_poly(ppl_vf t, const float *p, const int n) {
    ppl_vf r = ppl_act_splat(p[n - 1]);
    for (int i = n - 2; i >= 0; i--) r = r * t + ppl_act_splat(p[i]);
    return r;
}

/* ---- The activations ---------------------------------------------------------------- */

PPL_ACT_INLINE ppl_vf ppl_relu(ppl_vf x) {
    /* "0 if x < 0" rather than "x if x > 0": NaN passes through, as in numpy.maximum. */
    return ppl_act_max_keepnan(x, 0.0f);
}

PPL_ACT_INLINE ppl_vf ppl_leaky_relu(ppl_vf x, float alpha) {
    return ppl_act_select(x >= ppl_act_splat(0.0f), x, x * ppl_act_splat(alpha));
}

PPL_ACT_INLINE ppl_vf ppl_clip(ppl_vf x, float lo, float hi) {
    /* NaN x passes through, as in numpy.clip.  NaN bounds are the caller's business (the
     * Clip kernel follows onnx.reference: any NaN bound gives NaN everywhere). */
    return ppl_act_min_keepnan(ppl_act_max_keepnan(x, lo), hi);
}

/* exp(x), relative error < 2e-7 on [-87.33, 88.72] (measured: below 1e-7 on every tier);
 * inf above; NaN for NaN.  Below: 0 on the generic tiers; on AVX-512 the subnormal (one
 * rounding of a result accurate to 1e-7) down to -103.97, 0 past it.
 *
 * c x = n*ln2 + r with |r| <= ln2/2, exp(c x) = 2**n * e**r.  The helpers below serve exp,
 * expm1 (ELU's family, tanh) and sigmoid/swish, with c a constant power of two or its
 * negative (1, -1, -2, 1/2) that they fold into their constants, so that no caller pays for the
 * product c x:
 *   ppl_exp_reduce   n (a float) and u = r / c, from an x already clamped to where n*ln2
 *                    is exact and the reduction finite
 *   ppl_exp_poly     e**r = 1 + r + r**2 Q(r) by Horner's scheme in u (the coefficients
 *                    times powers of c: exact).  Q of degree 4 fitted here (minimax on
 *                    e**r's relative error, float32 coefficients): truncation < 5e-9, one
 *                    Horner step less than Cephes' expf
 *   ppl_exp_scale    p * 2**n: AVX-512's vscalefps, which is exact down to the subnormals
 *                    and gives inf past the top by itself; elsewhere from exponent bits. */
#if PPL_VLEN == 16 && defined(__AVX512F__) && defined(__AVX512DQ__)
#define PPL_ACT_SCALEF 1
#else
#define PPL_ACT_SCALEF 0
#endif

/* The clamps of c x: exp(-104) already rounds to 0 (below half the least subnormal) and
 * exp(89) to inf, so clamping |c x| to 104 changes no result and keeps n*ln2 exact and the
 * reduction finite for +-inf and huge |x|.  The generic scaling needs a normal 2**n, hence
 * its own, narrower bounds, and the selects of ppl_exp_c for the results past them. */
#if PPL_ACT_SCALEF
#define PPL_EXP_LO (-104.0f)
#define PPL_EXP_HI 104.0f
#else
#define PPL_EXP_LO (-87.336544f)
#define PPL_EXP_HI 88.72283935546875f
#endif

/* n = round(c x log2(e)) and u = x - n ln2 / c (ln2 in two parts, n ln2_hi / c exact), so
 * that r = c u.  *k gets the bits of n + 1.5 * 2**23 for the generic scaling (n in its low
 * mantissa bits). */
PPL_ACT_INLINE ppl_vf ppl_exp_reduce(ppl_vf x, const float c, ppl_vf *fn, ppl_vf *k) {
    const ppl_vf t = x * ppl_act_splat(c * 1.44269504088896341f);
#if PPL_ACT_SCALEF
    *fn = (ppl_vf)_mm512_roundscale_ps((__m512)t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *k = *fn;
#else
    /* the 1.5 * 2**23 trick: adding it rounds to an integer (two adds, no conversion) */
    const ppl_vf magic = ppl_act_splat(12582912.0f);
    *k = t + magic;
    *fn = *k - magic;
#endif
    return x - *fn * ppl_act_splat(0.693359375f / c) - *fn * ppl_act_splat(-2.12194440e-4f / c);
}

static const float PPL_EXP_Q[5] = {0.4999999403953552f, 0.16666516661643982f,
                                   0.041668426245450974f, 0.008369123563170433f,
                                   0.0013813755940645933f};

/* sum_j a[j] (c u)**j for j < n, Horner's scheme in u (c a constant: folded). */
PPL_ACT_INLINE ppl_vf ppl_exp_poly_c(ppl_vf u, const float *a, const int n, const float c) {
    float cj = 1.0f;
    for (int j = 0; j < n - 1; j++) cj *= c;
    ppl_vf p = ppl_act_splat(a[n - 1] * cj);
    for (int j = n - 2; j >= 0; j--) {
        cj /= c;
        p = p * u + ppl_act_splat(a[j] * cj);
    }
    return p;
}

/* (e**r - 1) / c = u + c u**2 Q(c u), r = c u: relative precision near 0 (expm1) */
PPL_ACT_INLINE ppl_vf ppl_expm1_poly(ppl_vf u, const float c) {
    const float q[5] = {PPL_EXP_Q[0] * c, PPL_EXP_Q[1] * c, PPL_EXP_Q[2] * c, PPL_EXP_Q[3] * c,
                        PPL_EXP_Q[4] * c};
    return (u * u) * ppl_exp_poly_c(u, q, 5, c) + u;
}

/* e**r = 1 + r + r**2 Q(r), r = c u: with FMA by Horner's scheme to the end (one fma a
 * term); without, 1 + c (u + c u**2 Q) (the same count of operations, and one rounding
 * less in the last terms: measured 9.5e-8 -> 8e-8 on SSE). */
PPL_ACT_INLINE ppl_vf ppl_exp_poly(ppl_vf u, const float c) {
#ifdef __FMA__
    const float a[7] = {1.0f, 1.0f, PPL_EXP_Q[0], PPL_EXP_Q[1], PPL_EXP_Q[2], PPL_EXP_Q[3],
                        PPL_EXP_Q[4]};
    return ppl_exp_poly_c(u, a, 7, c);
#else
    return ppl_act_splat(1.0f) + ppl_act_splat(c) * ppl_expm1_poly(u, c);
#endif
}

/* p * 2**n; k from ppl_exp_reduce.  Generic: 2**n from exponent bits (k's bits are
 * 0x4b400000 + n, whose high bits the shift drops; unsigned, so the garbage n of a NaN
 * shifts without UB); n must be in [-126, 127], or [-126, 128] with two_factors (exp's top,
 * x up to log(FLT_MAX): 2**(n/2) * 2**(n - n/2)). */
PPL_ACT_INLINE ppl_vf ppl_exp_scale(ppl_vf p, ppl_vf fn, ppl_vf k, const int two_factors) {
#if PPL_ACT_SCALEF
    (void)k;
    (void)two_factors;
    return (ppl_vf)_mm512_scalef_ps((__m512)p, (__m512)fn);
#else
    (void)fn;
    if (!two_factors) return p * (ppl_vf)(((ppl_vu)k + 127u) << 23);
    const ppl_vi n = (ppl_vi)k - 0x4b400000;
    const ppl_vi n1 = n >> 1;
    p *= (ppl_vf)((ppl_vu)(n1 + 127) << 23);
    return p * (ppl_vf)((ppl_vu)(n - n1 + 127) << 23);
#endif
}

/* exp(c x) for x clamped to c x in [LO, HI] */
PPL_ACT_INLINE ppl_vf ppl_exp_core(ppl_vf xc, const float c, const int nonpos) {
    ppl_vf fn, k;
    const ppl_vf u = ppl_exp_reduce(xc, c, &fn, &k);
    return ppl_exp_scale(ppl_exp_poly(u, c), fn, k, !nonpos);
}

/* exp(c x).  nonpos (a constant) promises c x <= 0 or NaN, which saves the checks against
 * the top.  The clamps keep NaN (vrangeps, one instruction for both, would not). */
PPL_ACT_INLINE ppl_vf ppl_exp_c(ppl_vf x, const float c, const int nonpos) {
    /* x's bounds: c x >= LO, c x <= HI */
    const float lo = c > 0 ? PPL_EXP_LO / c : PPL_EXP_HI / c;
    const float hi = c > 0 ? PPL_EXP_HI / c : PPL_EXP_LO / c;
    ppl_vf xc = x;
    if (c > 0 || !nonpos) xc = ppl_act_max_keepnan(xc, lo);
    if (c < 0 || !nonpos) xc = ppl_act_min_keepnan(xc, hi);
    const ppl_vf p = ppl_exp_core(xc, c, nonpos);
#if PPL_ACT_SCALEF
    return p;
#else
    const ppl_vf zero = ppl_act_splat(0.0f), inf = ppl_act_splat(__builtin_inff());
    const ppl_vi under = c > 0 ? x < ppl_act_splat(lo) : x > ppl_act_splat(hi);
    const ppl_vi over = c > 0 ? x > ppl_act_splat(hi) : x < ppl_act_splat(lo);
    const ppl_vf z = ppl_act_select(under, zero, p);
    return nonpos ? z : ppl_act_select(over, inf, z);
#endif
}

/* exp(x); nonpos as for ppl_exp_c */
PPL_ACT_INLINE ppl_vf ppl_exp_impl(ppl_vf x, const int nonpos) {
    return ppl_exp_c(x, 1.0f, nonpos);
}

PPL_ACT_INLINE ppl_vf ppl_exp(ppl_vf x) { return ppl_exp_c(x, 1.0f, 0); }

/* (exp(c x) - 1) / 2 for an x the caller has clamped to c x in [-20, 89] (below -20,
 * exp(c x) - 1 is -1 to float precision): 2**n e**r - 1 = 2 (s (e**r - 1) + (s - 1/2)) with
 * s = 2**(n-1), where e**r - 1 = c (u + c u**2 Q(c u)) keeps r's relative precision near
 * 0, s - 1/2 is exact for n >= -23 and s stays finite up to n = 128 (the doubling, left to
 * the caller's constants, overflows when the result does). */
PPL_ACT_INLINE ppl_vf ppl_expm1_half_c(ppl_vf x, const float c) {
    ppl_vf fn, k;
    const ppl_vf u = ppl_exp_reduce(x, c, &fn, &k);
    const ppl_vf w = ppl_expm1_poly(u, c); /* (e**r - 1) / c */
#if PPL_ACT_SCALEF
    (void)k;
    const ppl_vf sc = (ppl_vf)_mm512_scalef_ps((__m512)ppl_act_splat(0.5f * c), (__m512)fn);
    const ppl_vf s_half = sc * ppl_act_splat(1.0f / c) - ppl_act_splat(0.5f);
#else
    (void)fn;
    const ppl_vf s = (ppl_vf)(((ppl_vu)k + 126u) << 23); /* n - 1 in [-30, 127] */
    const ppl_vf sc = s * ppl_act_splat(c), s_half = s - ppl_act_splat(0.5f);
#endif
    return sc * w + s_half;
}

/* (exp(x) - 1) / 2, x clamped here to [-20, 89] (n <= 128; exp(89) - 1 is inf once
 * doubled); nonpos (a constant): the caller discards lanes with x > 0, so the top is not
 * checked. */
PPL_ACT_INLINE ppl_vf ppl_expm1_half(ppl_vf x, const int nonpos) {
    ppl_vf xc = ppl_act_max_keepnan(x, -20.0f);
    if (!nonpos) xc = ppl_act_min_keepnan(xc, 89.0f);
    return ppl_expm1_half_c(xc, 1.0f);
}

/* 1 / (1 + exp(-x)), no cancellation anywhere (for x << 0 it is 1 / exp(-x), as precise as
 * exp); exp(-x) = inf below -88.7 gives 0, NaN stays NaN.  The generic tiers, where the
 * full exp costs two more selects and a second scaling, take exp(-|x|) (never overflows)
 * and e / (1 + e) for x < 0 (full relative precision, where 1 - 1 / (1 + exp(x)) would
 * cancel). */
PPL_ACT_INLINE ppl_vf ppl_sigmoid(ppl_vf x) {
    const ppl_vf one = ppl_act_splat(1.0f);
#if PPL_ACT_SCALEF
    return one / (one + ppl_exp_c(x, -1.0f, 0));
#else
    const ppl_vf e = ppl_exp_c(ppl_act_abs(x), -1.0f, 1);
    const ppl_vf r = one / (one + e);
    return ppl_act_select(x >= ppl_act_splat(0.0f), r, e * r);
#endif
}

/* tanh(|x|) = -m / (2 + m) = h / (-1 - h), m = expm1(-2|x|) = 2h in (-1, 0]: relative
 * precision down to 0 (no separate polynomial near 0), |x| capped at 10, where tanh rounds
 * to 1; x's sign after. */
PPL_ACT_INLINE ppl_vf ppl_tanh(ppl_vf x) {
    const ppl_vf a = ppl_act_min_keepnan(ppl_act_abs(x), 10.0f);
    const ppl_vf h = ppl_expm1_half_c(a, -2.0f);
    return ppl_act_copysign(h / (ppl_act_splat(-1.0f) - h), x);
}

PPL_ACT_INLINE ppl_vf ppl_hard_swish(ppl_vf x) {
    const ppl_vf g = x * ppl_act_splat(1.0f / 6.0f) + ppl_act_splat(0.5f);
    return x * ppl_clip(g, 0.0f, 1.0f);
}

/* sqrt and rounding have an instruction on every tier (SSE4.1 is the floor). */
PPL_ACT_INLINE ppl_vf ppl_act_sqrt(ppl_vf x) {
#if PPL_VLEN == 16
    return (ppl_vf)_mm512_sqrt_ps((__m512)x);
#elif PPL_VLEN == 8
    return (ppl_vf)_mm256_sqrt_ps((__m256)x);
#else
    return (ppl_vf)_mm_sqrt_ps((__m128)x);
#endif
}

#if PPL_VLEN == 16
#define PPL_ACT_ROUND_MODE(x, mode) \
    (ppl_vf)_mm512_roundscale_ps((__m512)(x), (mode) | _MM_FROUND_NO_EXC)
#elif PPL_VLEN == 8
#define PPL_ACT_ROUND_MODE(x, mode) (ppl_vf)_mm256_round_ps((__m256)(x), (mode) | _MM_FROUND_NO_EXC)
#else
#define PPL_ACT_ROUND_MODE(x, mode) (ppl_vf)_mm_round_ps((__m128)(x), (mode) | _MM_FROUND_NO_EXC)
#endif

PPL_ACT_INLINE ppl_vf ppl_floor(ppl_vf x) { return PPL_ACT_ROUND_MODE(x, _MM_FROUND_TO_NEG_INF); }
PPL_ACT_INLINE ppl_vf ppl_ceil(ppl_vf x) { return PPL_ACT_ROUND_MODE(x, _MM_FROUND_TO_POS_INF); }
PPL_ACT_INLINE ppl_vf ppl_round(ppl_vf x) {
    return PPL_ACT_ROUND_MODE(x, _MM_FROUND_TO_NEAREST_INT);
}

/* ---- Arithmetic and exponential family ------------------------------------------------ */

PPL_ACT_INLINE ppl_vf ppl_sign(ppl_vf x) {
    /* 0 and NaN stay as they are (as numpy.sign). */
    const ppl_vf r = ppl_act_select(x > ppl_act_splat(0.0f), ppl_act_splat(1.0f), x);
    return ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(-1.0f), r);
}

/* log(x), Cephes' logf (relative error < 2e-7): x = m * 2**e with m in [sqrt(1/2), sqrt(2)),
 * log(1 + (m - 1)) by a polynomial.  log(0) = -inf, log(x < 0) = NaN, log(inf) = inf;
 * subnormal x are scaled by 2**23 first. */
PPL_ACT_INLINE ppl_vf ppl_log(ppl_vf x) {
    static const float P[9] = {3.3333331174E-1f,  -2.4999993993E-1f, 2.0000714765E-1f,
                               -1.6668057665E-1f, 1.4249322787E-1f,  -1.2420140846E-1f,
                               1.1676998740E-1f,  -1.1514610310E-1f, 7.0376836292E-2f};
    const ppl_vf one = ppl_act_splat(1.0f);
    const ppl_vi sub = x < ppl_act_splat(1.17549435e-38f);
    const ppl_vf xs = ppl_act_select(sub, x * ppl_act_splat(8388608.0f), x);
    const ppl_vi bits = (ppl_vi)xs;
    /* m in [0.5, 1), x = m * 2**e */
    ppl_vi e = ((bits >> 23) & 0xff) - 126;
    e -= sub & 23;
    ppl_vf m = (ppl_vf)((bits & 0x007fffff) | 0x3f000000);
    const ppl_vi lo = m < ppl_act_splat(0.707106781186547524f);
    ppl_vf fe = __builtin_convertvector(e, ppl_vf);
    fe = ppl_act_select(lo, fe - one, fe);
    m = ppl_act_select(lo, m + m, m) - one;
    const ppl_vf z = m * m;
    ppl_vf y = ppl_act_poly(m, P, 9) * m * z;
    y += fe * ppl_act_splat(-2.12194440e-4f);
    y -= ppl_act_splat(0.5f) * z;
    ppl_vf r = m + y + fe * ppl_act_splat(0.693359375f);
    r = ppl_act_select(x == ppl_act_splat(__builtin_inff()), x, r);
    r = ppl_act_select(x == ppl_act_splat(0.0f), ppl_act_splat(-__builtin_inff()), r);
    r = ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(__builtin_nanf("")), r);
    return ppl_act_select(x != x, x, r);
}

/* log(1 + u) for u >= 0 (or inf, NaN): log(w) * u / (w - 1) with w = 1 + u corrects the
 * rounding of w (Goldberg), so small u keep full relative precision. */
PPL_ACT_INLINE ppl_vf ppl_log1p_nonneg(ppl_vf u) {
    const ppl_vf w = u + ppl_act_splat(1.0f);
    const ppl_vf d = w - ppl_act_splat(1.0f);
    const ppl_vf r = ppl_log(w) * (u / d);
    /* w == 1: u is below half an ulp of 1, log(1 + u) = u; u = inf: inf */
    const ppl_vf r2 = ppl_act_select(u == ppl_act_splat(__builtin_inff()), u, r);
    return ppl_act_select(d == ppl_act_splat(0.0f), u, r2);
}

PPL_ACT_INLINE ppl_vf ppl_softplus(ppl_vf x) {
    /* max(x, 0) + log(1 + exp(-|x|)): no overflow, and exact tails (x for x >> 0). */
    const ppl_vf m = ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(0.0f), x);
    return m + ppl_log1p_nonneg(ppl_exp_c(ppl_act_abs(x), -1.0f, 1));
}

PPL_ACT_INLINE ppl_vf ppl_softsign(ppl_vf x) {
    const ppl_vf ax = ppl_act_abs(x);
    const ppl_vf r = x / (ppl_act_splat(1.0f) + ax);
    /* the limit +-1 at +-inf, where the formula gives inf / inf */
    return ppl_act_select(ax == ppl_act_splat(__builtin_inff()),
                          ppl_act_copysign(ppl_act_splat(1.0f), x), r);
}

PPL_ACT_INLINE ppl_vf ppl_elu(ppl_vf x, float alpha) {
    return ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(2 * alpha) * ppl_expm1_half(x, 1),
                          x);
}

PPL_ACT_INLINE ppl_vf ppl_selu(ppl_vf x, float alpha, float gamma) {
    const ppl_vf r = ppl_act_select(x <= ppl_act_splat(0.0f),
                                    ppl_act_splat(2 * alpha) * ppl_expm1_half(x, 1), x);
    return ppl_act_splat(gamma) * r;
}

PPL_ACT_INLINE ppl_vf ppl_celu(ppl_vf x, float alpha) {
    const ppl_vf t = ppl_act_splat(2 * alpha) * ppl_expm1_half(x / ppl_act_splat(alpha), 0);
    return ppl_relu(x) + ppl_act_select(t > ppl_act_splat(0.0f), ppl_act_splat(0.0f), t);
}

PPL_ACT_INLINE ppl_vf ppl_hard_sigmoid(ppl_vf x, float alpha, float beta) {
    return ppl_clip(x * ppl_act_splat(alpha) + ppl_act_splat(beta), 0.0f, 1.0f);
}

/* ThresholdedRelu and Shrink follow the spec's "0 otherwise" literally, as onnx.reference
 * and ONNX Runtime do: NaN gives 0. */
PPL_ACT_INLINE ppl_vf ppl_thresholded_relu(ppl_vf x, float alpha) {
    return ppl_act_select(x > ppl_act_splat(alpha), x, ppl_act_splat(0.0f));
}

PPL_ACT_INLINE ppl_vf ppl_shrink(ppl_vf x, float bias, float lambd) {
    const ppl_vf r = ppl_act_select(x > ppl_act_splat(lambd), x - ppl_act_splat(bias),
                                    ppl_act_splat(0.0f));
    return ppl_act_select(x < ppl_act_splat(-lambd), x + ppl_act_splat(bias), r);
}

/* Swish (SiLU when alpha = 1): x * sigmoid(alpha * x); 0 at x = -inf (alpha > 0), where
 * 0 * -inf would be NaN.  AVX-512: x / (1 + exp(-alpha * x)), one division, 0 where exp is
 * inf; alpha = 1 (a branch the loops hoist) needs no product, and clamping x at -89.7, where
 * exp(-x) is already inf, replaces that check. */
PPL_ACT_INLINE ppl_vf ppl_swish(ppl_vf x, float alpha) {
#if PPL_ACT_SCALEF
    const ppl_vf one = ppl_act_splat(1.0f);
    if (alpha == 1.0f) {
        /* exp's argument may lose a NaN (vrangeps: |xl| <= 104, one instruction for the
         * two clamps), the numerator keeps it */
        const ppl_vf xl = ppl_act_max_keepnan(x, -89.7f);
        const ppl_vf xc = (ppl_vf)_mm512_range_ps((__m512)xl, (__m512)ppl_act_splat(104.0f), 2);
        return xl / (one + ppl_exp_core(xc, -1.0f, 0));
    }
    const ppl_vf e = ppl_exp(x * ppl_act_splat(-alpha));
    return ppl_act_select(e == ppl_act_splat(__builtin_inff()), ppl_act_splat(0.0f),
                          x / (one + e));
#else
    if (alpha == 1.0f) {
        /* The same one division.  exp(-x) with x kept within +-87.34, so that 2**n is one
         * normal factor (|n| <= 126) and exp(-x) finite; below -87.34, swish's magnitude is
         * under 1e-36 and it gives 0, as the route through sigmoid does.  About a third
         * fewer operations than that route (exp of |x|, a division, two selects): `perf` on
         * EfficientNet-B0 at the fma tier, the Swish over stored conv tiles went from 13.2%
         * to 10.2% of the samples (the model's time, 15.4-15.5 ms, within the noise). */
        const ppl_vf xc = ppl_act_min_keepnan(ppl_act_max_keepnan(x, PPL_EXP_LO), -PPL_EXP_LO);
        ppl_vf fn, k;
        const ppl_vf u = ppl_exp_reduce(xc, -1.0f, &fn, &k);
        const ppl_vf e = ppl_exp_scale(ppl_exp_poly(u, -1.0f), fn, k, 0);
        return ppl_act_select(x < ppl_act_splat(PPL_EXP_LO), ppl_act_splat(0.0f),
                              x / (ppl_act_splat(1.0f) + e));
    }
    const ppl_vf s = ppl_sigmoid(x * ppl_act_splat(alpha));
    return ppl_act_select(s == ppl_act_splat(0.0f), ppl_act_splat(0.0f), x * s);
#endif
}

PPL_ACT_INLINE ppl_vf ppl_mish(ppl_vf x) {
    /* tanh(log(1 + e)) = n / (n + 2) with n = e * (e + 2), e = exp(x): exact for x << 0
     * (n ~ 2e); n / (n + 2) rounds to 1 above x = 20, where e is capped. */
    const ppl_vf e = ppl_exp(ppl_act_min_keepnan(x, 20.0f));
    const ppl_vf n = e * (e + ppl_act_splat(2.0f));
    const ppl_vf r = x * (n / (n + ppl_act_splat(2.0f)));
    return ppl_act_select(n == ppl_act_splat(0.0f), ppl_act_splat(0.0f), r); /* -inf: 0 */
}

/* ---- erf and GELU ----------------------------------------------------------------- */

/* erfc(a) = exp(-a*a) * R(1/a) for a in [1, 4] (R fitted here in double; erfc relative
 * error < 8e-7, mostly the rounding of a*a). */
PPL_ACT_INLINE ppl_vf ppl_erfc_tail(ppl_vf a) {
    static const float R[9] = {2.4699026835151017e-4f, 0.5594154000282288f,
                               0.039473749697208405f,  -0.46206310391426086f,
                               0.47497254610061646f,   -0.2106054574251175f,
                               -0.003244636347517371f, 0.04146644100546837f,
                               -0.012078411877155304f};
    return ppl_exp_c(a * a, -1.0f, 1) * ppl_act_poly(ppl_act_splat(1.0f) / a, R, 9);
}

/* erf(x) = x * P(x*x) for |x| < 1 (relative error < 2e-7). */
PPL_ACT_INLINE ppl_vf ppl_erf_small(ppl_vf x) {
    static const float P[6] = {1.1283791065216064f,    -0.37612390518188477f,
                               0.11280578374862671f,   -0.026720885187387466f,
                               0.004927407950162888f,  -0.0005667938385158777f};
    return x * ppl_act_poly(x * x, P, 6);
}

/* erf: ppl_erf_small for |x| < 1, 1 - erfc(|x|) with x's sign up to |x| = 4, where erf
 * rounds to +-1. */
PPL_ACT_INLINE ppl_vf ppl_erf(ppl_vf x) {
    const ppl_vf ax = ppl_act_abs(x);
    const ppl_vf small = ppl_erf_small(x);
    ppl_vf a = ppl_act_select(ax > ppl_act_splat(4.0f), ppl_act_splat(4.0f), ax);
    a = ppl_act_select(a < ppl_act_splat(1.0f), ppl_act_splat(1.0f), a);
    const ppl_vf big = ppl_act_copysign(ppl_act_splat(1.0f) - ppl_erfc_tail(a), x);
    return ppl_act_select(ax < ppl_act_splat(1.0f), small, ppl_act_select(x != x, x, big));
}

/* erfc(t) / 2 = 2**Q(t) for t in [0, 4], Q fitted here (in double, each coefficient then
 * rounded to float before the next was fitted; Q(0) = -1 exactly).  Relative error under
 * 5.6e-7 for t < 1, rising to about 3e-6 at t = 4: Q's value, down to -26.95, keeps 24 bits,
 * and so an absolute error of an ulp of it.  No division, one exponential
 * (of base 2: Q is already in log2, so the reduction is one rounding), one polynomial for the
 * whole range.  Against what it replaced (ppl_erf_small below |z| = 1, ppl_erfc_tail's
 * exp(-a*a) R(1/a) with its division above), on the 2-core Zen 4: 0.69 -> 0.47 ns an
 * element in L1 on the avx512 tier (a C loop over this header), 1.09 -> 0.75 fma, 3.5 -> 3.1
 * sse; the Gelu op over 1M floats 0.72 -> 0.52 avx512, 1.07 -> 0.96 fma. */
PPL_ACT_INLINE ppl_vf ppl_half_erfc(ppl_vf t) {
    static const float Q[11] = {-1.0f,           -1.627916932f,    -0.9183238149f,
                                -0.1488071531f,  0.02873096429f,   -1.026196405e-3f,
                                -1.575974515e-3f, 6.069353549e-4f, -1.156935250e-4f,
                                1.187850012e-5f, -5.219439458e-7f};
    /* 2**f for |f| <= 1/2, relative error 1.8e-7 */
    static const float E[6] = {1.0f,          0.6931472421f,   0.2402223945f,
                               0.05550277606f, 9.671643376e-3f, 1.341580530e-3f};
    const ppl_vf q = ppl_act_poly(t, Q, 11); /* in [-26.95, -1]: n in [-27, -1] */
    const ppl_vf n = PPL_ACT_ROUND_MODE(q, _MM_FROUND_TO_NEAREST_INT);
    const ppl_vf p = ppl_act_poly(q - n, E, 6);
#if PPL_ACT_SCALEF
    return (ppl_vf)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
    return p * (ppl_vf)((__builtin_convertvector(n, ppl_vi) + 127) << 23);
#endif
}

/* x * Phi(x).  Exact: Phi(x) = erfc(-z) / 2 with z = x / sqrt 2, that is h = erfc(|z|) / 2
 * below 0 and 1 - h above (no cancellation on either side: x - x h; the sign bit picks the
 * side, so that -0 gives x h = -0, as numpy and PyTorch).  Past |z| = 4, Phi
 * is 0 or 1 (the result's error there is under 4.4e-8, at x = -5.66; float32 erf-GELU in
 * ONNX Runtime and PyTorch rounds to 0 from about the same point, through 1 + erf(z)).
 * p0 != 0: PyTorch's tanh approximation, Phi = (1 + tanh(u)) / 2 = sigmoid(2u),
 * u = sqrt(2/pi) (x + 0.044715 x**3). */
PPL_ACT_INLINE ppl_vf ppl_gelu(ppl_vf x, float approximate) {
    if (approximate != 0.0f) {
        const ppl_vf u = x + ppl_act_splat(0.044715f) * x * x * x;
        const ppl_vf phi = ppl_sigmoid(u * ppl_act_splat(2.0f * 0.7978845608028654f));
        /* Phi = 0 (x far below 0, or -inf): 0 rather than -inf * 0 */
        return ppl_act_select(phi == ppl_act_splat(0.0f), ppl_act_splat(0.0f), x * phi);
    }
    const ppl_vf z = x * ppl_act_splat(0.7071067811865476f);
    const ppl_vf az = ppl_act_abs(z);
    const ppl_vf xh = x * ppl_half_erfc(ppl_act_min_keepnan(az, 4.0f)); /* NaN stays NaN */
    const ppl_vi neg = (ppl_vi)z < (ppl_vi){}; /* the sign bit */
    const ppl_vf y = ppl_act_select(neg, xh, x - xh);
    return ppl_act_select(az >= ppl_act_splat(4.0f),
                          ppl_act_select(neg, ppl_act_splat(0.0f), x), y);
}

/* ---- Trigonometric ------------------------------------------------------------------ */

/* Cephes' reduction: x = j * pi/4 + r, j even, |r| <= pi/4, pi/4 in three parts (j split
 * in two, so that it stays exact far beyond Cephes' 8192): absolute error < 2e-7 up to
 * 2**23 (measured against float64).  Past that it fails, so the finite lanes past it are
 * recomputed by ppl_act_trig_far (libm, exact reduction: sin(1e8) is finite, as in ONNX
 * and numpy); +-inf gives NaN.  Returns r and q = j mod 8 (0, 2, 4 or 6) for |x|. */
#define PPL_ACT_TRIG_MAX 8388608.0f

/* The lanes of x with 2**23 < |x| < inf (kind 0 sin, 1 cos, 2 tan) by libm; y elsewhere.
 * Rare (a model's activations this large are unusual), so a scalar loop behind a test. */
PPL_ACT_INLINE ppl_vf ppl_act_trig_far(ppl_vf x, ppl_vf ax, ppl_vf y, const int kind) {
    const ppl_vi far = (ax > ppl_act_splat(PPL_ACT_TRIG_MAX))
                       & (ax != ppl_act_splat(__builtin_inff()));
    int any = 0;
    for (int i = 0; i < PPL_VLEN; ++i) any |= far[i];
    if (__builtin_expect(!any, 1)) return y;
    for (int i = 0; i < PPL_VLEN; ++i) {
        if (far[i]) y[i] = kind == 0 ? sinf(x[i]) : kind == 1 ? cosf(x[i]) : tanf(x[i]);
    }
    return y;
}
PPL_ACT_INLINE ppl_vf ppl_act_reduce_pio4(ppl_vf ax, ppl_vi *q) {
    ppl_vf j = ppl_floor(ax * ppl_act_splat(1.27323954473516f));
    /* j odd: j + 1 */
    const ppl_vf half = ppl_floor(j * ppl_act_splat(0.5f));
    j = j + (j - half * ppl_act_splat(2.0f));
    const ppl_vf eighth = ppl_floor(j * ppl_act_splat(0.125f));
    *q = __builtin_convertvector(j - eighth * ppl_act_splat(8.0f), ppl_vi);
    /* j = jh + jl, jh a multiple of 4096: with the 8- and 11-bit parts pi/4_1 and pi/4_2,
     * every product below but the last two is exact and every difference before them too,
     * for j < 2**24, with or without FMA. */
    const ppl_vf jh = ppl_floor(j * ppl_act_splat(1.0f / 4096.0f)) * ppl_act_splat(4096.0f);
    const ppl_vf jl = j - jh;
    const ppl_vf dp1 = ppl_act_splat(0.78515625f), dp2 = ppl_act_splat(2.4187564849853515625e-4f);
    ppl_vf r = ax - jh * dp1;
    r = r - jl * dp1;
    r = r - jh * dp2;
    r = r - jl * dp2;
    return r - j * ppl_act_splat(3.77489497744594108e-8f);
}

PPL_ACT_INLINE ppl_vf ppl_act_sin_poly(ppl_vf r, ppl_vf z) {
    static const float S[3] = {-1.6666654611E-1f, 8.3321608736E-3f, -1.9515295891E-4f};
    return ppl_act_poly(z, S, 3) * z * r + r;
}

PPL_ACT_INLINE ppl_vf ppl_act_cos_poly(ppl_vf z) {
    static const float C[3] = {4.166664568298827E-2f, -1.388731625493765E-3f,
                               2.443315711809948E-5f};
    return ppl_act_poly(z, C, 3) * z * z - ppl_act_splat(0.5f) * z + ppl_act_splat(1.0f);
}

/* sin (is_cos = 0) or cos (is_cos = 1); NaN for +-inf and NaN. */
PPL_ACT_INLINE ppl_vf ppl_sincos(ppl_vf x, const int is_cos) {
    const ppl_vf ax = ppl_act_abs(x);
    ppl_vi q;
    const ppl_vf r = ppl_act_reduce_pio4(ax, &q);
    const ppl_vf z = r * r;
    const ppl_vf s = ppl_act_sin_poly(r, z), c = ppl_act_cos_poly(z);
    const ppl_vi swap = (q & 2) != 0;
    ppl_vf y = is_cos ? ppl_act_select(swap, s, c) : ppl_act_select(swap, c, s);
    ppl_vu neg = (ppl_vu)(is_cos ? ((q + 2) & 4) : (q & 4)) << 29;
    if (!is_cos) neg ^= (ppl_vu)x & 0x80000000u;
    y = (ppl_vf)((ppl_vu)y ^ neg);
    y = ppl_act_select(ax > ppl_act_splat(PPL_ACT_TRIG_MAX), ppl_act_splat(__builtin_nanf("")),
                       ppl_act_select(x != x, x, y));
    return ppl_act_trig_far(x, ax, y, is_cos);
}

PPL_ACT_INLINE ppl_vf ppl_tan(ppl_vf x) {
    static const float T[6] = {3.33331568548E-1f, 1.33387994085E-1f, 5.34112807005E-2f,
                               2.44301354525E-2f, 3.11992232697E-3f, 9.38540185543E-3f};
    const ppl_vf ax = ppl_act_abs(x);
    ppl_vi q;
    const ppl_vf r = ppl_act_reduce_pio4(ax, &q);
    const ppl_vf z = r * r;
    ppl_vf y = ppl_act_poly(z, T, 6) * z * r + r;
    y = ppl_act_select((q & 2) != 0, ppl_act_splat(-1.0f) / y, y);
    y = (ppl_vf)((ppl_vu)y ^ ((ppl_vu)x & 0x80000000u));
    y = ppl_act_select(ax > ppl_act_splat(PPL_ACT_TRIG_MAX), ppl_act_splat(__builtin_nanf("")),
                       ppl_act_select(x != x, x, y));
    return ppl_act_trig_far(x, ax, y, 2);
}

/* asin(s) for |s| <= 1/2, z = s * s: Cephes' asinf polynomial. */
PPL_ACT_INLINE ppl_vf ppl_act_asin_core(ppl_vf s, ppl_vf z) {
    static const float A[5] = {1.6666752422E-1f, 7.4953002686E-2f, 4.5470025998E-2f,
                               2.4181311049E-2f, 4.2163199048E-2f};
    return ppl_act_poly(z, A, 5) * z * s + s;
}

PPL_ACT_INLINE ppl_vf ppl_asin(ppl_vf x) {
    /* |x| > 1/2: asin(|x|) = pi/2 - 2 asin(sqrt((1 - |x|) / 2)); |x| > 1: NaN from sqrt */
    const ppl_vf ax = ppl_act_abs(x);
    const ppl_vi big = ax > ppl_act_splat(0.5f);
    const ppl_vf zb = ppl_act_splat(0.5f) * (ppl_act_splat(1.0f) - ax);
    const ppl_vf sb = ppl_act_sqrt(zb);
    const ppl_vf s = ppl_act_select(big, sb, ax);
    const ppl_vf z = ppl_act_select(big, zb, ax * ax);
    ppl_vf r = ppl_act_asin_core(s, z);
    r = ppl_act_select(big, ppl_act_splat(1.5707963267948966f) - (r + r), r);
    return ppl_act_select(x != x, x, ppl_act_copysign(r, x));
}

PPL_ACT_INLINE ppl_vf ppl_acos(ppl_vf x) {
    /* x > 1/2: 2 asin(sqrt((1 - x) / 2)); x < -1/2: pi - that of -x; else pi/2 - asin(x) */
    const ppl_vf ax = ppl_act_abs(x);
    const ppl_vi big = ax > ppl_act_splat(0.5f);
    const ppl_vf zb = ppl_act_splat(0.5f) * (ppl_act_splat(1.0f) - ax);
    const ppl_vf s = ppl_act_select(big, ppl_act_sqrt(zb), x);
    const ppl_vf z = ppl_act_select(big, zb, x * x);
    const ppl_vf a = ppl_act_asin_core(s, z);
    const ppl_vf twice = a + a;
    ppl_vf r = ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(3.141592653589793f) - twice,
                              twice);
    r = ppl_act_select(big, r, ppl_act_splat(1.5707963267948966f) - a);
    return ppl_act_select(x != x, x, r);
}

PPL_ACT_INLINE ppl_vf ppl_atan(ppl_vf x) {
    /* Cephes' atanf: |x| reduced to [0, tan(pi/8)] around 0, pi/4 or pi/2. */
    static const float A[4] = {-3.33329491539E-1f, 1.99777106478E-1f, -1.38776856032E-1f,
                               8.05374449538E-2f};
    const ppl_vf ax = ppl_act_abs(x), one = ppl_act_splat(1.0f);
    const ppl_vi big = ax > ppl_act_splat(2.414213562373095f);
    const ppl_vi mid = ax > ppl_act_splat(0.4142135623730950f);
    ppl_vf t = ppl_act_select(mid, (ax - one) / (ax + one), ax);
    t = ppl_act_select(big, -one / ax, t);
    ppl_vf base = ppl_act_select(mid, ppl_act_splat(0.7853981633974483f), ppl_act_splat(0.0f));
    base = ppl_act_select(big, ppl_act_splat(1.5707963267948966f), base);
    const ppl_vf z = t * t;
    const ppl_vf r = base + (ppl_act_poly(z, A, 4) * z * t + t);
    return ppl_act_select(x != x, x, ppl_act_copysign(r, x));
}

/* ---- Hyperbolic --------------------------------------------------------------------- */

/* (h / 2) * h +- 1 / (2 h * h), h = exp(|x| / 2): e**|x| / 2 stays finite up to where
 * sinh and cosh themselves overflow (|x| = 89.4), past exp's own limit at 88.7. */
PPL_ACT_INLINE ppl_vf ppl_act_half_exp_pair(ppl_vf ax, ppl_vf *inv) {
    const ppl_vf h = ppl_exp_c(ax, 0.5f, 0);
    *inv = ppl_act_splat(0.5f) / (h * h);
    return (ppl_act_splat(0.5f) * h) * h;
}

PPL_ACT_INLINE ppl_vf ppl_sinh(ppl_vf x) {
    static const float S[3] = {1.66667160211E-1f, 8.33028376239E-3f, 2.03721912945E-4f};
    const ppl_vf ax = ppl_act_abs(x);
    ppl_vf inv;
    const ppl_vf big = ppl_act_half_exp_pair(ax, &inv) - inv;
    const ppl_vf z = x * x;
    const ppl_vf small = ppl_act_poly(z, S, 3) * z * x + x;
    return ppl_act_select(ax < ppl_act_splat(1.0f), small, ppl_act_copysign(big, x));
}

PPL_ACT_INLINE ppl_vf ppl_cosh(ppl_vf x) {
    ppl_vf inv;
    const ppl_vf r = ppl_act_half_exp_pair(ppl_act_abs(x), &inv);
    return r + inv;
}

PPL_ACT_INLINE ppl_vf ppl_asinh(ppl_vf x) {
    static const float A[4] = {-1.6666288134E-1f, 7.4847586088E-2f, -4.2699340972E-2f,
                               2.0122003309E-2f};
    const ppl_vf ax = ppl_act_abs(x), one = ppl_act_splat(1.0f);
    const ppl_vf z = x * x;
    const ppl_vf small = ppl_act_poly(z, A, 4) * z * ax + ax;
    /* above 1500, sqrt(x*x + 1) = |x| to float precision (and x*x may overflow) */
    const ppl_vi huge = ax > ppl_act_splat(1500.0f);
    const ppl_vf arg = ppl_act_select(huge, ax, ax + ppl_act_sqrt(z + one));
    const ppl_vf big = ppl_log(arg) + ppl_act_select(huge, ppl_act_splat(0.693147180559945309f),
                                                     ppl_act_splat(0.0f));
    const ppl_vf r = ppl_act_select(ax < ppl_act_splat(0.5f), small, big);
    return ppl_act_select(x != x, x, ppl_act_copysign(r, x));
}

PPL_ACT_INLINE ppl_vf ppl_acosh(ppl_vf x) {
    static const float A[5] = {1.4142135263E0f, -1.1784741703E-1f, 2.6454905019E-2f,
                               -7.5272886713E-3f, 1.7596881071E-3f};
    const ppl_vf one = ppl_act_splat(1.0f);
    const ppl_vf z = x - one;
    /* near 1: sqrt(z) * A(z); x < 1 gives NaN there, through sqrt */
    const ppl_vf near = ppl_act_poly(z, A, 5) * ppl_act_sqrt(z);
    const ppl_vi huge = x > ppl_act_splat(1500.0f);
    const ppl_vf arg = ppl_act_select(huge, x, x + ppl_act_sqrt(z * (x + one)));
    const ppl_vf far = ppl_log(arg) + ppl_act_select(huge, ppl_act_splat(0.693147180559945309f),
                                                     ppl_act_splat(0.0f));
    return ppl_act_select(z < ppl_act_splat(0.5f), near, far);
}

PPL_ACT_INLINE ppl_vf ppl_atanh(ppl_vf x) {
    static const float A[5] = {3.33337300303E-1f, 1.99782164500E-1f, 1.46691431730E-1f,
                               8.24370301058E-2f, 1.81740078349E-1f};
    const ppl_vf one = ppl_act_splat(1.0f);
    const ppl_vf z = x * x;
    const ppl_vf small = ppl_act_poly(z, A, 5) * z * x + x;
    const ppl_vf big = ppl_act_splat(0.5f) * ppl_log((one + x) / (one - x));
    return ppl_act_select(ppl_act_abs(x) < ppl_act_splat(0.5f), small, big);
}

/* One vector through activation `code`, every code inline: for the loops below, where
 * `code` is a constant and the switch folds away. */
PPL_ACT_INLINE ppl_vf ppl_activation_inline(ppl_vf x, int code, float p0, float p1) {
    switch (code) {
    case PPL_ACT_RELU: return ppl_relu(x);
    case PPL_ACT_LEAKY_RELU: return ppl_leaky_relu(x, p0);
    case PPL_ACT_CLIP: return ppl_clip(x, p0, p1);
    case PPL_ACT_SIGMOID: return ppl_sigmoid(x);
    case PPL_ACT_TANH: return ppl_tanh(x);
    case PPL_ACT_HARD_SWISH: return ppl_hard_swish(x);
    case PPL_ACT_ABS: return ppl_act_abs(x);
    case PPL_ACT_NEG: return -x;
    case PPL_ACT_EXP: return ppl_exp(x);
    case PPL_ACT_LOG: return ppl_log(x);
    case PPL_ACT_SQRT: return ppl_act_sqrt(x);
    case PPL_ACT_RECIPROCAL: return ppl_act_splat(1.0f) / x;
    case PPL_ACT_FLOOR: return ppl_floor(x);
    case PPL_ACT_CEIL: return ppl_ceil(x);
    case PPL_ACT_ROUND: return ppl_round(x);
    case PPL_ACT_SIGN: return ppl_sign(x);
    case PPL_ACT_ERF: return ppl_erf(x);
    case PPL_ACT_SIN: return ppl_sincos(x, 0);
    case PPL_ACT_COS: return ppl_sincos(x, 1);
    case PPL_ACT_TAN: return ppl_tan(x);
    case PPL_ACT_ASIN: return ppl_asin(x);
    case PPL_ACT_ACOS: return ppl_acos(x);
    case PPL_ACT_ATAN: return ppl_atan(x);
    case PPL_ACT_SINH: return ppl_sinh(x);
    case PPL_ACT_COSH: return ppl_cosh(x);
    case PPL_ACT_ASINH: return ppl_asinh(x);
    case PPL_ACT_ACOSH: return ppl_acosh(x);
    case PPL_ACT_ATANH: return ppl_atanh(x);
    case PPL_ACT_HARD_SIGMOID: return ppl_hard_sigmoid(x, p0, p1);
    case PPL_ACT_SOFTPLUS: return ppl_softplus(x);
    case PPL_ACT_SOFTSIGN: return ppl_softsign(x);
    case PPL_ACT_ELU: return ppl_elu(x, p0);
    case PPL_ACT_SELU: return ppl_selu(x, p0, p1);
    case PPL_ACT_CELU: return ppl_celu(x, p0);
    case PPL_ACT_GELU: return ppl_gelu(x, p0);
    case PPL_ACT_MISH: return ppl_mish(x);
    case PPL_ACT_THRESHOLDED_RELU: return ppl_thresholded_relu(x, p0);
    case PPL_ACT_SHRINK: return ppl_shrink(x, p0, p1);
    case PPL_ACT_SWISH: return ppl_swish(x, p0);
    default: return x;
    }
}

/* The codes after HARD_SWISH, out of line: callers of ppl_apply_activation with a run-time
 * code (the brgemm and depthwise epilogues) inline only the first six. */
static __attribute__((noinline, unused)) ppl_vf ppl_apply_activation_more(ppl_vf x, int code,
                                                                       float p0, float p1) {
    return ppl_activation_inline(x, code, p0, p1);
}

/* One vector through activation `code`: the six epilogue activations inline, the rest out
 * of line. */
PPL_ACT_INLINE ppl_vf ppl_apply_activation(ppl_vf x, int code, float p0, float p1) {
    switch (code) {
    case PPL_ACT_NONE: return x;
    case PPL_ACT_RELU: return ppl_relu(x);
    case PPL_ACT_LEAKY_RELU: return ppl_leaky_relu(x, p0);
    case PPL_ACT_CLIP: return ppl_clip(x, p0, p1);
    case PPL_ACT_SIGMOID: return ppl_sigmoid(x);
    case PPL_ACT_TANH: return ppl_tanh(x);
    case PPL_ACT_HARD_SWISH: return ppl_hard_swish(x);
    default: return ppl_apply_activation_more(x, code, p0, p1);
    }
}

/* The same for code that inlines many copies (the brgemm epilogue unrolls over a whole
 * register tile): the cheap activations inline, the transcendental ones called out of line,
 * so that each copy stays small (inlining sigmoid and tanh there cost 5% on a GEMM with no
 * activation at all). */
static __attribute__((noinline, unused)) ppl_vf ppl_apply_activation_outlined(ppl_vf x, int code,
                                                                          float p0, float p1) {
    return ppl_apply_activation(x, code, p0, p1);
}

PPL_ACT_INLINE ppl_vf ppl_apply_activation_compact(ppl_vf x, int code, float p0, float p1) {
    switch (code) {
    case PPL_ACT_NONE: return x;
    case PPL_ACT_RELU: return ppl_relu(x);
    case PPL_ACT_LEAKY_RELU: return ppl_leaky_relu(x, p0);
    case PPL_ACT_CLIP: return ppl_clip(x, p0, p1);
    default: return ppl_apply_activation_outlined(x, code, p0, p1);
    }
}

/* y[0..n) = f(x[0..n)) for a constant code: full vectors, then one zero-padded tail. */
PPL_ACT_INLINE void ppl_activation_loop(const int code, const float *x, float *y, ptrdiff_t n,
                                        float p0, float p1) {
    ptrdiff_t i = 0;
    for (; i + PPL_VLEN <= n; i += PPL_VLEN)
        ppl_act_store(y + i, ppl_activation_inline(ppl_act_load(x + i), code, p0, p1));
    if (i < n)
        ppl_act_store_partial(
            y + i, ppl_activation_inline(ppl_act_load_partial(x + i, n - i), code, p0, p1), n - i);
}

#define PPL_ACT_CASE(name) \
    case PPL_ACT_##name: ppl_activation_loop(PPL_ACT_##name, x, y, n, p0, p1); break;

/* y[0..n) = activation(x[0..n)); x == y is allowed.  One loop per code, so that no switch
 * is left inside a loop. */
static __attribute__((unused)) void ppl_activation(const float *x, float *y, ptrdiff_t n,
                                                   int code, float p0, float p1) {
    switch (code) {
    PPL_FOR_EACH_ACTIVATION(PPL_ACT_CASE)
    default:
        if (x != y) __builtin_memmove(y, x, (size_t)n * sizeof(float));
        break;
    }
}
#undef PPL_ACT_CASE

#endif /* PPL_ACTIVATION_FP32_H */
