# Cython declarations of the brgemm microkernel in _brgemm_fp32.h.  Included by the family
# bodies (_gemm_fp32.pxi, _conv_fp32.pxi); the including .pyx must define PPL_VLEN first.

include "_post_chain_fp32.pxi"

cdef extern from "_brgemm_fp32.h" nogil:
    enum:
        PPL_VLEN     # floats per vector register of this tier
        PPL_MR       # rows per register tile
        PPL_NB       # columns per packed B panel
        PPL_CB       # channels per N16CX block (16)
        PPL_A_BCAST  # 1: a GEMM's copied A holds each element broadcast to a vector

    ctypedef struct ppl_epilogue:
        float alpha
        float beta
        const float *bias
        const float *addend
        int accumulate
        const float *sum
        float sum_scale
        const float *dst
        int post_op
        float p0
        float p1
        const ppl_post_chain *chain
        int chain_first
        Py_ssize_t col0
        Py_ssize_t b_prefetch   # floats ahead of its B loads that a tile prefetches

    void ppl_epilogue_reset(ppl_epilogue *ep)

    float ppl_post_scalar(float x, int post_op, float p0, float p1)

    void ppl_brgemm(int m, int n_valid, Py_ssize_t nbatch, const float **a, const float **b,
                    Py_ssize_t k, Py_ssize_t lda, float *c, Py_ssize_t ldc, Py_ssize_t cbs,
                    const ppl_epilogue *ep)
    void ppl_brgemm_run(Py_ssize_t count, Py_ssize_t nbatch, const float **a,
                        const float **b, Py_ssize_t k, Py_ssize_t lda, float *c,
                        Py_ssize_t ldc, Py_ssize_t cbs, int n_valid, const ppl_epilogue *ep)
    void ppl_brgemm_run_bcast(Py_ssize_t count, Py_ssize_t nbatch, const float **a,
                              const float **b, Py_ssize_t k, Py_ssize_t lda, float *c,
                              Py_ssize_t ldc, Py_ssize_t cbs, int n_valid,
                              const ppl_epilogue *ep)
    void ppl_brgemm_row1_tiled(Py_ssize_t nbatch, const float **a, const float **b,
                               Py_ssize_t k, float *c, Py_ssize_t cbs, int n_valid,
                               const ppl_epilogue *ep)
    void ppl_brgemm_gemm(int m, int n_valid, const float *a, const float *b, Py_ssize_t k,
                         Py_ssize_t lda, float *c, Py_ssize_t ldc, const ppl_epilogue *ep,
                         const float *pf, Py_ssize_t pf_lda, int pf_rows)

    void ppl_dw_row(const float *x, Py_ssize_t H, Py_ssize_t W, const float *w,
                    const float *bias, float *y, Py_ssize_t OW, Py_ssize_t oh, int KH, int KW,
                    int sh, int sw, int pt, int pl, int dh, int dw, int post_op, float p0,
                    float p1)


cdef Py_ssize_t _b_prefetch_floats(Py_ssize_t weight_bytes) except -1:
    """ppl_epilogue.b_prefetch for an op whose B (packed when the kernel is made) takes
    weight_bytes: b_prefetch.py's distance in blocks of 16 k rows of a panel, as floats.
    (Imported here, not at module level: the modules that include this file only for its
    declarations would otherwise export the name.)"""
    from pplpy.engines.x86.impls.b_prefetch import b_prefetch_blocks
    return b_prefetch_blocks(weight_bytes) * PPL_CB * PPL_NB


cdef Py_ssize_t _claim_chunk(Py_ssize_t chunk) except -1:
    """The items a share of a step claims at a time (ppl_next_items, pplpy_step.h): chunk,
    or 0 (a fixed share per thread) where PPLPY_STATIC_SHARES=1 asks for it (item_claims.py;
    imported here for the reason _b_prefetch_floats gives)."""
    from pplpy.engines.x86.impls.item_claims import items_claimed
    return chunk if items_claimed() else 0
