/* Row operations of the attention kernel's online softmax, on vectors of PPL_VLEN floats.
 *
 * The score tile of _attention_fp32.pxi is computed by the brgemm microkernel; what is left
 * per row of it (a few hundred keys) is a maximum, an exp-and-sum, the softcap and the final
 * normalisation of the QK output.  Written here with GCC vector extensions and the vector
 * exp/tanh of _activation_fp32.h, because Cython loops calling a scalar exp with branches
 * stay scalar.  A row of n keys is whole vectors then one tail vector read no further than n
 * (padded with a neutral value), so no scratch past the row is touched.  The including file
 * defines PPL_VLEN and compiles with its tier's flags (see _brgemm_fp32.h).
 */
#ifndef PPL_ATTENTION_FP32_H
#define PPL_ATTENTION_FP32_H

#include "_brgemm_fp32.h"

/* The first n (0 <= n <= PPL_VLEN) floats at p, the other lanes `fill`. */
PPL_INLINE ppl_vf ppl_attn_load_fill(const float *p, ptrdiff_t n, float fill) {
    ppl_vf v = ppl_splat(fill);
    __builtin_memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

/* max(s[0..n)), NaN ignored; -inf for an empty or all -inf (fully masked) row. */
static __attribute__((unused)) float ppl_attn_row_max(const float *s, ptrdiff_t n) {
    const float ninf = -__builtin_inff();
    ppl_vf m0 = ppl_splat(ninf), m1 = m0;
    ptrdiff_t j = 0;
    for (; j + 2 * PPL_VLEN <= n; j += 2 * PPL_VLEN) {
        const ppl_vf x0 = ppl_load(s + j), x1 = ppl_load(s + j + PPL_VLEN);
        m0 = ppl_select(x0 > m0, x0, m0);
        m1 = ppl_select(x1 > m1, x1, m1);
    }
    for (; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        const ppl_vf x = ppl_attn_load_fill(s + j, r, ninf);
        m0 = ppl_select(x > m0, x, m0);
    }
    m0 = ppl_select(m1 > m0, m1, m0);
    float m = ninf;
    for (int v = 0; v < PPL_VLEN; v++) m = m0[v] > m ? m0[v] : m;
    return m;
}

/* s[j] = exp(s[j] - m) for j < n (m the row's maximum, finite: every exponent <= 0);
 * returns their sum. */
static __attribute__((unused)) float ppl_attn_row_exp_sum(float *s, ptrdiff_t n, float m) {
    const ppl_vf mv = ppl_splat(m);
    ppl_vf t0 = ppl_splat(0.0f), t1 = t0;
    ptrdiff_t j = 0;
    for (; j + 2 * PPL_VLEN <= n; j += 2 * PPL_VLEN) {
        const ppl_vf e0 = ppl_exp_impl(ppl_load(s + j) - mv, 1);
        const ppl_vf e1 = ppl_exp_impl(ppl_load(s + j + PPL_VLEN) - mv, 1);
        ppl_store(s + j, e0);
        ppl_store(s + j + PPL_VLEN, e1);
        t0 += e0;
        t1 += e1;
    }
    for (; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        /* padded with -inf: the tail lanes' exp is 0 and adds nothing to the sum */
        const ppl_vf e = ppl_exp_impl(ppl_attn_load_fill(s + j, r, -__builtin_inff()) - mv, 1);
        ppl_act_store_partial(s + j, e, r);
        t0 += e;
    }
    t0 += t1;
    float total = 0.0f;
    for (int v = 0; v < PPL_VLEN; v++) total += t0[v];
    return total;
}

/* y[j] = exp(x[j] - m) * inv for j < n (the QK output after the softmax); x == y allowed. */
static __attribute__((unused)) void ppl_attn_row_softmax_out(const float *x, float *y,
                                                             ptrdiff_t n, float m, float inv) {
    const ppl_vf mv = ppl_splat(m), iv = ppl_splat(inv);
    for (ptrdiff_t j = 0; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        const ppl_vf e = ppl_exp_impl(ppl_attn_load_fill(x + j, r, -__builtin_inff()) - mv, 1);
        ppl_act_store_partial(y + j, e * iv, r);
    }
}

/* s[j] = c * tanh(s[j] / c) for j < n (Gemma's softcap, c > 0). */
static __attribute__((unused)) void ppl_attn_row_softcap(float *s, ptrdiff_t n, float c) {
    const ppl_vf cv = ppl_splat(c), ic = ppl_splat(1.0f / c);
    for (ptrdiff_t j = 0; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        ppl_act_store_partial(s + j, cv * ppl_tanh(ppl_act_load_partial(s + j, r) * ic), r);
    }
}

/* y[e] = x[e] * f for e < n. */
static __attribute__((unused)) void ppl_attn_row_scale(const float *x, float *y, ptrdiff_t n,
                                                       float f) {
    const ppl_vf fv = ppl_splat(f);
    ptrdiff_t e = 0;
    for (; e + PPL_VLEN <= n; e += PPL_VLEN) ppl_store(y + e, ppl_load(x + e) * fv);
    if (e < n) ppl_act_store_partial(y + e, ppl_act_load_partial(x + e, n - e) * fv, n - e);
}

#endif /* PPL_ATTENTION_FP32_H */
