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

/* Lane-index vectors as literals (gcc builds one written as a loop lane by lane, with a
 * masked move per lane, even when every value is a constant): lane i, and lane i ^ h for a
 * tree over the lanes. */
#if PPL_VLEN == 16
#define PPL_ATTN_LANES {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define PPL_ATTN_XOR8 {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}
#define PPL_ATTN_XOR4 {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11}
#define PPL_ATTN_XOR2 {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13}
#define PPL_ATTN_XOR1 {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}
#elif PPL_VLEN == 8
#define PPL_ATTN_LANES {0, 1, 2, 3, 4, 5, 6, 7}
#define PPL_ATTN_XOR4 {4, 5, 6, 7, 0, 1, 2, 3}
#define PPL_ATTN_XOR2 {2, 3, 0, 1, 6, 7, 4, 5}
#define PPL_ATTN_XOR1 {1, 0, 3, 2, 5, 4, 7, 6}
#else
#define PPL_ATTN_LANES {0, 1, 2, 3}
#define PPL_ATTN_XOR2 {2, 3, 0, 1}
#define PPL_ATTN_XOR1 {1, 0, 3, 2}
#endif

/* The first n (0 <= n <= PPL_VLEN) floats at p, the other lanes `fill`: a masked load.  (A
 * copy into a vector on the stack, as this was first written, made the next vector read of
 * it wait for the stores to retire: 14% of the row work's samples in `perf` on ViT-B/16's
 * 197 keys were on the two instructions after such a read.) */
PPL_INLINE ppl_vf ppl_attn_load_fill(const float *p, ptrdiff_t n, float fill) {
#if PPL_VLEN == 16 && defined(__AVX512F__)
    return (ppl_vf)_mm512_mask_loadu_ps(_mm512_set1_ps(fill), (__mmask16)((1u << n) - 1u), p);
#else
    const ppl_vi lane = PPL_ATTN_LANES;
    return ppl_select(lane < (ppl_vi){} + (int)n, ppl_act_load_partial(p, n), ppl_splat(fill));
#endif
}

/* One step of a tree over the lanes: v op (v with lanes i and i ^ h swapped). */
#define PPL_ATTN_FOLD(v, idx, op) do { \
        const ppl_vf w_ = __builtin_shuffle(v, (ppl_vi)idx); \
        v = op(v, w_); \
    } while (0)
#if PPL_VLEN == 16
#define PPL_ATTN_TREE(v, op) do { \
        PPL_ATTN_FOLD(v, PPL_ATTN_XOR8, op); PPL_ATTN_FOLD(v, PPL_ATTN_XOR4, op); \
        PPL_ATTN_FOLD(v, PPL_ATTN_XOR2, op); PPL_ATTN_FOLD(v, PPL_ATTN_XOR1, op); \
    } while (0)
#elif PPL_VLEN == 8
#define PPL_ATTN_TREE(v, op) do { \
        PPL_ATTN_FOLD(v, PPL_ATTN_XOR4, op); PPL_ATTN_FOLD(v, PPL_ATTN_XOR2, op); \
        PPL_ATTN_FOLD(v, PPL_ATTN_XOR1, op); \
    } while (0)
#else
#define PPL_ATTN_TREE(v, op) do { \
        PPL_ATTN_FOLD(v, PPL_ATTN_XOR2, op); PPL_ATTN_FOLD(v, PPL_ATTN_XOR1, op); \
    } while (0)
#endif
#define PPL_ATTN_ADD(a, b) ((a) + (b))
/* The larger of a and b lane by lane, NaN if either is (a NaN score must reach the row). */
#define PPL_ATTN_MAX(a, b) ppl_select(((b) > (a)) | ((b) != (b)), (b), (a))

/* The sum and the maximum of v's lanes, as a tree of log2(PPL_VLEN) shuffles rather than a
 * chain of PPL_VLEN scalar operations, each waiting for the last.  (The sum's rounding
 * differs from lane order; it is the same on every thread count.)  With the masked tail
 * load above, an attention op over ViT-B/16's 197 keys (12 heads, one block of keys) took
 * 1.54-1.55 ms against 1.65-1.68, best of a 2-second loop, three rounds alternating, Zen 4
 * avx512; fma 1.88 -> 1.69; 128 keys (BERT) 0.668 -> 0.660. */
PPL_INLINE float ppl_attn_hsum(ppl_vf v) {
    PPL_ATTN_TREE(v, PPL_ATTN_ADD);
    return v[0];
}

PPL_INLINE float ppl_attn_hmax(ppl_vf v) {
    PPL_ATTN_TREE(v, PPL_ATTN_MAX);
    return v[0];
}

/* max(s[0..n)); NaN if any s[j] is; -inf for an empty or all -inf (fully masked) row. */
static __attribute__((unused)) float ppl_attn_row_max(const float *s, ptrdiff_t n) {
    const float ninf = -__builtin_inff();
    ppl_vf m0 = ppl_splat(ninf), m1 = m0;
    ptrdiff_t j = 0;
    for (; j + 2 * PPL_VLEN <= n; j += 2 * PPL_VLEN) {
        const ppl_vf x0 = ppl_load(s + j), x1 = ppl_load(s + j + PPL_VLEN);
        m0 = PPL_ATTN_MAX(m0, x0);
        m1 = PPL_ATTN_MAX(m1, x1);
    }
    for (; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        const ppl_vf x = ppl_attn_load_fill(s + j, r, ninf);
        m0 = PPL_ATTN_MAX(m0, x);
    }
    return ppl_attn_hmax(PPL_ATTN_MAX(m0, m1));
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
    return ppl_attn_hsum(t0 + t1);
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

/* Masked keys.  A float mask entry at most -FLT_MAX (-inf, or the float minimum that
 * PyTorch's exporters fill a masked position with) closes its key to the query; anything
 * else, NaN included, leaves it open.  The scans test PPL_ATTN_SCAN entries at a time without
 * a branch (the compiler makes vector compares of it), then find the entry in that chunk. */
#define PPL_ATTN_SCAN 64

/* The first j < n with m[j] open, or n. */
static __attribute__((unused)) ptrdiff_t ppl_attn_first_open(const float *m, ptrdiff_t n) {
    const float closed = -__FLT_MAX__;
    ptrdiff_t j = 0;
    for (; j + PPL_ATTN_SCAN <= n; j += PPL_ATTN_SCAN) {
        int open = 0;
        for (int e = 0; e < PPL_ATTN_SCAN; e++) open |= !(m[j + e] <= closed);
        if (open) break;
    }
    for (; j < n; j++)
        if (!(m[j] <= closed)) return j;
    return n;
}

/* The last j < n with m[j] open, or -1. */
static __attribute__((unused)) ptrdiff_t ppl_attn_last_open(const float *m, ptrdiff_t n) {
    const float closed = -__FLT_MAX__;
    ptrdiff_t j = n;
    for (; j - PPL_ATTN_SCAN >= 0; j -= PPL_ATTN_SCAN) {
        int open = 0;
        for (int e = 0; e < PPL_ATTN_SCAN; e++) open |= !(m[j - PPL_ATTN_SCAN + e] <= closed);
        if (open) break;
    }
    for (j = j - 1; j >= 0; j--)
        if (!(m[j] <= closed)) return j;
    return -1;
}

/* The same for a bool mask (bytes, 0: masked). */
static __attribute__((unused)) ptrdiff_t ppl_attn_first_true(const unsigned char *m,
                                                             ptrdiff_t n) {
    ptrdiff_t j = 0;
    for (; j + PPL_ATTN_SCAN <= n; j += PPL_ATTN_SCAN) {
        unsigned char any = 0;
        for (int e = 0; e < PPL_ATTN_SCAN; e++) any |= m[j + e];
        if (any) break;
    }
    for (; j < n; j++)
        if (m[j]) return j;
    return n;
}

static __attribute__((unused)) ptrdiff_t ppl_attn_last_true(const unsigned char *m,
                                                            ptrdiff_t n) {
    ptrdiff_t j = n;
    for (; j - PPL_ATTN_SCAN >= 0; j -= PPL_ATTN_SCAN) {
        unsigned char any = 0;
        for (int e = 0; e < PPL_ATTN_SCAN; e++) any |= m[j - PPL_ATTN_SCAN + e];
        if (any) break;
    }
    for (j = j - 1; j >= 0; j--)
        if (m[j]) return j;
    return -1;
}

/* Ask for the n floats at p (a key's K or V slice in a row of the input) ahead of use. */
static inline void ppl_attn_prefetch(const float *p, ptrdiff_t n) {
    for (ptrdiff_t e = 0; e < n; e += 16) __builtin_prefetch(p + e, 0, 3);
}

#endif /* PPL_ATTENTION_FP32_H */
