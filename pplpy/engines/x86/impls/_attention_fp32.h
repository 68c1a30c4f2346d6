/* Row work of the attention kernel besides its softmax (whose maximum, exp-and-sum and
 * scaling are the shared row operations of _rows_fp32.h): Gemma's softcap, the scans that
 * find the keys a mask leaves open, and the prefetch of a key's K and V slices.  Vector code
 * (GCC vector extensions) for the including tier: it defines PPL_VLEN and compiles with its
 * tier's flags (see _brgemm_fp32.h).
 */
#ifndef PPL_ATTENTION_FP32_H
#define PPL_ATTENTION_FP32_H

#include "_brgemm_fp32.h"
#include "_rows_fp32.h"

/* s[j] = c * tanh(s[j] / c) for j < n (Gemma's softcap, c > 0). */
static __attribute__((unused)) void ppl_attn_row_softcap(float *s, ptrdiff_t n, float c) {
    const ppl_vf cv = ppl_splat(c), ic = ppl_splat(1.0f / c);
    for (ptrdiff_t j = 0; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        ppl_act_store_partial(s + j, cv * ppl_tanh(ppl_act_load_partial(s + j, r) * ic), r);
    }
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
