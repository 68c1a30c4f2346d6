/* Batch-reduce GEMM (brgemm) microkernel for fp32, written once for every x86 tier.
 *
 *   C[m x n] = post_op(alpha * sum_i A_i . B_i  (+ C if accumulate)  + beta * addend + bias)
 *
 * After oneDNN's brgemm (reference/003): one building block for GEMM and direct convolution.
 *   A_i  m rows of k floats; row r starts at A_i + r * lda, unit stride along k.
 *   B_i  a packed panel: k rows of PPL_NB floats, row kk at B_i + kk * PPL_NB.
 *   C    column j of row r lives at c + r * ldc + (j / 16) * cbs + j % 16: a GEMM passes
 *        cbs = 16 (plain row-major); a convolution on N16CX passes the distance between two
 *        16-channel blocks, so one tile can span several channel blocks of the output.
 *
 * The including file defines PPL_VLEN (floats per vector register: 16 for AVX-512, 8 for
 * AVX2/FMA, 4 for SSE) and compiles with that tier's -m flags.  Everything else is written
 * with GCC vector extensions, so the three builds differ only in the vector width and the
 * register blocking chosen below; testing one width tests the logic of all three.  The
 * accumulators are a small array indexed with compile-time constants in fully unrolled loops,
 * which gcc keeps in registers (explicit vector accumulators: plain scalar loops stay in
 * memory, see PERFORMANCE.md).  Include this header only from modules of its own tier.
 * gcc lowers a vector wider than the target's registers to several narrower operations, so
 * a build with PPL_VLEN 16 and only -mavx2 runs the AVX-512 tier's exact logic (blocking,
 * tails, panels spanning two channel blocks) on a CPU without AVX-512: a way to test it.
 */
#ifndef PPL_BRGEMM_FP32_H
#define PPL_BRGEMM_FP32_H

#ifndef PPL_VLEN
#error "define PPL_VLEN (floats per vector register) before including _brgemm_fp32.h"
#endif

#include <math.h>
#include <stddef.h>

typedef float ppl_vf __attribute__((vector_size(PPL_VLEN * 4)));
typedef int ppl_vi __attribute__((vector_size(PPL_VLEN * 4)));

/* Register blocking: PPL_MR rows x PPL_NV vectors of accumulators (PPL_NB = PPL_NV * PPL_VLEN
 * columns).  AVX-512 14 x 2 zmm (28 of 32 registers) and AVX2 6 x 2 ymm (12 of 16) were
 * measured at 93-98% of peak (PERFORMANCE.md).  SSE 2 x 4 xmm (2 rows x 16 columns): with
 * two-operand instructions every multiply-add is a register copy, a multiply (its B vector
 * read from memory) and an add, and 6 x 2 (12 accumulators) left too few registers for
 * those copies; gcc kept B and the broadcasts on the stack.  benchmarks/brgemm_harness.c
 * built for SSE on a Zen 4 EPYC, GEMM 512 x 768 x 512: 6 x 2 at 74-80% of the tier's peak
 * whatever the K unroll, 2 x 4 unrolled 4 times at 86-92%.  PPL_NB must be a multiple of 16
 * or divide 16, so that no vector straddles a 16-channel block of an N16CX output. */
#ifndef PPL_MR  /* a test build may set PPL_MR and PPL_NV to try another tier's blocking */
#if PPL_VLEN == 16
#define PPL_MR 14
#define PPL_NV 2
#elif PPL_VLEN == 8
#define PPL_MR 6
#define PPL_NV 2
#elif PPL_VLEN == 4
#define PPL_MR 2
#define PPL_NV 4
#else
#error "PPL_VLEN must be 4, 8 or 16"
#endif
#endif
#if PPL_MR < 2 || PPL_MR > 14
#error "PPL_MR must be in 2..14"
#endif
/* PPL_TILE_ROWS(X) expands X(2) X(3) ... X(PPL_MR): one switch case per tile height. */
#define PPL_ROWS_2(X) X(2)
#define PPL_ROWS_3(X) PPL_ROWS_2(X) X(3)
#define PPL_ROWS_4(X) PPL_ROWS_3(X) X(4)
#define PPL_ROWS_5(X) PPL_ROWS_4(X) X(5)
#define PPL_ROWS_6(X) PPL_ROWS_5(X) X(6)
#define PPL_ROWS_7(X) PPL_ROWS_6(X) X(7)
#define PPL_ROWS_8(X) PPL_ROWS_7(X) X(8)
#define PPL_ROWS_9(X) PPL_ROWS_8(X) X(9)
#define PPL_ROWS_10(X) PPL_ROWS_9(X) X(10)
#define PPL_ROWS_11(X) PPL_ROWS_10(X) X(11)
#define PPL_ROWS_12(X) PPL_ROWS_11(X) X(12)
#define PPL_ROWS_13(X) PPL_ROWS_12(X) X(13)
#define PPL_ROWS_14(X) PPL_ROWS_13(X) X(14)
#define PPL_ROWS_OF(n) PPL_ROWS_##n
#define PPL_ROWS_EXPAND(n) PPL_ROWS_OF(n)
#define PPL_TILE_ROWS(X) PPL_ROWS_EXPAND(PPL_MR)(X)
/* How many k steps the microkernel's inner loop is unrolled by: 8 on AVX-512, where the 14 x 2
 * tile unrolled 16 times is about 700 instructions per loop body.  On a 16-core Sapphire
 * Rapids Xeon (gcc 13), a C harness over this header ran the conv batch-reduce
 * 9 x (3136 x 192 x 64) and a 512 x 768 x 512 GEMM at 89-91% and 72-74% of the core's FMA
 * peak in two runs with 16, at 94-96% in both with 8 (the same stack traffic in both builds:
 * no spills either way, so the front end, not the registers).  pplpy's brgemm.py there: square
 * 57% -> 72%, batch-reduce 58% -> 67%.  On a Zen 4 EPYC both unrolls ran at 95-97%.  AVX2
 * keeps 16 (not measured).  SSE's 2 x 4 tile: 4 and 8 ran the GEMM alike, 16 at half speed;
 * once the direct convolution read a broadcast copy whose batch elements span all input
 * blocks (K = 64 on the brgemm.py layer, _conv_fp32.pxi), 8 ran brgemm.py's three K >= 256
 * shapes 1-4 points faster than 4 (2-core Zen 4 EPYC, two runs each). */
#ifndef PPL_KUNROLL
#if PPL_VLEN == 8
#define PPL_KUNROLL 16
#else
#define PPL_KUNROLL 8
#endif
#endif
#define PPL_STR(x) #x
#define PPL_UNROLL(n) _Pragma(PPL_STR(GCC unroll n))
#define PPL_NB (PPL_NV * PPL_VLEN)
#define PPL_CB 16
#define PPL_CBV (PPL_CB / PPL_VLEN)

/* Post-op codes: must match post_ops.pxd / post_ops.py. */
enum { PPL_POST_NONE = 0, PPL_POST_RELU = 1, PPL_POST_LEAKY_RELU = 2, PPL_POST_CLIP = 3,
       PPL_POST_SIGMOID = 4, PPL_POST_TANH = 5, PPL_POST_HARD_SWISH = 6, PPL_POST_ABS = 7,
       PPL_POST_NEG = 8, PPL_POST_EXP = 9, PPL_POST_LOG = 10, PPL_POST_SQRT = 11,
       PPL_POST_RECIPROCAL = 12, PPL_POST_FLOOR = 13, PPL_POST_CEIL = 14, PPL_POST_ROUND = 15,
       PPL_POST_SIGN = 16, PPL_POST_ERF = 17, PPL_POST_SIN = 18, PPL_POST_COS = 19,
       PPL_POST_TAN = 20, PPL_POST_ASIN = 21, PPL_POST_ACOS = 22, PPL_POST_ATAN = 23,
       PPL_POST_SINH = 24, PPL_POST_COSH = 25, PPL_POST_ASINH = 26, PPL_POST_ACOSH = 27,
       PPL_POST_ATANH = 28, PPL_POST_HARD_SIGMOID = 29, PPL_POST_SOFTPLUS = 30,
       PPL_POST_SOFTSIGN = 31, PPL_POST_ELU = 32, PPL_POST_SELU = 33, PPL_POST_CELU = 34,
       PPL_POST_GELU = 35, PPL_POST_MISH = 36, PPL_POST_THRESHOLDED_RELU = 37,
       PPL_POST_SHRINK = 38, PPL_POST_SWISH = 39 };

/* The post-op chain (its header needs the vector types above and the activations). */
struct ppl_post_chain_s;

typedef struct {
    float alpha;          /* scales the batch-reduced sum */
    float beta;           /* scales addend */
    const float *bias;    /* NULL, or bias[j] for tile column j (contiguous) */
    const float *addend;  /* NULL, or a tile laid out like C (same ldc and cbs) */
    int accumulate;       /* 1: add what C already holds (a later K chunk) */
    /* The post-ops, in this order: */
    const float *sum;     /* NULL, or a tensor laid out like the output dst: x += sum_scale *
                             sum[c - dst] (the chain's leading sum post-op) */
    float sum_scale;
    const float *dst;     /* the output's first float (for sum) */
    int post_op;          /* PPL_POST_*: relu, leaky relu or clip inline, others out of line */
    float p0, p1;         /* post-op parameters */
    const struct ppl_post_chain_s *chain;  /* NULL, or entries [chain_first, len) of a chain
                                              applied to the stored tile */
    int chain_first;
    ptrdiff_t col0;       /* the channel (GEMM column) of tile column 0, for the chain */
    ptrdiff_t b_prefetch; /* floats ahead of its B loads that a tile prefetches (below) */
} ppl_epilogue;

/* An epilogue that writes alpha = 1 times the product and nothing else. */
static inline void ppl_epilogue_reset(ppl_epilogue *ep) {
    __builtin_memset(ep, 0, sizeof *ep);
    ep->alpha = 1.0f;
}

#define PPL_INLINE static inline __attribute__((always_inline))

PPL_INLINE ppl_vf ppl_load(const float *p) {
    ppl_vf v;
    __builtin_memcpy(&v, p, sizeof v);  /* an unaligned vector load */
    return v;
}

PPL_INLINE void ppl_store(float *p, ppl_vf v) { __builtin_memcpy(p, &v, sizeof v); }

/* A broadcast written as an initialiser: "(ppl_vf){0} + s" would cost an add, since without
 * -ffast-math 0 + s is not s (for s = -0). */
PPL_INLINE ppl_vf ppl_splat(float s) {
#if PPL_VLEN == 16
    return (ppl_vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
#elif PPL_VLEN == 8
    return (ppl_vf){s, s, s, s, s, s, s, s};
#else
    return (ppl_vf){s, s, s, s};
#endif
}

PPL_INLINE ppl_vf ppl_select(ppl_vi mask, ppl_vf a, ppl_vf b) {
    return (ppl_vf)(((ppl_vi)a & mask) | ((ppl_vi)b & ~mask));
}

/* Offset of the vector starting at tile column j0 (j0 a multiple of PPL_VLEN). */
PPL_INLINE ptrdiff_t ppl_col(int j0, ptrdiff_t cbs) { return (j0 / PPL_CB) * cbs + j0 % PPL_CB; }

/* The post-ops are the activations of _activation_fp32.h, applied to whole vectors. */
#include "_activation_fp32.h"
#include "_post_chain_fp32.h"

/* One float through a post-op: lane 0 of the vector function, so that scalar and vector
 * paths give the same bits.  It computes a whole vector for one value: over a row, prefer
 * adding first and then one ppl_activation call. */
PPL_INLINE float ppl_post_scalar(float x, int post_op, float p0, float p1) {
    return ppl_apply_activation_compact(ppl_splat(x), post_op, p0, p1)[0];
}

/* A post-op the epilogue applies on the accumulators themselves: relu, leaky relu, clip.
 * Any other (a transcendental one) would be a call inside the unrolled store loop, and a call
 * there makes gcc spill every accumulator of the tile to the stack before the loop (all zmm
 * registers are caller-saved); such a post-op runs over the stored tile instead. */
#define PPL_POST_IS_INLINE(code) ((code) >= PPL_POST_NONE && (code) <= PPL_POST_CLIP)

/* x through one PPL_POST_IS_INLINE post-op (none for any other code). */
PPL_INLINE ppl_vf ppl_post_inline(ppl_vf x, int code, float p0, float p1) {
    switch (code) {
    case PPL_POST_RELU: return ppl_relu(x);
    case PPL_POST_LEAKY_RELU: return ppl_leaky_relu(x, p0);
    case PPL_POST_CLIP: return ppl_clip(x, p0, p1);
    default: return x;
    }
}

/* The common epilogue of a full-width tile: acc + bias, plus a leading sum post-op where
 * has_sum (sum_scale * the operand at the output's offsets, read just before each element
 * is written: inplace_sum.py may have placed C on it), through a cheap activation (post and
 * has_sum compile-time constants after inlining), stored.  No field of the epilogue is read
 * inside the loop: a store to C could alias it, which would make gcc reload it after every
 * store.  Adding a zero bias is exact here: an accumulator that starts at +0 is never -0.
 * The order and rounding of the general path below. */
PPL_INLINE void ppl_epilogue_store_fast(const int M, ppl_vf acc[][PPL_NV], const ppl_vf bv[],
                                        float *c, ptrdiff_t ldc, ptrdiff_t cbs,
                                        const float *sum, const ppl_vf sum_scale,
                                        const int has_sum, const int post, float p0,
                                        float p1) {
#pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NV; v++) {
            const ptrdiff_t off = r * ldc + ppl_col(v * PPL_VLEN, cbs);
            ppl_vf x = acc[r][v] + bv[v];
            if (has_sum) x = sum_scale * ppl_load(sum + off) + x;
            ppl_store(c + off, ppl_activation_inline(x, post, p0, p1));
        }
    }
}

/* ppl_epilogue_store_fast with post a constant: one copy per cheap activation. */
PPL_INLINE void ppl_epilogue_store_fast_post(const int M, ppl_vf acc[][PPL_NV],
                                             const ppl_vf bv[], float *c, ptrdiff_t ldc,
                                             ptrdiff_t cbs, const float *sum,
                                             const ppl_vf sum_scale, const int has_sum,
                                             const int post, float p0, float p1) {
    switch (post) {
    case PPL_POST_RELU:
        ppl_epilogue_store_fast(M, acc, bv, c, ldc, cbs, sum, sum_scale, has_sum,
                                PPL_POST_RELU, p0, p1);
        break;
    case PPL_POST_LEAKY_RELU:
        ppl_epilogue_store_fast(M, acc, bv, c, ldc, cbs, sum, sum_scale, has_sum,
                                PPL_POST_LEAKY_RELU, p0, p1);
        break;
    case PPL_POST_CLIP:
        ppl_epilogue_store_fast(M, acc, bv, c, ldc, cbs, sum, sum_scale, has_sum,
                                PPL_POST_CLIP, p0, p1);
        break;
    default:
        ppl_epilogue_store_fast(M, acc, bv, c, ldc, cbs, sum, sum_scale, has_sum,
                                PPL_POST_NONE, p0, p1);
        break;
    }
}

/* A post-op that is not PPL_POST_IS_INLINE, over the stored tile (still in L1), a vector at
 * a time through the one out-of-line activation switch.  The producers' own epilogues only
 * ever ask for inline post-ops (the rest of a chain goes to ppl_post_chain_tile); this keeps
 * a direct brgemm call with any activation correct without a second copy of every
 * activation loop in each module (measured: that copy took _gemm_fp32_avx512's compile
 * from 24.5 s to 29.3 s). */
static __attribute__((noinline, unused)) void ppl_epilogue_post_tile(
        float *c, ptrdiff_t ldc, ptrdiff_t cbs, int M, int n_valid, int post, float p0,
        float p1) {
    for (int r = 0; r < M; r++)
        for (int j0 = 0; j0 < n_valid; j0 += PPL_VLEN) {
            float *p = c + r * ldc + ppl_col(j0, cbs);
            const ptrdiff_t nv = n_valid - j0 < PPL_VLEN ? n_valid - j0 : PPL_VLEN;
            const ppl_vf x = ppl_act_load_partial(p, nv);
            ppl_act_store_partial(p, ppl_apply_activation_outlined(x, post, p0, p1), nv);
        }
}

/* Write acc[0..M) x [0..PPL_NV) through the epilogue into C.  A full-width tile works on
 * whole vectors in place.  A tile narrower than PPL_NB (the last panel of an N not a
 * multiple of PPL_NB) does the same on vectors loaded zero-padded past column n_valid and
 * stores only the valid lanes: a vector never straddles a 16-channel block (PPL_VLEN divides
 * 16), so each one's valid columns are contiguous in C.  The common case (alpha 1, nothing
 * to accumulate or add but a leading sum, a cheap activation or none) has a copy per
 * activation, with a sum and without, with the bias vectors loaded once per tile (a tile
 * with a sum took the general path before: a residual 1x1 conv 64 -> 256 took 10-15%
 * longer than without its residual, as long as the same conv now). */
PPL_INLINE void ppl_epilogue_store(const int M, ppl_vf acc[][PPL_NV], int n_valid, float *c,
                                   ptrdiff_t ldc, ptrdiff_t cbs, const ppl_epilogue *ep) {
    _Static_assert((int)PPL_POST_RELU == (int)PPL_ACT_RELU &&
                       (int)PPL_POST_LEAKY_RELU == (int)PPL_ACT_LEAKY_RELU &&
                       (int)PPL_POST_CLIP == (int)PPL_ACT_CLIP &&
                       (int)PPL_POST_SIGMOID == (int)PPL_ACT_SIGMOID &&
                       (int)PPL_POST_TANH == (int)PPL_ACT_TANH &&
                       (int)PPL_POST_HARD_SWISH == (int)PPL_ACT_HARD_SWISH,
                   "post-op codes must be the activation codes");
    /* Every field read once, before any store (see ppl_epilogue_store_fast). */
    const float alpha_s = ep->alpha, beta_s = ep->beta, p0 = ep->p0, p1 = ep->p1;
    const int accumulate = ep->accumulate, post = ep->post_op;
    const float *bias = ep->bias;
    const float *addend = ep->addend;
    const float *sum = ep->sum ? ep->sum + (c - ep->dst) : NULL;
    const struct ppl_post_chain_s *chain = ep->chain;
    const int chain_first = ep->chain_first;
    const ptrdiff_t col0 = ep->col0;
    const ppl_vf alpha = ppl_splat(alpha_s), beta = ppl_splat(beta_s);
    const ppl_vf sum_scale = ppl_splat(ep->sum_scale);
    if (n_valid == PPL_NB && alpha_s == 1.0f && !accumulate && !addend) {
        ppl_vf bv[PPL_NV];
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NV; v++)
            bv[v] = bias ? ppl_load(bias + v * PPL_VLEN) : ppl_splat(0.0f);
        if (sum)  /* a leading sum: a residual */
            ppl_epilogue_store_fast_post(M, acc, bv, c, ldc, cbs, sum, sum_scale, 1, post, p0,
                                         p1);
        else
            ppl_epilogue_store_fast_post(M, acc, bv, c, ldc, cbs, sum, sum_scale, 0, post, p0,
                                         p1);
    } else if (n_valid == PPL_NB) {
#pragma GCC unroll 16
        for (int r = 0; r < M; r++) {
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NV; v++) {
                const ptrdiff_t off = r * ldc + ppl_col(v * PPL_VLEN, cbs);
                ppl_vf x = acc[r][v] * alpha;
                if (accumulate) x += ppl_load(c + off);
                if (addend) x += ppl_load(addend + off) * beta;
                if (bias) x += ppl_load(bias + v * PPL_VLEN);
                if (sum) x = sum_scale * ppl_load(sum + off) + x;
                ppl_store(c + off, ppl_post_inline(x, post, p0, p1));
            }
        }
    } else {
        /* Unrolled like the loops above: an acc index that is not a compile-time constant
         * would keep the whole tile in memory instead of registers, in every path. */
#pragma GCC unroll 16
        for (int r = 0; r < M; r++) {
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NV; v++) {
                const int j0 = v * PPL_VLEN;
                if (j0 >= n_valid) break;
                const ptrdiff_t nv = n_valid - j0 < PPL_VLEN ? n_valid - j0 : PPL_VLEN;
                const ptrdiff_t off = r * ldc + ppl_col(j0, cbs);
                ppl_vf x = acc[r][v] * alpha;
                if (accumulate) x += ppl_act_load_partial(c + off, nv);
                if (addend) x += ppl_act_load_partial(addend + off, nv) * beta;
                if (bias) x += ppl_act_load_partial(bias + j0, nv);
                if (sum) x = sum_scale * ppl_act_load_partial(sum + off, nv) + x;
                ppl_act_store_partial(c + off, ppl_post_inline(x, post, p0, p1), nv);
            }
        }
    }
    /* A transcendental post-op, then the rest of the chain, on the stored tile (in L1). */
    if (!PPL_POST_IS_INLINE(post))
        ppl_epilogue_post_tile(c, ldc, cbs, M, n_valid, post, p0, p1);
    if (chain)
        ppl_post_chain_tile(chain, chain_first, c, ldc, cbs, M, n_valid, col0);
}

/* An M-row tile's accumulators: set to zero, copied out. */
PPL_INLINE void ppl_acc_zero(const int M, ppl_vf acc[][PPL_NV]) {
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NV; v++) acc[r][v] = ppl_splat(0.0f);
}

PPL_INLINE void ppl_acc_copy(const int M, ppl_vf dst[][PPL_NV], ppl_vf src[][PPL_NV]) {
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NV; v++) dst[r][v] = src[r][v];
}

/* B (the packed weights) is read as one stream, in the order the tiles take it: 2 KB of a
 * panel per batch element or 16-k block on AVX-512.  Where a layer's weights do not stay in
 * cache from one run to the next (the deep layers of a CNN, 1-9 MB each; a transformer's
 * matrices), the first tile over a panel waits on memory: at the FMA peak it wants a cache
 * line every 7 cycles.  So each tile also asks for the line ep->b_prefetch floats ahead of
 * every B line it loads (two per k on AVX-512): B is packed contiguously per panel, so that
 * is the B of a batch element or k block a few steps on.  The op sets the distance when it
 * is made, from its weights' size (b_prefetch.py); 0 skips the instructions (a branch per k
 * that always goes the same way: on the fma tier, whose tile leaves one of the 16 vector
 * registers free, the prefetches at distance 0 had cost a 128 -> 128 3x3 stride-2 conv
 * about 5%, the same as building without them).  On a 16-core Xeon (2 MB L2), ResNet-50 at
 * one thread, 4 blocks ahead against none: 63.2 -> 54.7 ms of nodes, its 256 -> 256 Winograd
 * layers 61 -> 87% of peak, the 1 x 1 convs over 4 MB of weights 58 -> 75%.  Warm weights
 * gain nothing and pay the instructions: MobileNetV2 on the Zen 4 EPYC ran 4% slower with
 * every layer prefetching, hence the size threshold. */
PPL_INLINE void ppl_prefetch_b(const float *p) {
#pragma GCC unroll 4
    for (int l = 0; l < (PPL_NB + 15) / 16; l++) __builtin_prefetch(p + l * 16, 0, 3);
}

/* bi + pfb as one opaque pointer: the tile then prefetches at bp + kk * PPL_NB, a constant
 * displacement per unrolled k.  Left to itself gcc 12 hoists pfb + kk * PPL_NB out of the
 * batch loop as one register per unrolled k, 16 of them, and the fma tier's k = 16 loop then
 * kept accumulators on the stack (`perf annotate` of a 1 x 1 conv with 16 input channels);
 * with the barrier that loop has no stack access.  That conv's time was within the noise
 * either way, and the same as before the prefetch existed (64fa111's module, swapped in). */
PPL_INLINE const float *ppl_prefetch_base(const float *bi, ptrdiff_t pfb) {
    const float *bp = bi + pfb;
    __asm__("" : "+r"(bp));
    return bp;
}

/* The body of a noinline accumulate function (the callers below say why they stand apart
 * from the epilogue): a switch over the tile height m whose case M zeroes a tile t of its
 * own, runs PPL_ACC_BODY(M, t), which the function defines around it, and copies t to acc. */
#define PPL_ACC_CASE(M) \
    case M: { \
        ppl_vf t[PPL_MR][PPL_NV]; \
        ppl_acc_zero(M, t); \
        PPL_ACC_BODY(M, t); \
        ppl_acc_copy(M, acc, t); \
    } break;
#define PPL_ACC_SWITCH(m, acc) \
    switch (m) { \
    PPL_TILE_ROWS(PPL_ACC_CASE) \
    default: break; \
    }

/* acc[r][v] += sum over the batch of A_i[r, :k] . B_i[:k, v-th vector]; M, abc and (when the
 * caller passes a literal) k are compile-time constants after inlining.  abc: A holds every
 * element already broadcast to a whole vector (PPL_A_BCAST below; lda still counts
 * elements). */
PPL_INLINE void ppl_tile_accumulate(const int M, ptrdiff_t nbatch, const float **a,
                                    const float **b, const ptrdiff_t k, ptrdiff_t lda,
                                    ppl_vf acc[][PPL_NV], const int abc, ptrdiff_t pfb) {
    for (ptrdiff_t i = 0; i < nbatch; i++) {
        const float *ai = a[i];
        const float *bi = b[i];
        const float *bp = ppl_prefetch_base(bi, pfb);
PPL_UNROLL(PPL_KUNROLL)
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            ppl_vf bv[PPL_NV];
            if (pfb) ppl_prefetch_b(bp + kk * PPL_NB);
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NV; v++) bv[v] = ppl_load(bi + kk * PPL_NB + v * PPL_VLEN);
#pragma GCC unroll 16
            for (int r = 0; r < M; r++) {
                const ppl_vf av = abc ? ppl_load(ai + (r * lda + kk) * PPL_VLEN)
                                      : ppl_splat(ai[r * lda + kk]);
#pragma GCC unroll 4
                for (int v = 0; v < PPL_NV; v++) acc[r][v] += av * bv[v];
            }
        }
    }
}

/* M rows (a compile-time constant after inlining), one accumulator per row and vector.  A
 * convolution always steps k = 16 (one channel block) per batch element: that case gets a
 * copy with the k loop fully unrolled, since its loop overhead is otherwise paid every 16
 * steps.  Not on SSE: with two-operand instructions every multiply needs a register copy,
 * and the unrolled copy (with the 6 x 2 tile SSE had then) ran the conv's batch-reduce at 36%
 * of the tier's peak against 75% with the plain loop (benchmarks/brgemm.py,
 * 9 x (3136 x 64 x 64)). */
PPL_INLINE void ppl_brgemm_tile(const int M, ptrdiff_t nbatch, const float **a, const float **b,
                                ptrdiff_t k, ptrdiff_t lda, float *c, ptrdiff_t ldc,
                                ptrdiff_t cbs, int n_valid, const ppl_epilogue *ep,
                                const int abc) {
    ppl_vf acc[PPL_MR][PPL_NV];
    ppl_acc_zero(M, acc);
#if PPL_VLEN > 4
    if (k == PPL_CB)
        ppl_tile_accumulate(M, nbatch, a, b, PPL_CB, lda, acc, abc, ep->b_prefetch);
    else
#endif
        ppl_tile_accumulate(M, nbatch, a, b, k, lda, acc, abc, ep->b_prefetch);
    ppl_epilogue_store(M, acc, n_valid, c, ldc, cbs, ep);
}

/* One row (a matrix-vector product, or a border pixel of a convolution): PPL_NV chains of
 * dependent FMAs would be latency-bound, so four independent accumulator sets take
 * successive k and are summed at the end. */
PPL_INLINE void ppl_brgemm_row1(ptrdiff_t nbatch, const float **a, const float **b, ptrdiff_t k,
                                float *c, ptrdiff_t cbs, int n_valid, const ppl_epilogue *ep) {
    ppl_vf acc[4][PPL_NV];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NV; v++) acc[u][v] = ppl_splat(0.0f);
    for (ptrdiff_t i = 0; i < nbatch; i++) {
        const float *ai = a[i];
        const float *bi = b[i];
        ptrdiff_t kk = 0;
        for (; kk + 4 <= k; kk += 4) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const ppl_vf av = ppl_splat(ai[kk + u]);
#pragma GCC unroll 4
                for (int v = 0; v < PPL_NV; v++)
                    acc[u][v] += av * ppl_load(bi + (kk + u) * PPL_NB + v * PPL_VLEN);
            }
        }
        for (; kk < k; kk++) {
            const ppl_vf av = ppl_splat(ai[kk]);
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NV; v++)
                acc[0][v] += av * ppl_load(bi + kk * PPL_NB + v * PPL_VLEN);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < PPL_NV; v++) acc[0][v] = (acc[0][v] + acc[1][v]) + (acc[2][v] + acc[3][v]);
    ppl_epilogue_store(1, acc, n_valid, c, PPL_CB, cbs, ep);
}

/* A tile whose valid columns fit half a panel (n_valid <= PPL_NB / 2: a last panel of 16
 * output channels on AVX-512) would spend half of its FMAs on zero columns.  This one is
 * PPL_MR2 = 2 * PPL_MR rows by PPL_NVH = PPL_NV / 2 vectors: as many accumulators, none
 * wasted.  Its two halves go through the common epilogue as PPL_MR-row tiles.  Its K loop
 * is a copy of ppl_tile_accumulate's with PPL_NVH vectors: one macro for both was measured to
 * change gcc's register allocation of this tile (75 more stack accesses in the narrow kernel),
 * so the two copies stay written out. */
#define PPL_NVH (PPL_NV / 2)
#define PPL_MR2 (2 * PPL_MR)

PPL_INLINE void ppl_tile_accumulate_narrow(ptrdiff_t nbatch, const float **a, const float **b,
                                           const ptrdiff_t k, ptrdiff_t lda,
                                           ppl_vf acc[][PPL_NVH], ptrdiff_t pfb) {
    for (ptrdiff_t i = 0; i < nbatch; i++) {
        const float *ai = a[i];
        const float *bi = b[i];
        const float *bp = ppl_prefetch_base(bi, pfb);
PPL_UNROLL(PPL_KUNROLL)
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            ppl_vf bv[PPL_NVH];
            if (pfb) ppl_prefetch_b(bp + kk * PPL_NB);
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NVH; v++) bv[v] = ppl_load(bi + kk * PPL_NB + v * PPL_VLEN);
#pragma GCC unroll 28
            for (int r = 0; r < PPL_MR2; r++) {
                const ppl_vf av = ppl_splat(ai[r * lda + kk]);
#pragma GCC unroll 4
                for (int v = 0; v < PPL_NVH; v++) acc[r][v] += av * bv[v];
            }
        }
    }
}

static __attribute__((unused)) void ppl_brgemm_narrow(int n_valid, ptrdiff_t nbatch,
                                                      const float **a, const float **b,
                                                      ptrdiff_t k, ptrdiff_t lda, float *c,
                                                      ptrdiff_t ldc, ptrdiff_t cbs,
                                                      const ppl_epilogue *ep) {
    ppl_vf acc[PPL_MR2][PPL_NVH];
#pragma GCC unroll 28
    for (int r = 0; r < PPL_MR2; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_NVH; v++) acc[r][v] = ppl_splat(0.0f);
    if (k == PPL_CB)
        ppl_tile_accumulate_narrow(nbatch, a, b, PPL_CB, lda, acc, ep->b_prefetch);
    else
        ppl_tile_accumulate_narrow(nbatch, a, b, k, lda, acc, ep->b_prefetch);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        ppl_vf half[PPL_MR][PPL_NV];
#pragma GCC unroll 16
        for (int r = 0; r < PPL_MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < PPL_NV; v++)
                half[r][v] = v < PPL_NVH ? acc[h * PPL_MR + r][v] : ppl_splat(0.0f);
        ppl_epilogue_store(PPL_MR, half, n_valid, c + h * PPL_MR * ldc, ldc, cbs, ep);
    }
}

/* acc[:m] = the batch-reduced product of an m-row tile (2 <= m <= PPL_MR), apart from the
 * epilogue for the reason ppl_gemm_accumulate_blocked gives: inlined with it, the 14-row
 * k = 16 loop kept an accumulator on the stack (8 stores per 8 k; objdump).  Rows stay a
 * run-time lda apart here (tails of convolution rows, attention, ConvTranspose). */
static __attribute__((noinline, unused)) void ppl_brgemm_accumulate(
        int m, ptrdiff_t nbatch, const float **a, const float **b, ptrdiff_t k, ptrdiff_t lda,
        ppl_vf acc[][PPL_NV], ptrdiff_t pfb) {
#define PPL_ACC_BODY(M, t) \
    if (PPL_VLEN > 4 && k == PPL_CB) \
        ppl_tile_accumulate(M, nbatch, a, b, PPL_CB, lda, t, 0, pfb); \
    else \
        ppl_tile_accumulate(M, nbatch, a, b, k, lda, t, 0, pfb)
    PPL_ACC_SWITCH(m, acc)
#undef PPL_ACC_BODY
}

/* C = epilogue(sum over nbatch of A_i[m x k] . B_i[k x PPL_NB]), 0 <= m <= PPL_MR,
 * or m = PPL_MR2 with n_valid <= PPL_NB / 2 (the narrow tile); columns at
 * and past n_valid (1 <= n_valid <= PPL_NB) are computed but not written.  Every row count
 * has its own fully unrolled copy of the kernel (ppl_brgemm_accumulate's switch). */
static __attribute__((unused)) void ppl_brgemm(int m, int n_valid, ptrdiff_t nbatch, const float **a, const float **b,
                       ptrdiff_t k, ptrdiff_t lda, float *c, ptrdiff_t ldc, ptrdiff_t cbs,
                       const ppl_epilogue *ep) {
#define PPL_TILE_CASE(M) \
    case M: ppl_epilogue_store(M, acc, n_valid, c, ldc, cbs, ep); break;
    if (m == PPL_MR2 && n_valid <= PPL_NB / 2) {
        ppl_brgemm_narrow(n_valid, nbatch, a, b, k, lda, c, ldc, cbs, ep);
        return;
    }
    if (m == 1) {
        ppl_brgemm_row1(nbatch, a, b, k, c, cbs, n_valid, ep);
        return;
    }
    ppl_vf acc[PPL_MR][PPL_NV];
    ppl_brgemm_accumulate(m, nbatch, a, b, k, lda, acc, ep->b_prefetch);
    switch (m) {
    PPL_TILE_ROWS(PPL_TILE_CASE)
    default: break;
    }
#undef PPL_TILE_CASE
}

/* count rows of A (lda apart) into count rows of C (ldc apart), a whole run of tiles: what a
 * convolution's output row or a GEMM's panel is.  The batch pointers a[] are moved along
 * the rows as the tiles go (they end past the last row).  Full tiles run in this loop with
 * their own inlined copy of the kernel, so no tile pays a call, a dispatch or the prologue
 * of ppl_brgemm's large frame (measured: that overhead was about a third of a 1x1 conv tile
 * with 16 input channels); the last partial tile goes through ppl_brgemm.  A stride-1
 * convolution (k and lda both one channel block) gets a copy of the full tile with both as
 * constants, so the tile reads its 14 rows at fixed offsets from one pointer: with lda in a
 * register gcc kept the row offsets in general registers, reloading the overflow from the
 * stack (18 reads per 8 k) or from vector registers (7 moves, each on port 0, an FMA port;
 * objdump).  The rest of a post-op chain (ep->chain) goes over the whole run once its tiles
 * are stored, rather than over each tile: a call per tile, with the chain's dispatch and its
 * constants loaded again, on the fma tier's 6 x 16 tiles (EfficientNet-B0's 16 -> 96 1x1
 * conv with swish: 1.30 -> 1.00 ms with this and the flat loop of _post_chain_fp32.h). */
static __attribute__((unused)) void ppl_brgemm_run(ptrdiff_t count, ptrdiff_t nbatch,
                                                   const float **a, const float **b,
                                                   ptrdiff_t k, ptrdiff_t lda, float *c,
                                                   ptrdiff_t ldc, ptrdiff_t cbs, int n_valid,
                                                   const ppl_epilogue *ep) {
    if (ep->chain && count > 0) {
        ppl_epilogue tiles = *ep;
        tiles.chain = NULL;
        ppl_brgemm_run(count, nbatch, a, b, k, lda, c, ldc, cbs, n_valid, &tiles);
        ppl_post_chain_tile(ep->chain, ep->chain_first, c, ldc, cbs, count, n_valid, ep->col0);
        return;
    }
    const int narrow = n_valid <= PPL_NB / 2;
    const ptrdiff_t step = narrow ? PPL_MR2 : PPL_MR;
    for (; count >= step; count -= step, c += step * ldc) {
#if PPL_VLEN > 4
        if (narrow && k == PPL_CB && lda == PPL_CB)
            ppl_brgemm_narrow(n_valid, nbatch, a, b, PPL_CB, PPL_CB, c, ldc, cbs, ep);
        else
#endif
        if (narrow)
            ppl_brgemm_narrow(n_valid, nbatch, a, b, k, lda, c, ldc, cbs, ep);
#if PPL_VLEN > 4
        else if (k == PPL_CB && lda == PPL_CB)
            ppl_brgemm_tile(PPL_MR, nbatch, a, b, PPL_CB, PPL_CB, c, ldc, cbs, n_valid, ep, 0);
#endif
        else
            ppl_brgemm_tile(PPL_MR, nbatch, a, b, k, lda, c, ldc, cbs, n_valid, ep, 0);
        for (ptrdiff_t i = 0; i < nbatch; i++) a[i] += step * lda;
    }
    while (count > 0) {  /* at most two short tiles (a narrow run's rest can exceed PPL_MR) */
        const int m = count < PPL_MR ? (int)count : PPL_MR;
        ppl_brgemm(m, n_valid, nbatch, a, b, k, lda, c, ldc, cbs, ep);
        for (ptrdiff_t i = 0; i < nbatch; i++) a[i] += m * lda;
        c += m * ldc;
        count -= m;
    }
}

/* ppl_brgemm_run's full tiles over A broadcast (PPL_A_BCAST's layout: every element a whole
 * vector, lda still counting elements): count // PPL_MR tiles of PPL_MR rows, a[] moved
 * past them; the caller runs the rest (count % PPL_MR rows) through ppl_brgemm_run on A as
 * it is.  For the sse tier's direct convolution (_conv_fp32.pxi), whose copy puts a
 * pixel's channel blocks side by side so that a batch element spans them all (k = 16 x
 * blocks): each output sums its products in ppl_brgemm_run's order, so the two give the
 * same bits. */
static __attribute__((unused)) void ppl_brgemm_run_bcast(ptrdiff_t count, ptrdiff_t nbatch,
                                                         const float **a, const float **b,
                                                         ptrdiff_t k, ptrdiff_t lda, float *c,
                                                         ptrdiff_t ldc, ptrdiff_t cbs,
                                                         int n_valid, const ppl_epilogue *ep) {
    for (; count >= PPL_MR; count -= PPL_MR, c += PPL_MR * ldc) {
        ppl_brgemm_tile(PPL_MR, nbatch, a, b, k, lda, c, ldc, cbs, n_valid, ep, 1);
        for (ptrdiff_t i = 0; i < nbatch; i++) a[i] += PPL_MR * lda * PPL_VLEN;
    }
}

/* One row, summed in the order of the tiles (ppl_brgemm's one-row case interleaves four
 * partial sums to hide the FMA latency, which rounds differently): for a caller whose rows
 * fall into tiles differently from one split into work items to another, and whose bits must
 * not depend on that split.  Latency-bound: only for an odd row at the end of a run. */
static __attribute__((noinline, unused)) void ppl_brgemm_row1_tiled(
        ptrdiff_t nbatch, const float **a, const float **b, ptrdiff_t k, float *c,
        ptrdiff_t cbs, int n_valid, const ppl_epilogue *ep) {
    ppl_brgemm_tile(1, nbatch, a, b, k, 0, c, PPL_CB, cbs, n_valid, ep, 0);
}

/* How a GEMM lays out the K chunk of A that it copies (_gemm_fp32.pxi), per tier:
 *
 * PPL_A_BCAST (SSE): rows kc apart, every element broadcast to a whole vector (PPL_VLEN
 * floats), so that the tile reads each broadcast with one load.  SSE has no broadcast load: a
 * splat is a scalar load and a shuffle, and with two-operand instructions each multiply-add
 * also needs a register copy, so the 2 x 4 tile issued 28 instructions per k for 16
 * multiplies and adds, more than the front end passes in the 4 cycles that the multiply and
 * add pipes need.  The broadcast copy takes 2 of those away: benchmarks/brgemm_harness.c
 * built for SSE on the 2-core Zen 4 EPYC, 512 x 768 x 512 at 41.4 -> 48.2 GFLOP/s (82 -> 96%
 * of the 50.2 that benchmarks/peak.py measures), 128 x 768 x 768 41.9 -> 46.8-49.4.
 *
 * Otherwise (AVX2, AVX-512) blocked: each tile's m rows in blocks of PPL_CB columns, block kb
 * at kb * m * PPL_CB holding row r's columns at r * PPL_CB: the N16CX input of a stride-1
 * convolution, so the tile reads A at fixed offsets from one pointer.  With rows a run-time
 * lda apart the 14-row tile needs 14 row offsets in general registers; gcc parked some of
 * them in vector registers and, out of vector registers, kept an accumulator on the stack
 * (a store and a reload per k; objdump of the module), where benchmarks/brgemm_harness.c,
 * whose loop had no spill, ran at 94% of a Sapphire Rapids core's peak and the module's GEMM
 * at 58% (brgemm.py, session 11).  Blocked, with the accumulation in a function of its own
 * (ppl_gemm_accumulate_blocked), the module's loop is the harness's, instruction for
 * instruction.  On the Zen 4 EPYC, the module's GEMM steps 512 x 512 x 512 and 128 x 768 x
 * 768, one core, median of 25 warm runs: 92.5 -> 97.3% and 91.8 -> 98.1% of peak. */
#if PPL_VLEN == 4
#define PPL_A_BCAST 1
#else
#define PPL_A_BCAST 0
#endif

/* The source rows of the tile a GEMM copies next (pf_rows rows pf_lda apart, from pf): one
 * cache line of each, column kb, is asked into L2 while the current tile works through its
 * k block kb, so that the next tile's copy reads L2 instead of memory.  A tall, narrow GEMM
 * (3136 x 64 x 576: ResNet-50's first 3x3 stage as an im2col GEMM) spent 13% of its time in
 * the copy, waiting on memory, since its A (7 MB) is read only N / PPL_NB times. */
PPL_INLINE void ppl_prefetch_rows(const float *pf, ptrdiff_t pf_lda, int pf_rows,
                                  ptrdiff_t kb) {
    if (pf == NULL) return;
    pf += kb;
    for (int r = 0; r < pf_rows; r++, pf += pf_lda) __builtin_prefetch(pf, 0, 2);
}

#if !PPL_A_BCAST
/* acc += the tile's A (M rows, blocked as above) . B's k rows, prefetching (pf, pf_lda,
 * pf_rows: ppl_prefetch_rows) as it goes. */
PPL_INLINE void ppl_tile_accumulate_blocked(const int M, const float *a, const float *b,
                                            ptrdiff_t k, ppl_vf acc[][PPL_NV], const float *pf,
                                            ptrdiff_t pf_lda, int pf_rows, ptrdiff_t pfb) {
    ptrdiff_t kb = 0;
    for (; kb + PPL_CB <= k; kb += PPL_CB) {
        ppl_prefetch_rows(pf, pf_lda, pf_rows, kb);
        ppl_tile_accumulate(M, 1, &a, &b, PPL_CB, PPL_CB, acc, 0, pfb);
        a += M * PPL_CB;
        b += PPL_CB * PPL_NB;
    }
    if (kb < k)
        ppl_tile_accumulate(M, 1, &a, &b, k - kb, PPL_CB, acc, 0, pfb);
}

/* acc[:m] = the tile's A . B, one copy per tile height.  Apart from the epilogue: inlined
 * into it, the 14 x 2 tile (28 accumulators, 2 B vectors and a broadcast: 31 of the 32
 * registers) kept one accumulator on the stack, a store and a reload per k (objdump); alone
 * it keeps them all in registers, and the tile pays 28 stores and loads of acc instead. */
static __attribute__((noinline, unused)) void ppl_gemm_accumulate_blocked(
        int m, const float *a, const float *b, ptrdiff_t k, ppl_vf acc[][PPL_NV],
        const float *pf, ptrdiff_t pf_lda, int pf_rows, ptrdiff_t pfb) {
#define PPL_ACC_BODY(M, t) ppl_tile_accumulate_blocked(M, a, b, k, t, pf, pf_lda, pf_rows, pfb)
    PPL_ACC_SWITCH(m, acc)
#undef PPL_ACC_BODY
}

#endif

/* One GEMM tile, 1 <= m <= PPL_MR rows, of A laid out for this tier as above (lda: the row
 * stride of a broadcast copy, in elements; unused when blocked), one batch element.  Every
 * layout sums each output in the same order, k = 0, 1, ... (one row: ppl_brgemm_row1's).
 * pf (or NULL), pf_lda, pf_rows: the source rows of the tile copied next, prefetched while
 * this one computes (ppl_prefetch_rows). */
static __attribute__((unused)) void ppl_brgemm_gemm(int m, int n_valid, const float *a,
                                                    const float *b, ptrdiff_t k,
                                                    ptrdiff_t lda, float *c, ptrdiff_t ldc,
                                                    const ppl_epilogue *ep, const float *pf,
                                                    ptrdiff_t pf_lda, int pf_rows) {
#if PPL_A_BCAST
    /* a 2-row tile is short: its successor's lines are asked for all at once */
    if (pf != NULL)
        for (ptrdiff_t kb = 0; kb < k; kb += PPL_CB) ppl_prefetch_rows(pf, pf_lda, pf_rows, kb);
#define PPL_GEMM_CASE(M) \
    case M: ppl_brgemm_tile(M, 1, &a, &b, k, lda, c, ldc, PPL_CB, n_valid, ep, 1); break;
    switch (m) {
    PPL_GEMM_CASE(1)
    PPL_GEMM_CASE(2)
#if PPL_MR > 2
#error "PPL_A_BCAST tiers have at most 2 rows per tile"
#endif
    default: break;
    }
#else
#define PPL_GEMM_CASE(M) \
    case M: ppl_epilogue_store(M, acc, n_valid, c, ldc, PPL_CB, ep); break;
    (void)lda;
    if (m == 1) {
        ppl_brgemm_row1(1, &a, &b, k, c, PPL_CB, n_valid, ep);
        return;
    }
    ppl_vf acc[PPL_MR][PPL_NV];
    ppl_gemm_accumulate_blocked(m, a, b, k, acc, pf, pf_lda, pf_rows, ep->b_prefetch);
    switch (m) {
    PPL_TILE_ROWS(PPL_GEMM_CASE)
    default: break;
    }
#endif
#undef PPL_GEMM_CASE
}

/* ---- Depthwise convolution on N16CX: one 16-channel block, vectorised over channels. ---- */

/* Output pixels per register tile: PPL_DW_M x PPL_CBV = 8 accumulators at every width. */
#define PPL_DW_M (PPL_VLEN / 2)

/* One output pixel at input column iw0 = ow * sw - pl, any position (bounds checked). */
PPL_INLINE void ppl_dw_pixel(const float *x, ptrdiff_t W, const float *w, int kh_lo, int kh_hi,
                             ptrdiff_t ih0, ptrdiff_t iw0, int KW, int dh, int dw,
                             ppl_vf acc[PPL_CBV]) {
    for (int kh = kh_lo; kh < kh_hi; kh++) {
        const float *xr = x + (ih0 + (ptrdiff_t)kh * dh) * W * PPL_CB;
        for (int kw = 0; kw < KW; kw++) {
            const ptrdiff_t iw = iw0 + (ptrdiff_t)kw * dw;
            if (iw < 0 || iw >= W) continue;
            const float *wp = w + (kh * KW + kw) * PPL_CB;
#pragma GCC unroll 4
            for (int v = 0; v < PPL_CBV; v++)
                acc[v] += ppl_load(xr + iw * PPL_CB + v * PPL_VLEN) * ppl_load(wp + v * PPL_VLEN);
        }
    }
}

PPL_INLINE void ppl_dw_finish(ppl_vf acc[PPL_CBV], const float *bias, float *y, int post_op,
                              float p0, float p1) {
#pragma GCC unroll 4
    for (int v = 0; v < PPL_CBV; v++) {
        ppl_vf x = acc[v] + ppl_load(bias + v * PPL_VLEN);
        ppl_store(y + v * PPL_VLEN, ppl_apply_activation_compact(x, post_op, p0, p1));
    }
}

/* M interior pixels from output column ow (no bounds checks along W), M constant. */
PPL_INLINE void ppl_dw_tile(const int M, const float *x, ptrdiff_t W, const float *w,
                            const float *bias, float *y, ptrdiff_t ow, int kh_lo, int kh_hi,
                            ptrdiff_t ih0, int KW, int sw, int pl, int dh, int dw, int post_op,
                            float p0, float p1) {
    ppl_vf acc[PPL_DW_M][PPL_CBV];
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
#pragma GCC unroll 4
        for (int v = 0; v < PPL_CBV; v++) acc[r][v] = ppl_splat(0.0f);
    for (int kh = kh_lo; kh < kh_hi; kh++) {
        const float *xr = x + ((ih0 + (ptrdiff_t)kh * dh) * W + ow * sw - pl) * PPL_CB;
        for (int kw = 0; kw < KW; kw++) {
            const float *xp = xr + (ptrdiff_t)kw * dw * PPL_CB;
            const float *wp = w + (kh * KW + kw) * PPL_CB;
            ppl_vf wv[PPL_CBV];
#pragma GCC unroll 4
            for (int v = 0; v < PPL_CBV; v++) wv[v] = ppl_load(wp + v * PPL_VLEN);
#pragma GCC unroll 16
            for (int r = 0; r < M; r++)
#pragma GCC unroll 4
                for (int v = 0; v < PPL_CBV; v++)
                    acc[r][v] += ppl_load(xp + (ptrdiff_t)r * sw * PPL_CB + v * PPL_VLEN) * wv[v];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < M; r++)
        ppl_dw_finish(acc[r], bias, y + (ow + r) * PPL_CB, post_op, p0, p1);
}

/* y[ow, :] = post_op(bias + sum_{kh,kw} x[ih, iw, :] * w[kh, kw, :]) for one output row of one
 * channel block: x is that block's (H, W, 16) plane, w its (KH, KW, 16) taps, y its (OW, 16)
 * row, bias 16 floats.  Interior pixels go PPL_DW_M at a time (the remainder as one shorter
 * tile); border pixels one at a time with bounds checks. */
static __attribute__((unused)) void ppl_dw_row(const float *x, ptrdiff_t H, ptrdiff_t W,
                                               const float *w, const float *bias, float *y,
                                               ptrdiff_t OW, ptrdiff_t oh, int KH, int KW,
                                               int sh, int sw, int pt, int pl, int dh, int dw,
                                               int post_op, float p0, float p1) {
    const ptrdiff_t ih0 = oh * sh - pt;
    int kh_lo = 0, kh_hi = KH;
    while (kh_lo < KH && ih0 + (ptrdiff_t)kh_lo * dh < 0) kh_lo++;
    while (kh_hi > kh_lo && ih0 + (ptrdiff_t)(kh_hi - 1) * dh >= H) kh_hi--;
    /* Interior columns: every kw lands inside [0, W). */
    const ptrdiff_t last = W - 1 + pl - (ptrdiff_t)(KW - 1) * dw;
    ptrdiff_t ow_lo = (pl + sw - 1) / sw;
    ptrdiff_t ow_hi = last >= 0 ? last / sw + 1 : 0;
    if (ow_hi > OW) ow_hi = OW;
    if (ow_lo > ow_hi) ow_lo = ow_hi = 0;
    for (ptrdiff_t ow = 0; ow < OW; ow++) {
        if (ow == ow_lo) {  /* the interior, then carry on after it */
            for (; ow + PPL_DW_M <= ow_hi; ow += PPL_DW_M)
                ppl_dw_tile(PPL_DW_M, x, W, w, bias, y, ow, kh_lo, kh_hi, ih0, KW, sw, pl, dh,
                            dw, post_op, p0, p1);
#define PPL_DW_CASE(M) \
    case M: ppl_dw_tile(M, x, W, w, bias, y, ow, kh_lo, kh_hi, ih0, KW, sw, pl, dh, dw, \
                        post_op, p0, p1); break;
            switch (ow_hi - ow) {
            PPL_DW_CASE(1)
#if PPL_DW_M > 2
            PPL_DW_CASE(2)
            PPL_DW_CASE(3)
#endif
#if PPL_DW_M > 4
            PPL_DW_CASE(4)
            PPL_DW_CASE(5)
            PPL_DW_CASE(6)
            PPL_DW_CASE(7)
#endif
            default: break;
            }
#undef PPL_DW_CASE
            ow = ow_hi;
            if (ow >= OW) break;
        }
        ppl_vf acc[PPL_CBV] = {0};
        ppl_dw_pixel(x, W, w, kh_lo, kh_hi, ih0, ow * sw - pl, KW, dh, dw, acc);
        ppl_dw_finish(acc, bias, y + ow * PPL_CB, post_op, p0, p1);
    }
}

#endif /* PPL_BRGEMM_FP32_H */
