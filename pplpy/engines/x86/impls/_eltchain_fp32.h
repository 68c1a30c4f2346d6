/* The binary half of an element-wise chain (pplpy::EltwiseChain): y = a op b on vectors of
 * PPL_VLEN floats, where a is the chain's running value and b an operand.  The unary half is
 * the activation table of _activation_fp32.h, which this file includes, so a chained Tanh and
 * a stand-alone one compute the same bits.
 *
 *   ppl_chain_binary_vec(op, a, b, y, n)         b contiguous (a tensor of the output's shape,
 *                                                a stretch of a last-axis vector)
 *   ppl_chain_binary_scalar(op, a, s, y, n)      b one value (Pow by 2, 3, 4: products)
 *   ppl_chain_binary_lanes(op, a, pat16, y, np)  b a 16-lane pattern repeated over np pixels
 *                                                (a per-channel vector on N16CX)
 *
 * One loop per op (the switch sits outside the loop); y may alias a or b.  NaN conventions are
 * numpy's (onnx.reference): max / min propagate NaN from either side; pow is _binmath_fp32's
 * pow on whole vectors (exp(b log|a|), sign of a for odd integer b, NaN for a < 0 and
 * fractional b, 1 for b == 0 or a == 1, exact a * a for b == 2).
 */
#ifndef PPL_ELTCHAIN_FP32_H
#define PPL_ELTCHAIN_FP32_H

#include "_activation_fp32.h"

/* Binary op codes, after the activation codes (which stop below 64).  R* put the operand on
 * the left: RSUB is b - a. */
enum {
    PPL_CHAIN_ADD = 64,
    PPL_CHAIN_SUB = 65,
    PPL_CHAIN_RSUB = 66,
    PPL_CHAIN_MUL = 67,
    PPL_CHAIN_DIV = 68,
    PPL_CHAIN_RDIV = 69,
    PPL_CHAIN_MAX = 70,
    PPL_CHAIN_MIN = 71,
    PPL_CHAIN_POW = 72,
    PPL_CHAIN_RPOW = 73,
    PPL_CHAIN_PRELU = 74, /* a > 0 ? a : a * b (b the slope) */
    PPL_CHAIN_LAST = 74,
    /* Internal: Pow by the scalar 3 or 4, as products (chosen by ppl_chain_binary_scalar). */
    PPL_CHAIN_CUBE = 96,
    PPL_CHAIN_FOURTH = 97,
};

PPL_ACT_INLINE ppl_vf ppl_chain_pow(ppl_vf a, ppl_vf b) {
    const ppl_vf zero = ppl_act_splat(0.0f), one = ppl_act_splat(1.0f);
    const ppl_vf inf = ppl_act_splat(__builtin_inff()), nan = ppl_act_splat(__builtin_nanf(""));
    const ppl_vf ax = ppl_act_abs(a), bh = b * ppl_act_splat(0.5f);
    const ppl_vi is_int = ppl_floor(b) == b;
    const ppl_vi odd = is_int & (ppl_floor(bh) != bh);
    /* -0 to an odd power keeps its sign: test the sign bit, not a < 0. */
    const ppl_vi negative = ((ppl_vi)a) < 0;
    ppl_vf r = ppl_exp(b * ppl_log(ax));
    r = ppl_act_select(ax == zero, ppl_act_select(b > zero, zero, inf), r);
    r = ppl_act_select(ax == inf, ppl_act_select(b > zero, inf, zero), r);
    r = ppl_act_select(negative & odd, -r, r);
    r = ppl_act_select((a < zero) & ~is_int & (ax != inf), nan, r);
    r = ppl_act_select(b == ppl_act_splat(2.0f), a * a, r);
    r = ppl_act_select((a != a) | (b != b), nan, r);
    r = ppl_act_select((a == -one) & (ppl_act_abs(b) == inf), one, r);
    return ppl_act_select((b == zero) | (a == one), one, r);
}

/* a op b; `op` is a constant wherever this is inlined into a loop, so the switch folds. */
PPL_ACT_INLINE ppl_vf ppl_chain_op(const int op, ppl_vf a, ppl_vf b) {
    switch (op) {
    case PPL_CHAIN_ADD: return a + b;
    case PPL_CHAIN_SUB: return a - b;
    case PPL_CHAIN_RSUB: return b - a;
    case PPL_CHAIN_MUL: return a * b;
    case PPL_CHAIN_DIV: return a / b;
    case PPL_CHAIN_RDIV: return b / a;
    case PPL_CHAIN_MAX: return ppl_act_select((a > b) | (a != a), a, b);
    case PPL_CHAIN_MIN: return ppl_act_select((a < b) | (a != a), a, b);
    case PPL_CHAIN_POW: return ppl_chain_pow(a, b);
    case PPL_CHAIN_RPOW: return ppl_chain_pow(b, a);
    case PPL_CHAIN_PRELU: return ppl_act_select(a > ppl_act_splat(0.0f), a, a * b);
    case PPL_CHAIN_CUBE: return a * a * a;
    case PPL_CHAIN_FOURTH: return (a * a) * (a * a);
    default: return a;
    }
}

PPL_ACT_INLINE void ppl_chain_vec_loop(const int op, const float *a, const float *b, float *y,
                                       ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + PPL_VLEN <= n; i += PPL_VLEN)
        ppl_act_store(y + i, ppl_chain_op(op, ppl_act_load(a + i), ppl_act_load(b + i)));
    if (i < n)
        ppl_act_store_partial(y + i, ppl_chain_op(op, ppl_act_load_partial(a + i, n - i),
                                                  ppl_act_load_partial(b + i, n - i)), n - i);
}

PPL_ACT_INLINE void ppl_chain_scalar_loop(const int op, const float *a, float s, float *y,
                                          ptrdiff_t n) {
    const ppl_vf b = ppl_act_splat(s);
    ptrdiff_t i = 0;
    for (; i + PPL_VLEN <= n; i += PPL_VLEN)
        ppl_act_store(y + i, ppl_chain_op(op, ppl_act_load(a + i), b));
    if (i < n)
        ppl_act_store_partial(y + i, ppl_chain_op(op, ppl_act_load_partial(a + i, n - i), b),
                              n - i);
}

#define PPL_CHAIN_PARTS (16 / PPL_VLEN)

PPL_ACT_INLINE void ppl_chain_lanes_loop(const int op, const float *a, const float *pat16,
                                         float *y, ptrdiff_t npix) {
    ppl_vf b[PPL_CHAIN_PARTS];
    for (int k = 0; k < PPL_CHAIN_PARTS; ++k) b[k] = ppl_act_load(pat16 + k * PPL_VLEN);
    for (ptrdiff_t p = 0; p < npix; ++p)
        for (int k = 0; k < PPL_CHAIN_PARTS; ++k) {
            const ptrdiff_t o = p * 16 + k * PPL_VLEN;
            ppl_act_store(y + o, ppl_chain_op(op, ppl_act_load(a + o), b[k]));
        }
}

#define PPL_CHAIN_CASES(CALL)                                                               \
    CALL(ADD) CALL(SUB) CALL(RSUB) CALL(MUL) CALL(DIV) CALL(RDIV) CALL(MAX) CALL(MIN)      \
    CALL(POW) CALL(RPOW) CALL(PRELU)

#define PPL_CHAIN_VEC_CASE(name) \
    case PPL_CHAIN_##name: ppl_chain_vec_loop(PPL_CHAIN_##name, a, b, y, n); break;
#define PPL_CHAIN_SCALAR_CASE(name) \
    case PPL_CHAIN_##name: ppl_chain_scalar_loop(PPL_CHAIN_##name, a, s, y, n); break;
#define PPL_CHAIN_LANES_CASE(name) \
    case PPL_CHAIN_##name: ppl_chain_lanes_loop(PPL_CHAIN_##name, a, pat16, y, npix); break;

static __attribute__((unused)) void ppl_chain_binary_vec(int op, const float *a, const float *b,
                                                         float *y, ptrdiff_t n) {
    switch (op) { PPL_CHAIN_CASES(PPL_CHAIN_VEC_CASE) default: break; }
}

static __attribute__((unused)) void ppl_chain_binary_scalar(int op, const float *a, float s,
                                                            float *y, ptrdiff_t n) {
    /* x ** 2, 3, 4 as products: the exporters' Pow(x, 3) of GELU-tanh and Pow(d, 2) of
     * LayerNorm, without pow's exp and log (a * a * a is within 2 ulp of powf, and keeps
     * NaN, inf and -0 as powf does). */
    if (op == PPL_CHAIN_POW && (s == 2.0f || s == 3.0f || s == 4.0f)) {
        const int by = s == 2.0f ? PPL_CHAIN_MUL : s == 3.0f ? PPL_CHAIN_CUBE : PPL_CHAIN_FOURTH;
        switch (by) {
        case PPL_CHAIN_MUL: ppl_chain_vec_loop(PPL_CHAIN_MUL, a, a, y, n); return;
        case PPL_CHAIN_CUBE: ppl_chain_vec_loop(PPL_CHAIN_CUBE, a, a, y, n); return;
        default: ppl_chain_vec_loop(PPL_CHAIN_FOURTH, a, a, y, n); return;
        }
    }
    switch (op) {
    PPL_CHAIN_CASES(PPL_CHAIN_SCALAR_CASE)
    default: break;
    }
}

static __attribute__((unused)) void ppl_chain_binary_lanes(int op, const float *a,
                                                           const float *pat16, float *y,
                                                           ptrdiff_t npix) {
    switch (op) { PPL_CHAIN_CASES(PPL_CHAIN_LANES_CASE) default: break; }
}

#undef PPL_CHAIN_VEC_CASE
#undef PPL_CHAIN_SCALAR_CASE
#undef PPL_CHAIN_LANES_CASE
#undef PPL_CHAIN_CASES

#endif /* PPL_ELTCHAIN_FP32_H */
