/* Winograd F(4x4, 3x3) tile transforms on N16CX, vectorised over the 16 channels of a block.
 *
 *   y = A^T [ (G g G^T) (.) (B^T d B) ] A      d: a 6x6 input tile, y: its 4x4 output tile
 *
 * (Lavin and Gray 2016, interpolation points 0, +-1, +-2, infinity.)  The weight transform
 * G g G^T is done once at build time, in numpy; these are the per-run input transform
 * B^T d B and output transform A^T m A.  Written with the vector type of _brgemm_fp32.h, so
 * the including module's PPL_VLEN and -m flags decide the width; include it only from
 * modules of its own tier.
 */
#ifndef PPL_WINOGRAD_FP32_H
#define PPL_WINOGRAD_FP32_H

#include "_brgemm_fp32.h"

#define PPL_WINO_A 6   /* input tile edge: 4 + 3 - 1 */
#define PPL_WINO_M 4   /* output tile edge */

/* r = B^T d for one column d0..d5. */
PPL_INLINE void ppl_wino_bt(const ppl_vf d[6], ppl_vf r[6]) {
    const ppl_vf four = ppl_splat(4.0f), five = ppl_splat(5.0f), two = ppl_splat(2.0f);
    r[0] = four * d[0] - five * d[2] + d[4];
    r[1] = d[3] + d[4] - four * (d[1] + d[2]);
    r[2] = four * (d[1] - d[2]) + d[4] - d[3];
    r[3] = two * (d[3] - d[1]) + d[4] - d[2];
    r[4] = two * (d[1] - d[3]) + d[4] - d[2];
    r[5] = four * d[1] - five * d[3] + d[5];
}

/* o = A^T m for one column m0..m5. */
PPL_INLINE void ppl_wino_at(const ppl_vf m[6], ppl_vf o[4]) {
    const ppl_vf two = ppl_splat(2.0f), four = ppl_splat(4.0f), eight = ppl_splat(8.0f);
    const ppl_vf s12 = m[1] + m[2], d12 = m[1] - m[2];
    const ppl_vf s34 = m[3] + m[4], d34 = m[3] - m[4];
    o[0] = m[0] + s12 + s34;
    o[1] = d12 + two * d34;
    o[2] = s12 + four * s34;
    o[3] = d12 + eight * d34 + m[5];
}

/* The 36 transformed vectors of the 6x6 tile whose top-left input pixel is (ih0, iw0) of a
 * (H, W, 16) channel-block plane x; pixels outside the plane are zero (the padding).  Entry
 * (i, j) of B^T d B goes to v + (i * 6 + j) * vstride (16 floats each). */
static __attribute__((unused)) void ppl_wino_input_tile(const float *x, ptrdiff_t H,
                                                        ptrdiff_t W, ptrdiff_t ih0,
                                                        ptrdiff_t iw0, float *v,
                                                        ptrdiff_t vstride) {
    const int inside = ih0 >= 0 && iw0 >= 0 && ih0 + 6 <= H && iw0 + 6 <= W;
#pragma GCC unroll 4
    for (int cv = 0; cv < PPL_CBV; cv++) {
        ppl_vf t[6][6];  /* t[i][j] = (B^T d)[i][j] */
        for (int j = 0; j < 6; j++) {
            ppl_vf col[6];
            const ptrdiff_t iw = iw0 + j;
            for (int i = 0; i < 6; i++) {
                const ptrdiff_t ih = ih0 + i;
                if (inside || (ih >= 0 && ih < H && iw >= 0 && iw < W))
                    col[i] = ppl_load(x + (ih * W + iw) * PPL_CB + cv * PPL_VLEN);
                else
                    col[i] = ppl_splat(0.0f);
            }
            ppl_vf r[6];
            ppl_wino_bt(col, r);
            for (int i = 0; i < 6; i++) t[i][j] = r[i];
        }
        for (int i = 0; i < 6; i++) {
            ppl_vf r[6];
            ppl_wino_bt(t[i], r);  /* row i of (B^T d) B = B^T applied to row i */
            for (int j = 0; j < 6; j++)
                ppl_store(v + (i * 6 + j) * vstride + cv * PPL_VLEN, r[j]);
        }
    }
}

/* y tile = post_op(A^T m A + bias) for the 36 products m (entry (i, j) at m + (i * 6 + j) *
 * mstride, 16 floats each), written to the nh x nw (<= 4 x 4) valid pixels from (oh0, ow0)
 * of a (OH, OW, 16) output plane y. */
static __attribute__((unused)) void ppl_wino_output_tile(const float *m, ptrdiff_t mstride,
                                                         const float *bias, float *y,
                                                         ptrdiff_t OW, ptrdiff_t oh0,
                                                         ptrdiff_t ow0, int nh, int nw,
                                                         int post_op, float p0, float p1) {
#pragma GCC unroll 4
    for (int cv = 0; cv < PPL_CBV; cv++) {
        ppl_vf t[4][6];  /* t[i][j] = (A^T m)[i][j] */
        for (int j = 0; j < 6; j++) {
            ppl_vf col[6], r[4];
            for (int i = 0; i < 6; i++) col[i] = ppl_load(m + (i * 6 + j) * mstride + cv * PPL_VLEN);
            ppl_wino_at(col, r);
            for (int i = 0; i < 4; i++) t[i][j] = r[i];
        }
        const ppl_vf b = ppl_load(bias + cv * PPL_VLEN);
        for (int i = 0; i < nh; i++) {
            ppl_vf r[4];
            ppl_wino_at(t[i], r);
            float *row = y + ((oh0 + i) * OW + ow0) * PPL_CB + cv * PPL_VLEN;
            for (int j = 0; j < nw; j++)
                ppl_store(row + j * PPL_CB,
                          ppl_apply_activation_compact(r[j] + b, post_op, p0, p1));
        }
    }
}

#endif /* PPL_WINOGRAD_FP32_H */
