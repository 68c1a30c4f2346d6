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
 * with NaN are false, so every select below keeps x).  No libm call: exp is Cephes' expf
 * polynomial (the same as exp_fp32 in _kernel_support.pxi) on whole vectors.
 *
 * Every activation maps 0 to a finite value (relu, leaky_relu, tanh, hard_swish: 0; sigmoid:
 * 0.5; clip: a bound, finite for finite bounds), so an N16CX tensor can be processed as one
 * flat buffer: its zero padding lanes stay finite (they do not stay 0; consumers ignore them).
 */
#ifndef PPL_ACTIVATION_FP32_H
#define PPL_ACTIVATION_FP32_H

#ifndef PPL_VLEN
#error "define PPL_VLEN (floats per vector register) before including _activation_fp32.h"
#endif

#include <stddef.h>

#ifndef PPL_BRGEMM_FP32_H /* _brgemm_fp32.h declares the same two types before including us */
typedef float ppl_vf __attribute__((vector_size(PPL_VLEN * 4)));
typedef int ppl_vi __attribute__((vector_size(PPL_VLEN * 4)));
#endif
typedef unsigned ppl_vu __attribute__((vector_size(PPL_VLEN * 4)));

/* Activation codes: must match post_ops.py and post_ops.pxd (a test checks). */
enum {
    PPL_ACT_NONE = 0,
    PPL_ACT_RELU = 1,       /* max(x, 0) */
    PPL_ACT_LEAKY_RELU = 2, /* x >= 0 ? x : p0 * x */
    PPL_ACT_CLIP = 3,       /* min(max(x, p0), p1) */
    PPL_ACT_SIGMOID = 4,    /* 1 / (1 + exp(-x)) */
    PPL_ACT_TANH = 5,       /* tanh(x) */
    PPL_ACT_HARD_SWISH = 6, /* x * min(max(x / 6 + 1/2, 0), 1) */
};

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

PPL_ACT_INLINE ppl_vf ppl_act_load(const float *p) {
    ppl_vf v;
    __builtin_memcpy(&v, p, sizeof v); /* unaligned */
    return v;
}

PPL_ACT_INLINE void ppl_act_store(float *p, ppl_vf v) { __builtin_memcpy(p, &v, sizeof v); }

/* The first n (0 <= n <= PPL_VLEN) floats at p, the other lanes 0: a tail read no further
 * than the buffer's end. */
PPL_ACT_INLINE ppl_vf ppl_act_load_partial(const float *p, ptrdiff_t n) {
    ppl_vf v = ppl_act_splat(0.0f);
    __builtin_memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

PPL_ACT_INLINE void ppl_act_store_partial(float *p, ppl_vf v, ptrdiff_t n) {
    __builtin_memcpy(p, &v, (size_t)n * sizeof(float));
}

/* ---- The activations ---------------------------------------------------------------- */

PPL_ACT_INLINE ppl_vf ppl_relu(ppl_vf x) {
    /* "0 if x < 0" rather than "x if x > 0": NaN passes through, as in numpy.maximum. */
    return ppl_act_select(x < ppl_act_splat(0.0f), ppl_act_splat(0.0f), x);
}

PPL_ACT_INLINE ppl_vf ppl_leaky_relu(ppl_vf x, float alpha) {
    return ppl_act_select(x >= ppl_act_splat(0.0f), x, x * ppl_act_splat(alpha));
}

PPL_ACT_INLINE ppl_vf ppl_clip(ppl_vf x, float lo, float hi) {
    /* NaN x passes through, as in numpy.clip.  NaN bounds are the caller's business (the
     * Clip kernel follows onnx.reference: any NaN bound gives NaN everywhere). */
    x = ppl_act_select(x < ppl_act_splat(lo), ppl_act_splat(lo), x);
    return ppl_act_select(x > ppl_act_splat(hi), ppl_act_splat(hi), x);
}

/* exp(x), relative error < 2e-7 on [-87.33, 88.37]; 0 below, inf above, NaN for NaN.
 * nonpos (a constant) promises x <= 0 or NaN, which saves the checks against the top. */
PPL_ACT_INLINE ppl_vf ppl_exp_impl(ppl_vf x, const int nonpos) {
    const ppl_vf lo = ppl_act_splat(-87.336544f), hi = ppl_act_splat(88.376259f);
    const ppl_vf one = ppl_act_splat(1.0f);
    /* Clamp so that 2**n below stays a normal float (n in [-126, 127]). */
    ppl_vf xc = ppl_act_select(x < lo, lo, x);
    if (!nonpos) xc = ppl_act_select(xc > hi, hi, xc);
    /* n = round(x * log2(e)) by the 1.5 * 2**23 trick: adding it rounds to an integer and
     * leaves n in the low mantissa bits (Cephes floors x * log2(e) + 1/2; either keeps
     * |r| <= ln2/2, and this costs two adds instead of a floor and a conversion). */
    const ppl_vf magic = ppl_act_splat(12582912.0f);
    const ppl_vf k = xc * ppl_act_splat(1.44269504088896341f) + magic;
    const ppl_vf fn = k - magic;
    /* x = n*ln2 + r with |r| <= ln2/2; ln2 is split in two so that n*ln2_hi is exact. */
    const ppl_vf r = xc - fn * ppl_act_splat(0.693359375f) - fn * ppl_act_splat(-2.12194440e-4f);
    ppl_vf p = ppl_act_splat(1.9875691500e-4f);
    p = p * r + ppl_act_splat(1.3981999507e-3f);
    p = p * r + ppl_act_splat(8.3334519073e-3f);
    p = p * r + ppl_act_splat(4.1665795894e-2f);
    p = p * r + ppl_act_splat(1.6666665459e-1f);
    p = p * r + ppl_act_splat(5.0000001201e-1f);
    p = p * r * r + r + one;
    /* 2**n from its exponent bits: k's bits are 0x4b400000 + n, whose high bits the shift
     * drops (unsigned: the garbage n of a NaN shifts without UB). */
    p *= (ppl_vf)(((ppl_vu)k + 127u) << 23);
    p = ppl_act_select(x < lo, ppl_act_splat(0.0f), p);
    return nonpos ? p : ppl_act_select(x > hi, ppl_act_splat(__builtin_inff()), p);
}

PPL_ACT_INLINE ppl_vf ppl_exp(ppl_vf x) { return ppl_exp_impl(x, 0); }

PPL_ACT_INLINE ppl_vf ppl_sigmoid(ppl_vf x) {
    const ppl_vf one = ppl_act_splat(1.0f);
    /* exp(-|x|) never overflows, and e / (1 + e) keeps full relative precision for x << 0,
     * where 1 - 1 / (1 + exp(x)) would cancel. */
    const ppl_vf e = ppl_exp_impl(ppl_act_select(x > ppl_act_splat(0.0f), -x, x), 1);
    const ppl_vf r = one / (one + e);
    return ppl_act_select(x >= ppl_act_splat(0.0f), r, e * r);
}

PPL_ACT_INLINE ppl_vf ppl_tanh(ppl_vf x) {
    /* Cephes' tanhf: an odd polynomial for |x| < 0.625, where 1 - 2 / (exp(2|x|) + 1) would
     * cancel; that formula (with x's sign) above.  Both are computed, one is kept. */
    const ppl_vf one = ppl_act_splat(1.0f), two = ppl_act_splat(2.0f);
    const ppl_vi neg = x < ppl_act_splat(0.0f);
    const ppl_vf ax = ppl_act_select(neg, -x, x);
    ppl_vf big = one - two / (ppl_exp(ax + ax) + one); /* exp may be inf: big = 1 */
    big = ppl_act_select(neg, -big, big);
    const ppl_vf z = x * x;
    ppl_vf p = ppl_act_splat(-5.70498872745e-3f);
    p = p * z + ppl_act_splat(2.06390887954e-2f);
    p = p * z + ppl_act_splat(-5.37397155531e-2f);
    p = p * z + ppl_act_splat(1.33314422036e-1f);
    p = p * z + ppl_act_splat(-3.33332819422e-1f);
    const ppl_vf small = p * z * x + x;
    return ppl_act_select(ax >= ppl_act_splat(0.625f), big, small);
}

PPL_ACT_INLINE ppl_vf ppl_hard_swish(ppl_vf x) {
    const ppl_vf g = x * ppl_act_splat(1.0f / 6.0f) + ppl_act_splat(0.5f);
    return x * ppl_clip(g, 0.0f, 1.0f);
}

/* One vector through activation `code` (a constant after inlining in the loops below). */
PPL_ACT_INLINE ppl_vf ppl_apply_activation(ppl_vf x, int code, float p0, float p1) {
    switch (code) {
    case PPL_ACT_RELU: return ppl_relu(x);
    case PPL_ACT_LEAKY_RELU: return ppl_leaky_relu(x, p0);
    case PPL_ACT_CLIP: return ppl_clip(x, p0, p1);
    case PPL_ACT_SIGMOID: return ppl_sigmoid(x);
    case PPL_ACT_TANH: return ppl_tanh(x);
    case PPL_ACT_HARD_SWISH: return ppl_hard_swish(x);
    default: return x;
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
        ppl_act_store(y + i, ppl_apply_activation(ppl_act_load(x + i), code, p0, p1));
    if (i < n)
        ppl_act_store_partial(
            y + i, ppl_apply_activation(ppl_act_load_partial(x + i, n - i), code, p0, p1), n - i);
}

/* y[0..n) = activation(x[0..n)); x == y is allowed.  One loop per code, so that no switch
 * is left inside a loop. */
static __attribute__((unused)) void ppl_activation(const float *x, float *y, ptrdiff_t n,
                                                   int code, float p0, float p1) {
    switch (code) {
    case PPL_ACT_RELU: ppl_activation_loop(PPL_ACT_RELU, x, y, n, p0, p1); break;
    case PPL_ACT_LEAKY_RELU: ppl_activation_loop(PPL_ACT_LEAKY_RELU, x, y, n, p0, p1); break;
    case PPL_ACT_CLIP: ppl_activation_loop(PPL_ACT_CLIP, x, y, n, p0, p1); break;
    case PPL_ACT_SIGMOID: ppl_activation_loop(PPL_ACT_SIGMOID, x, y, n, p0, p1); break;
    case PPL_ACT_TANH: ppl_activation_loop(PPL_ACT_TANH, x, y, n, p0, p1); break;
    case PPL_ACT_HARD_SWISH: ppl_activation_loop(PPL_ACT_HARD_SWISH, x, y, n, p0, p1); break;
    default:
        if (x != y) __builtin_memmove(y, x, (size_t)n * sizeof(float));
        break;
    }
}

#endif /* PPL_ACTIVATION_FP32_H */
