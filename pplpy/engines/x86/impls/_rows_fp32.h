/* Row operations on vectors of PPL_VLEN floats: maximum and minimum, exp-and-sum, scaling,
 * softmax.
 *
 * Shared by the attention kernel's online softmax (_attention_fp32.h: the rows of its score
 * tile), the stand-alone Softmax / LogSoftmax over a contiguous axis (_norm_fp32.pxi,
 * _layernorm_fp32.pxi) and ReduceMax / ReduceMin over contiguous runs (_reduce_fp32.pxi).
 * Written with GCC vector extensions and the vector exp of _activation_fp32.h, because Cython
 * loops with a scalar exp or a NaN test in them stay scalar or keep their partial results in
 * memory: the Softmax op's rows ran at 0.87 ns a float where ONNX Runtime's take 0.38 (12 x
 * 196 rows of 196, Zen 4), ReduceMax over rows of 768 at 1.4 ns a float, branching on each.
 * A row of n floats is whole vectors then one tail vector read no further than n (padded
 * with a neutral value), so no memory past the row is touched.  The including file defines
 * PPL_VLEN and compiles with its tier's flags.
 */
#ifndef PPL_ROWS_FP32_H
#define PPL_ROWS_FP32_H

#include "_activation_fp32.h"

/* Lane-index vectors as literals (gcc builds one written as a loop lane by lane, with a
 * masked move per lane, even when every value is a constant): lane i, and lane i ^ h for a
 * tree over the lanes. */
#if PPL_VLEN == 16
#define PPL_ROW_LANES {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define PPL_ROW_XOR8 {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}
#define PPL_ROW_XOR4 {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11}
#define PPL_ROW_XOR2 {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13}
#define PPL_ROW_XOR1 {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}
#elif PPL_VLEN == 8
#define PPL_ROW_LANES {0, 1, 2, 3, 4, 5, 6, 7}
#define PPL_ROW_XOR4 {4, 5, 6, 7, 0, 1, 2, 3}
#define PPL_ROW_XOR2 {2, 3, 0, 1, 6, 7, 4, 5}
#define PPL_ROW_XOR1 {1, 0, 3, 2, 5, 4, 7, 6}
#else
#define PPL_ROW_LANES {0, 1, 2, 3}
#define PPL_ROW_XOR2 {2, 3, 0, 1}
#define PPL_ROW_XOR1 {1, 0, 3, 2}
#endif

/* The first n (0 <= n <= PPL_VLEN) floats at p, the other lanes `fill`: a masked load.  (A
 * copy into a vector on the stack, as this was first written, made the next vector read of
 * it wait for the stores to retire: 14% of the row work's samples in `perf` on ViT-B/16's
 * 197 keys were on the two instructions after such a read.) */
PPL_ACT_INLINE ppl_vf ppl_row_load_fill(const float *p, ptrdiff_t n, float fill) {
#if PPL_VLEN == 16 && defined(__AVX512F__)
    return (ppl_vf)_mm512_mask_loadu_ps(_mm512_set1_ps(fill), (__mmask16)((1u << n) - 1u), p);
#else
    const ppl_vi lane = PPL_ROW_LANES;
    return ppl_act_select(lane < (ppl_vi){} + (int)n, ppl_act_load_partial(p, n),
                          ppl_act_splat(fill));
#endif
}

/* One step of a tree over the lanes: v op (v with lanes i and i ^ h swapped). */
#define PPL_ROW_FOLD(v, idx, op) do { \
        const ppl_vf w_ = __builtin_shuffle(v, (ppl_vi)idx); \
        v = op(v, w_); \
    } while (0)
#if PPL_VLEN == 16
#define PPL_ROW_TREE(v, op) do { \
        PPL_ROW_FOLD(v, PPL_ROW_XOR8, op); PPL_ROW_FOLD(v, PPL_ROW_XOR4, op); \
        PPL_ROW_FOLD(v, PPL_ROW_XOR2, op); PPL_ROW_FOLD(v, PPL_ROW_XOR1, op); \
    } while (0)
#elif PPL_VLEN == 8
#define PPL_ROW_TREE(v, op) do { \
        PPL_ROW_FOLD(v, PPL_ROW_XOR4, op); PPL_ROW_FOLD(v, PPL_ROW_XOR2, op); \
        PPL_ROW_FOLD(v, PPL_ROW_XOR1, op); \
    } while (0)
#else
#define PPL_ROW_TREE(v, op) do { \
        PPL_ROW_FOLD(v, PPL_ROW_XOR2, op); PPL_ROW_FOLD(v, PPL_ROW_XOR1, op); \
    } while (0)
#endif
#define PPL_ROW_ADD(a, b) ((a) + (b))
/* The larger of a and b lane by lane, NaN if either is (a NaN score must reach the row). */
#define PPL_ROW_MAX(a, b) ppl_act_select(((b) > (a)) | ((b) != (b)), (b), (a))

/* The sum and the maximum of v's lanes, as a tree of log2(PPL_VLEN) shuffles rather than a
 * chain of PPL_VLEN scalar operations, each waiting for the last.  (The sum's rounding
 * differs from lane order; it is the same on every thread count.)  With the masked tail
 * load above, an attention op over ViT-B/16's 197 keys (12 heads, one block of keys) took
 * 1.54-1.55 ms against 1.65-1.68, best of a 2-second loop, three rounds alternating, Zen 4
 * avx512; fma 1.88 -> 1.69; 128 keys (BERT) 0.668 -> 0.660. */
PPL_ACT_INLINE float ppl_row_hsum(ppl_vf v) {
    PPL_ROW_TREE(v, PPL_ROW_ADD);
    return v[0];
}

PPL_ACT_INLINE float ppl_row_hmax(ppl_vf v) {
    PPL_ROW_TREE(v, PPL_ROW_MAX);
    return v[0];
}

/* The smaller of a and b lane by lane, NaN if either is. */
#define PPL_ROW_MIN(a, b) ppl_act_select(((b) < (a)) | ((b) != (b)), (b), (a))

PPL_ACT_INLINE float ppl_row_hmin(ppl_vf v) {
    PPL_ROW_TREE(v, PPL_ROW_MIN);
    return v[0];
}

/* max(s[0..n)) (is_max, a constant) or min; NaN if any s[j] is; -inf (+inf for min) for an
 * empty row, or a row of -inf (+inf) only.  Four running vectors: each step of one waits for
 * the last (compares, then a select), and with two the loop ran at that latency (ReduceMax
 * over rows of 768: 0.27 ms for 3136 rows, 0.20 with four). */
PPL_ACT_INLINE float ppl_row_extreme(const float *s, ptrdiff_t n, const int is_max) {
    const float fill = is_max ? -__builtin_inff() : __builtin_inff();
    ppl_vf m0 = ppl_act_splat(fill), m1 = m0, m2 = m0, m3 = m0;
#define PPL_ROW_TAKE(m, x) m = is_max ? PPL_ROW_MAX(m, x) : PPL_ROW_MIN(m, x)
    ptrdiff_t j = 0;
    for (; j + 4 * PPL_VLEN <= n; j += 4 * PPL_VLEN) {
        PPL_ROW_TAKE(m0, ppl_act_load(s + j));
        PPL_ROW_TAKE(m1, ppl_act_load(s + j + PPL_VLEN));
        PPL_ROW_TAKE(m2, ppl_act_load(s + j + 2 * PPL_VLEN));
        PPL_ROW_TAKE(m3, ppl_act_load(s + j + 3 * PPL_VLEN));
    }
    for (; j + PPL_VLEN <= n; j += PPL_VLEN) PPL_ROW_TAKE(m1, ppl_act_load(s + j));
    if (j < n) PPL_ROW_TAKE(m2, ppl_row_load_fill(s + j, n - j, fill));
    PPL_ROW_TAKE(m0, m1);
    PPL_ROW_TAKE(m2, m3);
    PPL_ROW_TAKE(m0, m2);
#undef PPL_ROW_TAKE
    return is_max ? ppl_row_hmax(m0) : ppl_row_hmin(m0);
}

/* max(s[0..n)); NaN if any s[j] is; -inf for an empty or all -inf (fully masked) row. */
static __attribute__((unused)) float ppl_row_max(const float *s, ptrdiff_t n) {
    return ppl_row_extreme(s, n, 1);
}

/* min(s[0..n)); NaN if any s[j] is; +inf for an empty row or one of +inf only. */
static __attribute__((unused)) float ppl_row_min(const float *s, ptrdiff_t n) {
    return ppl_row_extreme(s, n, 0);
}

/* Float partial sums are handed to a double every PPL_ROW_FLUSH floats of a row: a float sum
 * of 70,000 exponentials was off by 6e-6. */
#define PPL_ROW_FLUSH 1024

/* The sum of exp(x[j] - m) for j < n (m the row's maximum, finite: every exponent <= 0);
 * store (a constant): also y[j] = exp(x[j] - m), y == x allowed. */
PPL_ACT_INLINE float ppl_row_exp_sum_impl(const float *x, float *y, ptrdiff_t n, float m,
                                          const int store) {
    const ppl_vf mv = ppl_act_splat(m);
    double total = 0;
    for (ptrdiff_t j0 = 0; j0 < n; j0 += PPL_ROW_FLUSH) {
        const ptrdiff_t j1 = n - j0 < PPL_ROW_FLUSH ? n : j0 + PPL_ROW_FLUSH;
        ppl_vf t0 = ppl_act_splat(0.0f), t1 = t0;
        ptrdiff_t j = j0;
        for (; j + 2 * PPL_VLEN <= j1; j += 2 * PPL_VLEN) {
            const ppl_vf e0 = ppl_exp_impl(ppl_act_load(x + j) - mv, 1);
            const ppl_vf e1 = ppl_exp_impl(ppl_act_load(x + j + PPL_VLEN) - mv, 1);
            if (store) {
                ppl_act_store(y + j, e0);
                ppl_act_store(y + j + PPL_VLEN, e1);
            }
            t0 += e0;
            t1 += e1;
        }
        for (; j < j1; j += PPL_VLEN) {
            const ptrdiff_t r = j1 - j < PPL_VLEN ? j1 - j : PPL_VLEN;
            /* padded with -inf: the tail lanes' exp is 0 and adds nothing to the sum */
            const ppl_vf e = ppl_exp_impl(ppl_row_load_fill(x + j, r, -__builtin_inff()) - mv, 1);
            if (store) ppl_act_store_partial(y + j, e, r);
            t0 += e;
        }
        total += ppl_row_hsum(t0 + t1);
    }
    return (float)total;
}

/* y[j] = exp(x[j] - m) for j < n (y == x allowed); returns their sum. */
static __attribute__((unused)) float ppl_row_exp_sum(const float *x, float *y, ptrdiff_t n,
                                                     float m) {
    return ppl_row_exp_sum_impl(x, y, n, m, 1);
}

/* y[j] = exp(x[j] - m) * inv for j < n (the QK output after the softmax); x == y allowed. */
static __attribute__((unused)) void ppl_row_softmax_out(const float *x, float *y,
                                                             ptrdiff_t n, float m, float inv) {
    const ppl_vf mv = ppl_act_splat(m), iv = ppl_act_splat(inv);
    for (ptrdiff_t j = 0; j < n; j += PPL_VLEN) {
        const ptrdiff_t r = n - j < PPL_VLEN ? n - j : PPL_VLEN;
        const ppl_vf e = ppl_exp_impl(ppl_row_load_fill(x + j, r, -__builtin_inff()) - mv, 1);
        ppl_act_store_partial(y + j, e * iv, r);
    }
}

/* y[e] = x[e] * f for e < n. */
static __attribute__((unused)) void ppl_row_scale(const float *x, float *y, ptrdiff_t n,
                                                       float f) {
    const ppl_vf fv = ppl_act_splat(f);
    ptrdiff_t e = 0;
    for (; e + PPL_VLEN <= n; e += PPL_VLEN) ppl_act_store(y + e, ppl_act_load(x + e) * fv);
    if (e < n) ppl_act_store_partial(y + e, ppl_act_load_partial(x + e, n - e) * fv, n - e);
}

/* y = softmax(x) over a row of n > 0 floats, or log-softmax (log != 0); y == x allowed.  The
 * maximum is taken first and subtracted before exp, as ONNX's definition does; a row whose
 * maximum is NaN or infinite (any NaN, +inf, or all -inf) comes out all NaN, as that
 * definition gives (x - max is NaN somewhere, so the sum is). */
static __attribute__((unused)) void ppl_row_softmax(const float *x, float *y, ptrdiff_t n,
                                                    int log) {
    const float m = ppl_row_max(x, n);
    ptrdiff_t j = 0;
    if (!(m > -__builtin_inff() && m < __builtin_inff())) {
        for (; j < n; j++) y[j] = __builtin_nanf("");
        return;
    }
    if (!log) {
        ppl_row_scale(y, y, n, 1.0f / ppl_row_exp_sum(x, y, n, m));
        return;
    }
    const float d = logf(ppl_row_exp_sum_impl(x, NULL, n, m, 0));
    const ppl_vf mv = ppl_act_splat(m), dv = ppl_act_splat(d);
    for (; j + PPL_VLEN <= n; j += PPL_VLEN)   /* x - m first: exact near the maximum */
        ppl_act_store(y + j, (ppl_act_load(x + j) - mv) - dv);
    if (j < n)
        ppl_act_store_partial(y + j, (ppl_act_load_partial(x + j, n - j) - mv) - dv, n - j);
}

#endif /* PPL_ROWS_FP32_H */
