# GEMM on the brgemm microkernel: out = post_op(alpha * (A @ B) + beta * addend + bias).
#
# Written once, included by _gemm_fp32_{avx512,fma,sse}.pyx after each defines PPL_VLEN, so
# every tier gets its own vectorised copy (numpy-style dispatch, STYLE.md).
#
# B is packed once (weights are constant) into panels of PPL_NB columns: packed[p, k, j] =
# B[k, p * PPL_NB + j], zero past N, so the microkernel streams one panel row per k with
# unit-stride vector loads.  The multiply is blocked Goto-style: a work item is a block of
# rows times a group of panels; inside it K is cut into chunks of at most _KC so that one
# panel chunk stays in L1 while the tiles of the row block (kept in L2) stream past it.
# Work items are independent output blocks, spread over threads with prange.

from cython.parallel cimport prange

import numpy

include "_brgemm_fp32.pxi"

cdef enum:
    _KC = 256           # K chunk: a panel chunk of _KC x PPL_NB floats fits in L1 (16 KB fma)
    _MC_TILES = 16      # register tiles per row block (96 rows at fma): A block in L2
    _MAX_GROUP_COLS = 256   # columns per work item at most
    _ITEMS_PER_THREAD = 4   # enough work items to balance threads on small shapes


def gemm_pack_b(b, bint trans_b):
    """packed[p, k, j] = B[k, p * NB + j] (0 past N), with B = b.T if trans_b else b."""
    b = numpy.asarray(b)
    if b.ndim != 2 or b.dtype != numpy.float32:
        raise ValueError(f"gemm_pack_b: expected a 2-D float32 array, got {b.dtype} {b.shape}")
    bmat = b.T if trans_b else b
    k, n = bmat.shape
    npanels = (n + PPL_NB - 1) // PPL_NB
    padded = numpy.zeros((k, npanels * PPL_NB), dtype=numpy.float32)
    padded[:, :n] = bmat
    return numpy.ascontiguousarray(padded.reshape(k, npanels, PPL_NB).transpose(1, 0, 2))


cdef void _gemm_item(const float *a, Py_ssize_t lda, const float *pb, Py_ssize_t m,
                     Py_ssize_t k, Py_ssize_t n, float *out, const ppl_epilogue *ep_final,
                     Py_ssize_t row_lo, Py_ssize_t row_hi, Py_ssize_t panel_lo,
                     Py_ssize_t panel_hi, Py_ssize_t kc) noexcept nogil:
    """out[rows, panels] of the product, K chunk by K chunk (first chunk adds addend and
    bias, last applies the post-op)."""
    cdef ppl_epilogue ep
    cdef Py_ssize_t k0, p, row0, kc_len
    cdef const float *a_ptr
    cdef const float *b_ptr
    cdef int mm, n_valid
    k0 = 0
    while k0 < k:
        kc_len = min(kc, k - k0)
        ep = ep_final[0]
        if k0 > 0:
            ep.accumulate = 1
            ep.bias = NULL
            ep.addend = NULL
        if k0 + kc_len < k:
            ep.post_op = 0
        for p in range(panel_lo, panel_hi):
            n_valid = <int>min(<Py_ssize_t>PPL_NB, n - p * PPL_NB)
            row0 = row_lo
            while row0 < row_hi:
                mm = <int>min(<Py_ssize_t>PPL_MR, row_hi - row0)
                a_ptr = a + row0 * lda + k0
                b_ptr = pb + (p * k + k0) * PPL_NB
                if k0 == 0 and ep_final.addend != NULL:
                    ep.addend = &ep_final.addend[row0 * n + p * PPL_NB]
                if k0 == 0 and ep_final.bias != NULL:
                    ep.bias = &ep_final.bias[p * PPL_NB]
                ppl_brgemm(mm, n_valid, 1, &a_ptr, &b_ptr, kc_len, lda,
                           out + row0 * n + p * PPL_NB, n, PPL_CB, &ep)
                row0 += mm
        k0 += kc_len


cdef void _gemm_core(const float *a, Py_ssize_t lda, const float *pb, Py_ssize_t m,
                     Py_ssize_t k, Py_ssize_t n, float *out, const ppl_epilogue *ep,
                     int num_threads) noexcept nogil:
    """Split out into row blocks x panel groups and run the blocks in parallel."""
    cdef Py_ssize_t npanels = (n + PPL_NB - 1) // PPL_NB
    cdef Py_ssize_t mtiles = (m + PPL_MR - 1) // PPL_MR
    # Even row blocks and K chunks: ceil-divide the count, then the size.
    cdef Py_ssize_t nmblocks = (mtiles + _MC_TILES - 1) // _MC_TILES
    cdef Py_ssize_t tiles_per_block = (mtiles + nmblocks - 1) // nmblocks
    cdef Py_ssize_t nkc = (k + _KC - 1) // _KC
    cdef Py_ssize_t kc = (k + nkc - 1) // nkc
    # Panel groups: at most _MAX_GROUP_COLS wide, and enough of them that a matrix-vector
    # shape (one row block) still gives every thread several items.
    cdef Py_ssize_t want = max(1, num_threads) * _ITEMS_PER_THREAD
    cdef Py_ssize_t ngroups = max((npanels * PPL_NB + _MAX_GROUP_COLS - 1) // _MAX_GROUP_COLS,
                                  (want + nmblocks - 1) // nmblocks)
    ngroups = min(ngroups, npanels)
    cdef Py_ssize_t panels_per_group = (npanels + ngroups - 1) // ngroups
    ngroups = (npanels + panels_per_group - 1) // panels_per_group
    cdef Py_ssize_t item, mb, g, row_lo, row_hi
    for item in prange(nmblocks * ngroups, num_threads=max(1, num_threads),
                       schedule="dynamic"):
        mb = item // ngroups
        g = item % ngroups
        row_lo = mb * tiles_per_block * PPL_MR
        row_hi = min(m, row_lo + tiles_per_block * PPL_MR)
        _gemm_item(a, lda, pb, m, k, n, out, ep, row_lo, row_hi, g * panels_per_group,
                   min(npanels, (g + 1) * panels_per_group), kc)


cdef object _padded_bias(bias, Py_ssize_t size, Py_ssize_t n):
    """A float32 copy of bias (length n) padded with zeros to size."""
    bias = numpy.asarray(bias, dtype=numpy.float32).reshape(-1)
    if bias.shape[0] != n:
        raise ValueError(f"bias: expected {n} values, got {bias.shape[0]}")
    padded = numpy.zeros(size, dtype=numpy.float32)
    padded[:n] = bias
    return padded


def gemm_fp32(const float[:, :] a, const float[:, :, ::1] packed_b, int k, int n,
              float[:, ::1] out, float alpha, bias, addend, float beta, int post_op,
              float p0, float p1, int num_threads):
    """out = post_op(alpha * (a @ B) + beta * addend + bias), B given by gemm_pack_b."""
    cdef Py_ssize_t m = a.shape[0]
    cdef Py_ssize_t npanels = (n + PPL_NB - 1) // PPL_NB
    if k < 1 or n < 1:
        raise ValueError(f"gemm_fp32: expected k >= 1 and n >= 1, got k={k} n={n}")
    if a.shape[1] != k or (m > 0 and a.shape[1] > 1 and a.strides[1] != sizeof(float)):
        raise ValueError(f"gemm_fp32: a must be M x {k} with unit column stride, got shape "
                         f"{(a.shape[0], a.shape[1])} strides {(a.strides[0], a.strides[1])}")
    if (packed_b.shape[0] != npanels or packed_b.shape[1] != k
            or packed_b.shape[2] != PPL_NB):
        raise ValueError(f"gemm_fp32: packed_b must be ({npanels}, {k}, {PPL_NB}) from this "
                         f"module's gemm_pack_b, got {(packed_b.shape[0], packed_b.shape[1], packed_b.shape[2])}")
    if out.shape[0] != m or out.shape[1] != n:
        raise ValueError(f"gemm_fp32: out must be {m} x {n}, got {(out.shape[0], out.shape[1])}")
    if post_op < 0 or post_op > 4:
        raise ValueError(f"gemm_fp32: unknown post_op {post_op}")
    if m == 0:
        return

    cdef const float[::1] bias_v
    cdef const float[:, ::1] addend_v
    cdef ppl_epilogue ep
    ep.alpha = alpha
    ep.beta = beta
    ep.bias = NULL
    ep.addend = NULL
    ep.accumulate = 0
    ep.post_op = post_op
    ep.p0 = p0
    ep.p1 = p1
    if bias is not None:
        # The last panel's vector epilogue reads PPL_NB columns: give it zeros past n.
        bias_v = _padded_bias(bias, npanels * PPL_NB, n)
        ep.bias = &bias_v[0]
    if addend is not None:
        addend_v = addend
        if addend_v.shape[0] != m or addend_v.shape[1] != n:
            raise ValueError(f"gemm_fp32: addend must be {m} x {n}, got "
                             f"{(addend_v.shape[0], addend_v.shape[1])}")
        ep.addend = &addend_v[0, 0]
    # A row stride in floats; a single-column or single-row a may report any stride.
    cdef Py_ssize_t lda = a.strides[0] // sizeof(float) if m > 1 else k
    with nogil:
        _gemm_core(&a[0, 0], lda, &packed_b[0, 0, 0], m, k, n, &out[0, 0], &ep, num_threads)
