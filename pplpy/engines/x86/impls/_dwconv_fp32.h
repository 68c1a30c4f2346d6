/* Depthwise convolution on a zero-padded slab of input rows, for the common kernels: square
 * 3x3 or 5x5, stride 1 or 2, dilation 1.  Included by _conv_fp32.pxi after _brgemm_fp32.h
 * (vector type, loads, PPL_CB, the activations).
 *
 * Two ways to feed it, both on the same register tiles: narrow planes (W <= PPL_DWC_SLAB_W)
 * through a slab, wide ones row by row straight from the input (ppl_dwc_row_k), where the
 * copy would cost more than the few border pixels of a long row.
 *
 * Why a slab: the general row kernel (ppl_dw_row) checks bounds pixel by pixel on the
 * border columns, and on a 7x7 or 14x14 plane with a 5x5 kernel most pixels are border
 * pixels.  Here a work item (a block of output rows of one channel block) first copies the
 * input rows it reads into its thread's scratch with the padding written as zeros (one load
 * and store per input vector, against K*K / S^2 multiply-adds), and then every output pixel
 * is an interior one: tiles of PPL_DWC_M pixels along a row, then shorter ones for the
 * rest, with the kernel size, stride, tile width and activation compile-time constants, so
 * the taps unroll fully, the accumulators stay in registers and the activation (swish and
 * sigmoid included) is applied to them before the single store.
 *
 * Slab layout: rows of `wp` pixels x 16 channels; slab row r holds input row ih0 + r
 * (ih0 = the item's first output row * stride - pad_top), slab column c input column
 * c - pad_left; zeros outside the image.
 */
#ifndef PPL_DWCONV_FP32_H
#define PPL_DWCONV_FP32_H

#ifndef PPL_BRGEMM_FP32_H
#error "include _brgemm_fp32.h before _dwconv_fp32.h"
#endif

/* Input widths up to this go through a slab (measured on avx512: at W = 56 the copy made a
 * 3x3 layer 1.3x slower than direct rows; at W <= 28 the slab was 1.3-2x faster). */
#define PPL_DWC_SLAB_W 32

/* Output pixels per register tile: PPL_DWC_M x PPL_CBV accumulators (14 zmm on avx512, 12
 * ymm / xmm on fma / sse), leaving registers for the tap's weight and the input vector.  A
 * row's remainder goes in the shorter tiles of PPL_DWC_TAILS (greedy, exact: no pixel is
 * computed twice or past the row). */
#if PPL_VLEN == 16
#define PPL_DWC_M 14
#define PPL_DWC_TAILS(T) T(7) T(4) T(2) T(1)
#elif PPL_VLEN == 8
#define PPL_DWC_M 6
#define PPL_DWC_TAILS(T) T(3) T(2) T(1)
#else
#define PPL_DWC_M 3
#define PPL_DWC_TAILS(T) T(2) T(1)
#endif

/* M output pixels; rows[kh] points at the input (or zero / edge copy) row kh of the tile's
 * first tap, pixels S * 16 floats apart; y their 16-channel vectors.  M, K, S, CODE are
 * constants. */
PPL_INLINE void ppl_dwc_tile(const int M, const int K, const int S, const int CODE,
                             const float *const *rows, const float *w, const float *bias,
                             float *y, float p0, float p1) {
    ppl_vf acc[PPL_DWC_M][PPL_CBV];
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_CBV; v++) acc[r][v] = ppl_load(bias + v * PPL_VLEN);
#pragma GCC unroll 5
    for (int kh = 0; kh < K; kh++) {
        const float *row = rows[kh];
#pragma GCC unroll 5
        for (int kw = 0; kw < K; kw++) {
#pragma GCC unroll 4
            for (int v = 0; v < PPL_CBV; v++) {
                const ppl_vf wv = ppl_load(w + (kh * K + kw) * PPL_CB + v * PPL_VLEN);
#pragma GCC unroll 16
                for (int r = 0; r < M; r++)
                    acc[r][v] += ppl_load(row + (r * S + kw) * PPL_CB + v * PPL_VLEN) * wv;
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_CBV; v++)
            ppl_store(y + r * PPL_CB + v * PPL_VLEN,
                      CODE ? ppl_activation_inline(acc[r][v], CODE, p0, p1) : acc[r][v]);
}

/* n consecutive output pixels whose first tap reads rows[kh] + 0: whole tiles, then the
 * shorter ones. */
PPL_INLINE void ppl_dwc_span(const int K, const int S, const int CODE, const float *const *rows,
                             ptrdiff_t n, const float *w, const float *bias, float *y,
                             float p0, float p1) {
    const float *at[5];
    ptrdiff_t i = 0;
#define PPL_DWC_AT(i) for (int kh = 0; kh < K; kh++) at[kh] = rows[kh] + (i) * S * PPL_CB;
    for (; i + PPL_DWC_M <= n; i += PPL_DWC_M) {
        PPL_DWC_AT(i)
        ppl_dwc_tile(PPL_DWC_M, K, S, CODE, at, w, bias, y + i * PPL_CB, p0, p1);
    }
#define PPL_DWC_TAIL(T) \
    if (n - i >= T) { \
        PPL_DWC_AT(i) \
        ppl_dwc_tile(T, K, S, CODE, at, w, bias, y + i * PPL_CB, p0, p1); \
        i += T; \
    }
    PPL_DWC_TAILS(PPL_DWC_TAIL)
#undef PPL_DWC_TAIL
#undef PPL_DWC_AT
}

/* Slab columns (pixels) for OW outputs: the image's W plus the padding the taps reach. */
static inline ptrdiff_t ppl_dwc_slab_width(ptrdiff_t W, int pl, ptrdiff_t OW, int K, int S) {
    const ptrdiff_t need = (OW - 1) * S + K;
    return need > W + pl ? need : W + pl;
}

/* Copy input rows [ih0, ih0 + nrows) of one channel block's (H, W, 16) plane x into the
 * slab (rows of wp pixels), zeros for rows outside [0, H) and columns outside
 * [pl, pl + W). */
static __attribute__((unused)) void ppl_dwc_fill(const float *x, ptrdiff_t H, ptrdiff_t W,
                                                 ptrdiff_t ih0, ptrdiff_t nrows, int pl,
                                                 ptrdiff_t wp, float *slab) {
    for (ptrdiff_t r = 0; r < nrows; r++) {
        float *row = slab + r * wp * PPL_CB;
        const ptrdiff_t ih = ih0 + r;
        if (ih < 0 || ih >= H) {
            __builtin_memset(row, 0, (size_t)wp * PPL_CB * sizeof(float));
            continue;
        }
        if (pl > 0) __builtin_memset(row, 0, (size_t)pl * PPL_CB * sizeof(float));
        __builtin_memcpy(row + (ptrdiff_t)pl * PPL_CB, x + ih * W * PPL_CB,
                         (size_t)W * PPL_CB * sizeof(float));
        if (wp > pl + W)
            __builtin_memset(row + (pl + W) * PPL_CB, 0,
                             (size_t)(wp - pl - W) * PPL_CB * sizeof(float));
    }
}

/* Output rows [0, nrows) of one channel block from a slab whose row 0 is the first output
 * row's first tap row; y the first row's (OW, 16) floats, rows OW * 16 floats apart. */
PPL_INLINE void ppl_dwc_rows_k(const int K, const int S, const int CODE, const float *slab,
                               ptrdiff_t wp, ptrdiff_t nrows, ptrdiff_t OW, const float *w,
                               const float *bias, float *y, float p0, float p1) {
    const float *rows[5];
    for (ptrdiff_t oh = 0; oh < nrows; oh++) {
        for (int kh = 0; kh < K; kh++) rows[kh] = slab + (oh * S + kh) * wp * PPL_CB;
        ppl_dwc_span(K, S, CODE, rows, OW, w, bias, y + oh * OW * PPL_CB, p0, p1);
    }
}

/* Output row oh of one channel block read straight from its (H, W, 16) plane x, for wide
 * rows, where a slab's copy costs more than the border pixels: rows above and below the
 * image read `zero` (W * 16 zeros); the pixels whose taps all land inside [0, W) go in
 * tiles; each border pixel reads a K x K copy of its taps, zeros outside, in edge. */
PPL_INLINE void ppl_dwc_row_k(const int K, const int S, const int CODE, const float *x,
                              ptrdiff_t H, ptrdiff_t W, const float *zero, float *edge,
                              ptrdiff_t oh, int pt, int pl, ptrdiff_t OW, const float *w,
                              const float *bias, float *y, float p0, float p1) {
    const float *rows[5], *at[5];
    for (int kh = 0; kh < K; kh++) {
        const ptrdiff_t ih = oh * S - pt + kh;
        rows[kh] = ih >= 0 && ih < H ? x + ih * W * PPL_CB : zero;
    }
    const ptrdiff_t last = W - 1 + pl - (K - 1);
    ptrdiff_t lo = (pl + S - 1) / S, hi = last >= 0 ? last / S + 1 : 0;
    if (hi > OW) hi = OW;
    if (lo > hi) lo = hi;
    for (ptrdiff_t ow = 0; ow < OW; ow++) {
        if (ow == lo && lo < hi) {
            for (int kh = 0; kh < K; kh++) at[kh] = rows[kh] + (lo * S - pl) * PPL_CB;
            ppl_dwc_span(K, S, CODE, at, hi - lo, w, bias, y + lo * PPL_CB, p0, p1);
            ow = hi - 1;
            continue;
        }
        for (int kh = 0; kh < K; kh++) {
            float *dst = edge + kh * K * PPL_CB;
            for (int kw = 0; kw < K; kw++) {
                const ptrdiff_t iw = ow * S - pl + kw;
                if (iw >= 0 && iw < W)
                    __builtin_memcpy(dst + kw * PPL_CB, rows[kh] + iw * PPL_CB,
                                     PPL_CB * sizeof(float));
                else
                    __builtin_memset(dst + kw * PPL_CB, 0, PPL_CB * sizeof(float));
            }
            at[kh] = dst;
        }
        ppl_dwc_tile(1, K, S, CODE, at, w, bias, y + ow * PPL_CB, p0, p1);
    }
}

/* The activations applied on the accumulators; any other runs over the stored rows (in
 * L1), the same function on the same values.  Sigmoid and swish go there too below AVX-512:
 * the tile holds 12 of the 16 registers, and their dozen constants spilled it (EfficientNet-
 * B0's depthwise convs with swish ran 1.7-2x as long on the fma tier as on the avx512 tier
 * of the same core, whose tile leaves 18 of 32 free). */
#define PPL_DWC_CHEAP_CODES(X) X(PPL_ACT_NONE) X(PPL_ACT_RELU) X(PPL_ACT_CLIP) \
    X(PPL_ACT_LEAKY_RELU) X(PPL_ACT_HARD_SWISH)
#if PPL_VLEN == 16
#define PPL_DWC_CODES(X) PPL_DWC_CHEAP_CODES(X) X(PPL_ACT_SIGMOID) X(PPL_ACT_SWISH)
#else
#define PPL_DWC_CODES(X) PPL_DWC_CHEAP_CODES(X)
#endif

#define PPL_DWC_CASE(C) case C: ppl_dwc_rows_k(K, S, C, slab, wp, nrows, OW, w, bias, y, p0, \
                                               p1); return;
#define PPL_DWC_ROW_ARGS x, H, W, zero, edge, oh, pt, pl, OW, w, bias, y
#define PPL_DWC_ROW_CASE(C) case C: ppl_dwc_row_k(K, S, C, PPL_DWC_ROW_ARGS, p0, p1); return;
#define PPL_DWC_KS(KK, SS) \
    static void ppl_dwc_rows_##KK##_##SS(int code, const float *slab, ptrdiff_t wp, \
                                         ptrdiff_t nrows, ptrdiff_t OW, const float *w, \
                                         const float *bias, float *y, float p0, float p1) { \
        const int K = KK, S = SS; \
        switch (code) { PPL_DWC_CODES(PPL_DWC_CASE) default: break; } \
        ppl_dwc_rows_k(K, S, PPL_ACT_NONE, slab, wp, nrows, OW, w, bias, y, 0.0f, 0.0f); \
        ppl_activation(y, y, nrows * OW * PPL_CB, code, p0, p1); \
    } \
    static void ppl_dwc_row_##KK##_##SS( \
            int code, const float *x, ptrdiff_t H, ptrdiff_t W, const float *zero, float *edge, \
            ptrdiff_t oh, int pt, int pl, ptrdiff_t OW, const float *w, const float *bias, \
            float *y, float p0, float p1) { \
        const int K = KK, S = SS; \
        switch (code) { PPL_DWC_CODES(PPL_DWC_ROW_CASE) default: break; } \
        ppl_dwc_row_k(K, S, PPL_ACT_NONE, PPL_DWC_ROW_ARGS, 0.0f, 0.0f); \
        ppl_activation(y, y, OW * PPL_CB, code, p0, p1); \
    }
PPL_DWC_KS(3, 1)
PPL_DWC_KS(3, 2)
PPL_DWC_KS(5, 1)
PPL_DWC_KS(5, 2)
#undef PPL_DWC_KS
#undef PPL_DWC_CASE
#undef PPL_DWC_ROW_CASE

/* 1 when the slab kernel covers this kernel size and stride (square, dilation 1). */
static inline int ppl_dwc_supported(int K, int S) {
    return (K == 3 || K == 5) && (S == 1 || S == 2);
}

/* y rows [0, nrows) = act(bias + depthwise(slab)) for a supported (K, S): see
 * ppl_dwc_rows_k. */
static __attribute__((unused)) void ppl_dwc_rows(int K, int S, int code, const float *slab,
                                                 ptrdiff_t wp, ptrdiff_t nrows, ptrdiff_t OW,
                                                 const float *w, const float *bias, float *y,
                                                 float p0, float p1) {
    if (K == 3 && S == 1) ppl_dwc_rows_3_1(code, slab, wp, nrows, OW, w, bias, y, p0, p1);
    else if (K == 3) ppl_dwc_rows_3_2(code, slab, wp, nrows, OW, w, bias, y, p0, p1);
    else if (S == 1) ppl_dwc_rows_5_1(code, slab, wp, nrows, OW, w, bias, y, p0, p1);
    else ppl_dwc_rows_5_2(code, slab, wp, nrows, OW, w, bias, y, p0, p1);
}

/* y = act(bias + depthwise(x)) on output row oh, read straight from x: see ppl_dwc_row_k. */
static __attribute__((unused)) void ppl_dwc_row(int K, int S, int code, const float *x,
                                                ptrdiff_t H, ptrdiff_t W, const float *zero,
                                                float *edge, ptrdiff_t oh, int pt, int pl,
                                                ptrdiff_t OW, const float *w, const float *bias,
                                                float *y, float p0, float p1) {
    if (K == 3 && S == 1) ppl_dwc_row_3_1(code, PPL_DWC_ROW_ARGS, p0, p1);
    else if (K == 3) ppl_dwc_row_3_2(code, PPL_DWC_ROW_ARGS, p0, p1);
    else if (S == 1) ppl_dwc_row_5_1(code, PPL_DWC_ROW_ARGS, p0, p1);
    else ppl_dwc_row_5_2(code, PPL_DWC_ROW_ARGS, p0, p1);
}
#undef PPL_DWC_ROW_ARGS

#endif /* PPL_DWCONV_FP32_H */
