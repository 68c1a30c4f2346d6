/* The AVX-512 brgemm microkernel (_brgemm_fp32.h) alone, outside pplpy: its conv batch-reduce
 * (ppl_brgemm_run) and GEMM (ppl_brgemm_gemm) loops on 64-byte-aligned buffers, in GFLOP/s
 * and percent of a register-resident FMA loop on the same core.  brgemm_harness.sh builds it
 * once per register blocking / K unroll (-DPPL_MR, -DPPL_NV, -DPPL_KUNROLL) with the avx512
 * tier's flags; comparing it with benchmarks/brgemm.py separates the microkernel from what
 * pplpy wraps around it (session 9: 94-96% here against 67-72% in pplpy on a Sapphire Rapids
 * Xeon; session 11 found the difference in the module's register allocation, which the
 * harness's smaller functions did not share: _brgemm_fp32.h, PPL_A_BCAST).
 * N is a multiple of 32, 48 and 64, so that every blocking computes the whole product. */
#ifndef PPL_VLEN
#define PPL_VLEN 16
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "_brgemm_fp32.h"

#define REPEATS 7

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* 24 independent multiply-add chains: the core's FMA throughput, in GFLOP/s. */
__attribute__((noinline)) static double fma_peak(void) {
    double best = 0;
    for (int rep = 0; rep < 10; rep++) {
        ppl_vf acc[24], b = ppl_splat(1.0000001f), c = ppl_splat(0.999999f);
        for (int i = 0; i < 24; i++) acc[i] = ppl_splat((float)i);
        const long n = 2000000;
        double t = now();
        for (long it = 0; it < n; it++) {
#pragma GCC unroll 24
            for (int i = 0; i < 24; i++) acc[i] = acc[i] * b + c;
        }
        t = now() - t;
        volatile float sink = 0;
        for (int i = 0; i < 24; i++) sink += acc[i][0];
        const double gflops = n * 24.0 * 2 * PPL_VLEN / t / 1e9;
        if (gflops > best) best = gflops;
    }
    return best;
}

/* n floats on a cache line, filled with small values. */
static float *buffer(size_t n) {
    float *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7919) % 97) / 97.0f - 0.5f;
    return p;
}

static void report(const char *what, double seconds, double flops, double peak) {
    const double gflops = flops / seconds / 1e9;
    printf("%-40s %7.3f ms %7.1f GF/s %5.1f%%\n", what, seconds * 1e3, gflops,
           100 * gflops / peak);
}

/* 3x3 conv, 64 -> 192 channels on a 56x56 output, N16CX, input padded to 58x58: per output
 * row and panel one ppl_brgemm_run over a batch of 9 taps x 4 channel blocks of K = 16. */
static void conv(double peak, ppl_epilogue *ep) {
    enum { H = 58, W = 58, OH = 56, OW = 56, ICB = 4, OC = 192, NP = OC / PPL_NB };
    float *x = buffer((size_t)ICB * H * W * 16), *y = buffer((size_t)(OC / 16) * OH * OW * 16);
    float *w = buffer((size_t)9 * ICB * 16 * OC);
    const float *a[36], *b[36];
    double best = 1e9;
    for (int rep = 0; rep < REPEATS; rep++) {
        double t = now();
        for (int p = 0; p < NP; p++)
            for (int oh = 0; oh < OH; oh++) {
                int i = 0;
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++)
                        for (int cb = 0; cb < ICB; cb++, i++) {
                            a[i] = x + ((size_t)cb * H * W + (oh + kh) * W + kw) * 16;
                            b[i] = w + ((size_t)((kh * 3 + kw) * ICB + cb) * NP + p) * 16 * PPL_NB;
                        }
                float *c = y + (size_t)(p * PPL_NB / 16) * OH * OW * 16 + (size_t)oh * OW * 16;
                ppl_brgemm_run(OW, 36, a, b, 16, 16, c, 16, (ptrdiff_t)OH * OW * 16, PPL_NB, ep);
            }
        t = now() - t;
        if (t < best) best = t;
    }
    report("conv 9x(3136x192x64)", best, 2.0 * OH * OW * 64 * OC * 9, peak);
    free(x), free(y), free(w);
}

/* C[M x N] = A[M x K] (rows lda apart) . B (packed K x PPL_NB panels), K in chunks of kc
 * (later chunks accumulate) as _gemm_fp32.pxi does it: the rows in near-equal tiles of at
 * most PPL_MR, each chunk of A copied once per tile in the tier's layout (blocked, or
 * broadcast on SSE; outside the timing, as the module reuses it over every panel), then one
 * ppl_brgemm_gemm per tile and panel. */
static void gemm(int M, int N, int K, int lda, int kc, double peak, ppl_epilogue *ep) {
    float *A = buffer((size_t)M * lda), *B = buffer((size_t)K * N), *C = buffer((size_t)M * N);
    const int ntiles = (M + PPL_MR - 1) / PPL_MR, rows = M / ntiles, taller = M - rows * ntiles;
    const int nkc = (K + kc - 1) / kc, kcp = (kc + 15) / 16 * 16;
    float *P = buffer((size_t)nkc * M * kcp * (PPL_A_BCAST ? PPL_VLEN : 1));
    for (int c = 0; c < nkc; c++) {  /* chunk c of tile t (mm rows from row0) */
        float *chunk = P + (size_t)c * M * kcp * (PPL_A_BCAST ? PPL_VLEN : 1);
        for (int t = 0, row0 = 0; t < ntiles; row0 += rows + (t < taller), t++)
            for (int r = 0; r < rows + (t < taller); r++)
                for (int kk = 0; kk < kc; kk++) {
                    const float x = A[(size_t)(row0 + r) * lda + c * kc + kk];
#if PPL_A_BCAST
                    for (int l = 0; l < PPL_VLEN; l++)
                        chunk[((size_t)(row0 + r) * kcp + kk) * PPL_VLEN + l] = x;
#else
                    chunk[(size_t)row0 * kcp + (kk - kk % 16) * (rows + (t < taller)) +
                          r * 16 + kk % 16] = x;
#endif
                }
    }
    double best = 1e9;
    for (int rep = 0; rep < REPEATS; rep++) {
        double t0 = now();
        for (int c = 0; c < nkc; c++) {
            const float *chunk = P + (size_t)c * M * kcp * (PPL_A_BCAST ? PPL_VLEN : 1);
            ep->accumulate = c > 0;
            for (int p = 0; p < N / PPL_NB; p++)
                for (int t = 0, row0 = 0; t < ntiles; row0 += rows + (t < taller), t++)
                    ppl_brgemm_gemm(rows + (t < taller), PPL_NB,
                                    chunk + (size_t)row0 * kcp * (PPL_A_BCAST ? PPL_VLEN : 1),
                                    B + ((size_t)p * K + (size_t)c * kc) * PPL_NB, kc, kcp,
                                    C + (size_t)row0 * N + p * PPL_NB, N, ep, NULL, 0, 0);
        }
        t0 = now() - t0;
        if (t0 < best) best = t0;
    }
    ep->accumulate = 0;
    char what[64];
    snprintf(what, sizeof what, "gemm %dx%dx%d lda %d kc %d", M, N, K, lda, kc);
    report(what, best, 2.0 * M * N * K, peak);
    free(A), free(B), free(C), free(P);
}

int main(void) {
    const double peak = fma_peak();
    printf("MR %d x NV %d, K unroll %d: FMA peak %.1f GFLOP/s\n", PPL_MR, PPL_NV, PPL_KUNROLL,
           peak);
    ppl_epilogue ep;
    ppl_epilogue_reset(&ep);
    conv(peak, &ep);
    gemm(512, 768, 512, 512, 512, peak, &ep);
    gemm(512, 768, 512, 528, 512, peak, &ep);   /* rows not 2 KB apart */
    gemm(512, 768, 512, 512, 128, peak, &ep);   /* short K chunks */
    gemm(196, 768, 2304, 2304, 256, peak, &ep);
    gemm(128, 768, 768, 768, 768, peak, &ep);
    return 0;
}
