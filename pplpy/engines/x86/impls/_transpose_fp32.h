/* Transposes of 4-byte elements in 4 x 4 blocks on SSE registers: the inner loop of every
 * copy that is a transpose (Transpose's tiled copy in _copy.pyx, the NDARRAY <-> N16CX
 * reorders of _reorder_fp32.pxi).
 *
 * Those loops were written element by element (y[i][j] = x[j][i]) for the compiler to
 * vectorise; it kept them scalar or gathered lane by lane, and they moved 6-14 GB/s where
 * ONNX Runtime's transposes move twice that (FocalNet's (3136, 195) -> (195, 3136) permute:
 * 0.27 ms against ORT's 0.15, Zen 4).  Four rows of four loaded, transposed in registers by
 * _MM_TRANSPOSE4_PS and stored as four rows: the same (3136, 195) transpose 0.34 -> 0.07 ms
 * in a C loop over warm data (an 8 x 8 AVX block measured the same within 20%, so one SSE
 * kernel serves every tier).  SSE is part of x86-64, so the baseline-flag _copy module can
 * include this too; the bits moved are the same in any order, so integers copy as well.
 */
#ifndef PPL_TRANSPOSE_FP32_H
#define PPL_TRANSPOSE_FP32_H

#include <stddef.h>
#include <xmmintrin.h>

/* y[i * ldy + j] = x[j * ldx + i] for i, j < 4 (strides in elements, of any sign). */
static inline void ppl_transpose4x4(const float *x, ptrdiff_t ldx, float *y, ptrdiff_t ldy) {
    __m128 r0 = _mm_loadu_ps(x), r1 = _mm_loadu_ps(x + ldx);
    __m128 r2 = _mm_loadu_ps(x + 2 * ldx), r3 = _mm_loadu_ps(x + 3 * ldx);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(y, r0);
    _mm_storeu_ps(y + ldy, r1);
    _mm_storeu_ps(y + 2 * ldy, r2);
    _mm_storeu_ps(y + 3 * ldy, r3);
}

/* y[i * ldy + j] = x[j * ldx + i] for i < rows, j < cols: 4 x 4 blocks, four rows of y at a
 * time (so the stores run along y's rows, four streams), then the rows and columns past the
 * last whole block one element at a time.  Meant for blocks that fit L1 (a caller tiles a
 * large transpose). */
static inline void ppl_transpose_block(const float *x, ptrdiff_t ldx, float *y, ptrdiff_t ldy,
                                       ptrdiff_t rows, ptrdiff_t cols) {
    const ptrdiff_t rows4 = rows & ~(ptrdiff_t)3, cols4 = cols & ~(ptrdiff_t)3;
    ptrdiff_t i, j;
    for (i = 0; i < rows4; i += 4) {
        for (j = 0; j < cols4; j += 4)
            ppl_transpose4x4(x + j * ldx + i, ldx, y + i * ldy + j, ldy);
        for (; j < cols; j++) {
            const float *s = x + j * ldx + i;
            y[i * ldy + j] = s[0];
            y[(i + 1) * ldy + j] = s[1];
            y[(i + 2) * ldy + j] = s[2];
            y[(i + 3) * ldy + j] = s[3];
        }
    }
    for (; i < rows; i++)
        for (j = 0; j < cols; j++) y[i * ldy + j] = x[j * ldx + i];
}

/* The same, four rows of x at a time (so the loads run along x's rows, four streams): for a
 * source whose rows lie a power of two apart, where reading across all of them at once
 * keeps evicting them from L1 (the same cache set).  The NDARRAY -> N16CX reorder reads 16
 * channel planes: (64, 16384) 0.34 -> 0.15 ms, the other shapes measured unchanged. */
static inline void ppl_transpose_block_by_x_rows(const float *x, ptrdiff_t ldx, float *y,
                                                 ptrdiff_t ldy, ptrdiff_t rows, ptrdiff_t cols) {
    const ptrdiff_t rows4 = rows & ~(ptrdiff_t)3, cols4 = cols & ~(ptrdiff_t)3;
    ptrdiff_t i, j;
    for (j = 0; j < cols4; j += 4) {
        for (i = 0; i < rows4; i += 4)
            ppl_transpose4x4(x + j * ldx + i, ldx, y + i * ldy + j, ldy);
        for (; i < rows; i++) {
            y[i * ldy + j] = x[j * ldx + i];
            y[i * ldy + j + 1] = x[(j + 1) * ldx + i];
            y[i * ldy + j + 2] = x[(j + 2) * ldx + i];
            y[i * ldy + j + 3] = x[(j + 3) * ldx + i];
        }
    }
    for (; j < cols; j++)
        for (i = 0; i < rows; i++) y[i * ldy + j] = x[j * ldx + i];
}

#endif /* PPL_TRANSPOSE_FP32_H */
