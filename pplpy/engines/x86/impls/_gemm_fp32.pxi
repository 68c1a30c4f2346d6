# GEMM on the brgemm microkernel, as a compiled step of the run plan:
#
#     out[i] = post_ops(alpha * (A[i] @ B[i]) + beta * C + bias)    for each batch entry i
#
# post_ops: a chain of post-ops (_post_chain_fp32.h); per-channel operands are per column.
#
# Written once, included by _gemm_fp32_{avx512,fma,sse}.pyx after each defines PPL_VLEN, so
# every tier gets its own vectorised copy (numpy-style dispatch, STYLE.md).
#
# B is packed into panels of PPL_NB columns: packed[p, k, j] = B[k, p * PPL_NB + j], zero
# past N, so the microkernel streams one panel row per k with unit-stride vector loads.  A
# constant B is packed once (gemm_pack_b, when the kernel is made).  The multiply is blocked
# Goto-style: a work item is one batch entry x a block of rows x a group of panels; inside
# it K is cut into chunks whose copy of A (below) takes at most _A_CHUNK_FLOATS (three
# quarters of a 1 MB L2, with room for the panel the tiles stream) and at most _KC_MAX long.
# (Half of L2 cut ViT's 197-row blocks at K = 768 into two chunks of 384, and A was then
# copied again for every panel group: 3-4% of the GEMM, measured in a C replica of this loop
# and on the step.)  Chunks as short as an L1-sized panel chunk (128 at
# AVX-512) measured 10% slower on 128x768x3072 than 1024: every chunk costs each tile an
# epilogue pass over C, and Zen 4's L2 feeds a tile's panel fast enough.  (Prefetching the
# next panel into L2 while the tiles go through one measured no faster on BERT-base: the
# hardware prefetchers already follow the panel stream.)  Each K chunk of the row block's
# A is copied into the thread's scratch, tile by tile as the block's first panel reaches
# the tile, in blocks of 16 columns (a tile's rows side by side in each block;
# _brgemm_fp32.h says why): read in place, A's row
# stride is often a multiple of 4 KB (K = 3072 x 4 B; K = 768 puts every fourth row
# together), which puts the 14 rows a tile broadcasts from in one L1 set, and the tile then
# reads A from L2 (K = 3072 ran at about half of peak).  A thread takes the items of one
# row block (its other panel groups) K chunk by K chunk together, so that each chunk's copy
# serves them all: copied per item, BERT's N = 3072 GEMM copied A 12 times at one thread,
# and its K = 3072 GEMM each of its three chunks once per item on every thread.
# A is read only N / PPL_NB times, so a tall, narrow GEMM waits on memory in the copy (3136
# x 64 x 576, A 7 MB: 13% of its time in the copy, `perf`): while a tile of the first panel
# computes, the next tile's source rows are prefetched into L2 (ppl_prefetch_rows): the
# copy then took 7% of that GEMM, which went from 81 / 73 / 83% of peak to 88 / 84-87 /
# 83-88% (avx512 / fma / sse, benchmarks/brgemm.py on the 2-core Zen 4 EPYC, four runs).
# On SSE (PPL_A_BCAST) the copy also broadcasts every element to a whole vector, which saves
# the tile a shuffle per row and k (_brgemm_fp32.h says what it measured).
# The rows of a block are cut into tiles of near-equal height (128 rows = 8 x 13 +
# 2 x 12 rather than 9 x 14 + 2: a 2-row tile loads as much B per FMA as it computes).
# Work items are independent output blocks, no barrier needed; panel groups are near-equal
# and their count is chosen so that every thread gets the same number of items where the
# panels allow it.  The team's shares claim them as the step runs (ppl_next_items), so a
# thread slowed by a sibling hyper-thread or a busy host takes fewer: one item at a time
# where the share's copy of A serves its next item too (one K chunk), else about half an
# even share at a time (every claim copies A again).
#
# Inputs that are not ready for the microkernel are prepared inside the item that uses them,
# so that one step (no barrier) does the whole op:
#   raw B (computed at run time)   an item spans every row block of its entry and packs its
#                                  own panel group first, into its thread's scratch: each
#                                  panel is packed once per entry
#   A stored transposed (transA)   the K-chunk copy of A above reads it transposed
#   C broadcast at run time        added by the item after its tiles, with the post-op
# Every output element is one tile's sum over the same K chunks whatever the split into
# items, so every thread count gives the same bits.

from libc.string cimport memcpy

from pplpy.runtime.step cimport (PPL_MIN_ITEMS_PER_THREAD, Step, new_step, ppl_item_queue,
                                  ppl_next_items)

import numpy

from pplpy.engines.x86.impls.aligned import aligned_zeros
from pplpy.engines.x86.impls.per_thread import per_thread_buffer
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.runtime.step import run_steps

# Every activation code the epilogue applies (the vector functions of _activation_fp32.h).
_POST_OPS = frozenset(int(code) for code in PostOp)

include "_brgemm_fp32.pxi"

cdef enum:
    _KC_MAX = 1024              # K chunk at most this long
    _KC_MIN = 256               # and at least this (when K is)
    _A_CHUNK_FLOATS = 3 << 16   # copied A chunk at most this many floats (768 KB)
    _A_PAD = 16         # floats past each row of the copied A chunk (one cache line)
    _MC_TILES = 16      # register tiles per row block (96 rows at fma): A block in L2
    _MAX_GROUP_COLS = 256   # columns per work item at most
    # Work items per thread wanted on shapes of one row block (split over N into panel
    # groups): 2, enough for the claims to even out a slowed thread.  4 made groups of one
    # or two panels, and 196 x 1536 x 384 (ConvNeXt-T's stage-3 MLP) ran 1.6x faster on two
    # threads than on one; at 2: 1.9x, no shape of brgemm.py's or BERT's slower (2-core
    # Zen 4 EPYC, benchmarks/gemm_threads.py).
    _ITEMS_PER_THREAD = 2
    _PARALLEL_FLOPS = 1 << 20   # a smaller product runs as a serial step ...
    _PARALLEL_B_BYTES = 1 << 17     # ... unless its B is at least this large


ctypedef struct _GemmArgs:
    const float *a              # entry i at a + a_off[i]; row r at + r * lda
    Py_ssize_t lda
    int trans_a                 # A stored K x M (row stride lda): items transpose their rows
    const float *b              # packed B (entry i at b + b_off[i]), or raw B when pack_b
    int pack_b
    Py_ssize_t b_sk, b_sn       # raw B: element (k, n) at + k * b_sk + n * b_sn
    const Py_ssize_t *a_off
    const Py_ssize_t *b_off
    Py_ssize_t batch
    float *out                  # entry i at out + i * m * n, row-major m x n
    Py_ssize_t m, k, n
    ppl_epilogue ep             # bias padded to whole panels; addend m x n (entry 0 only)
    const float *c              # NULL, or C added after the tiles: (r, j) at r*c_s0 + j*c_s1
    Py_ssize_t c_s0, c_s1
    float c_beta
    ppl_post_chain chain        # the post-ops; when c is set, applied after C (ep has none)
    Py_ssize_t npanels, nmblocks, rows_per_block, ngroups, panels_per_group, kc
    float *scratch              # max_threads slices of scratch_floats
    Py_ssize_t scratch_floats
    int max_threads
    Py_ssize_t claim            # items a share claims at a time (ppl_next_items)
    ppl_item_queue queue


cdef void _pack_panels(const float *b, Py_ssize_t sk, Py_ssize_t sn, Py_ssize_t k,
                       Py_ssize_t n, Py_ssize_t p_lo, Py_ssize_t p_hi,
                       float *dst) noexcept nogil:
    """dst[p - p_lo, kk, j] = B[kk, p * NB + j] (0 past n) for panels [p_lo, p_hi)."""
    cdef Py_ssize_t p, kk, j, col, ncols
    cdef float *panel
    for p in range(p_lo, p_hi):
        panel = dst + (p - p_lo) * k * PPL_NB
        ncols = min(<Py_ssize_t>PPL_NB, n - p * PPL_NB)
        if sn == 1:
            for kk in range(k):
                for j in range(ncols):
                    panel[kk * PPL_NB + j] = b[kk * sk + p * PPL_NB + j]
                for j in range(ncols, PPL_NB):
                    panel[kk * PPL_NB + j] = 0
        else:  # B stored transposed: read along k
            for j in range(PPL_NB):
                col = p * PPL_NB + j
                if j < ncols:
                    for kk in range(k):
                        panel[kk * PPL_NB + j] = b[kk * sk + col * sn]
                else:
                    for kk in range(k):
                        panel[kk * PPL_NB + j] = 0


def gemm_pack_b(b, bint trans_b):
    """packed[p, k, j] = B[k, p * NB + j] (0 past N), with B = b.T if trans_b else b."""
    b = numpy.asarray(b)
    if b.ndim != 2 or b.dtype != numpy.float32:
        raise ValueError(f"gemm_pack_b: expected a 2-D float32 array, got {b.dtype} {b.shape}")
    cdef const float[:, :] bv = b
    cdef Py_ssize_t k = b.shape[1] if trans_b else b.shape[0]
    cdef Py_ssize_t n = b.shape[0] if trans_b else b.shape[1]
    cdef Py_ssize_t npanels = (n + PPL_NB - 1) // PPL_NB
    packed = aligned_zeros((npanels, k, PPL_NB), numpy.float32)
    cdef float[:, :, ::1] pv = packed
    cdef Py_ssize_t s0 = bv.strides[0] // sizeof(float), s1 = bv.strides[1] // sizeof(float)
    if k == 0 or n == 0:
        return packed
    with nogil:
        if trans_b:
            _pack_panels(&bv[0, 0], s1, s0, k, n, 0, npanels, &pv[0, 0, 0])
        else:
            _pack_panels(&bv[0, 0], s0, s1, k, n, 0, npanels, &pv[0, 0, 0])
    return packed


cdef void _copy_a_tile(const float *a, Py_ssize_t lda, int trans_a, Py_ssize_t row0,
                       Py_ssize_t mm, Py_ssize_t k0, Py_ssize_t kc_len,
                       float *dst) noexcept nogil:
    """Copy one tile's rows of A's K chunk, A[row0 + r, k0 + kk] (r < mm, kk < kc_len; A's
    row r at a + r * lda, or with trans_a column r of the stored K x M), to dst in the layout
    of the tier's tiles (_brgemm_fp32.h, PPL_A_BCAST):
      broadcast  element (r, kk) is the PPL_VLEN floats at (r * ldd + kk) * PPL_VLEN, where
                 ldd = kc_len rounded up to 16, plus _A_PAD
      blocked    element (r, kk) is at (kk - kk % 16) * mm + r * 16 + kk % 16."""
    cdef Py_ssize_t r, kk, l, kb, w, ldd
    cdef float *d
    cdef float x
    if PPL_A_BCAST:
        ldd = _a_row_floats(kc_len)
        for r in range(mm):
            d = dst + r * ldd * PPL_VLEN
            for kk in range(kc_len):
                x = (a[(k0 + kk) * lda + row0 + r] if trans_a
                     else a[(row0 + r) * lda + k0 + kk])
                for l in range(PPL_VLEN):
                    d[kk * PPL_VLEN + l] = x
        return
    for kb in range(0, kc_len, 16):
        w = min(<Py_ssize_t>16, kc_len - kb)
        d = dst + kb * mm
        for r in range(mm):
            if trans_a:
                for kk in range(w):
                    d[r * 16 + kk] = a[(k0 + kb + kk) * lda + row0 + r]
            elif w == 16:
                memcpy(d + r * 16, a + (row0 + r) * lda + k0 + kb, 16 * sizeof(float))
            else:
                memcpy(d + r * 16, a + (row0 + r) * lda + k0 + kb, w * sizeof(float))


cdef inline Py_ssize_t _a_row_floats(Py_ssize_t kc_len) noexcept nogil:
    """Elements per row of a tile's copied A: kc_len rounded up to a 16-column block, plus
    _A_PAD in the broadcast layout (rows of a broadcast copy are 16 * kc_len bytes apart and
    would otherwise all fall into one L1 set when that is a multiple of 4 KB)."""
    return (kc_len + 15) // 16 * 16 + (_A_PAD if PPL_A_BCAST else 0)


cdef void _gemm_chunk(const float *a, Py_ssize_t lda, int trans_a, float *a_pack,
                      const float *pb, Py_ssize_t k, Py_ssize_t n,
                      float *out, const ppl_epilogue *ep_final, Py_ssize_t nrows,
                      Py_ssize_t panel_lo, Py_ssize_t panel_hi, Py_ssize_t k0,
                      Py_ssize_t kc_len, bint copy_a) noexcept nogil:
    """K chunk [k0, k0 + kc_len) of out[rows [0, nrows), panels [panel_lo, panel_hi)] (the
    first chunk adds addend and bias, the last applies the post-ops).  a points at row 0 of
    the block (row r at + r * lda, or with trans_a column r of a K x M matrix), pb at panel
    panel_lo.  The tiles read the chunk of A from a_pack (nrows x _a_row_floats(kc_len)
    elements, each PPL_VLEN floats where PPL_A_BCAST); with copy_a, the first panel copies
    it there first, tile by tile as it reaches the tile, and while a tile computes, the source
    rows of the next one are prefetched (ppl_prefetch_rows)."""
    cdef ppl_epilogue ep = ep_final[0]
    cdef Py_ssize_t p, row0, tile, ntiles, tile_rows, taller
    cdef Py_ssize_t a_row = _a_row_floats(kc_len)  # elements per row of the tiles' copy
    cdef const float *a_ptr
    cdef const float *b_ptr
    cdef const float *pf
    cdef int mm, n_valid
    cdef bint copy
    # near-equal tiles: the first `taller` tiles have one row more
    ntiles = (nrows + PPL_MR - 1) // PPL_MR
    tile_rows = nrows // ntiles
    taller = nrows - tile_rows * ntiles
    if k0 > 0:
        ep.accumulate = 1
        ep.bias = NULL
        ep.addend = NULL
    if k0 + kc_len < k:  # post-ops on the last K chunk only
        ep.post_op = 0
        ep.sum = NULL
        ep.chain = NULL
    for p in range(panel_lo, panel_hi):
        n_valid = <int>min(<Py_ssize_t>PPL_NB, n - p * PPL_NB)
        ep.col0 = p * PPL_NB
        copy = p == panel_lo and copy_a
        row0 = 0
        for tile in range(ntiles):
            mm = <int>(tile_rows + (1 if tile < taller else 0))
            a_ptr = a_pack + row0 * a_row * (PPL_VLEN if PPL_A_BCAST else 1)
            if copy:
                _copy_a_tile(a, lda, trans_a, row0, mm, k0, kc_len, <float *>a_ptr)
            pf = NULL
            if copy and not trans_a and tile + 1 < ntiles:
                pf = a + (row0 + mm) * lda + k0
            b_ptr = pb + ((p - panel_lo) * k + k0) * PPL_NB
            if k0 == 0 and ep_final.addend != NULL:
                ep.addend = &ep_final.addend[row0 * n + p * PPL_NB]
            if k0 == 0 and ep_final.bias != NULL:
                ep.bias = &ep_final.bias[p * PPL_NB]
            ppl_brgemm_gemm(mm, n_valid, a_ptr, b_ptr, kc_len, a_row,
                            out + row0 * n + p * PPL_NB, n, &ep, pf, lda,
                            <int>(tile_rows + (1 if tile + 1 < taller else 0)))
            row0 += mm


cdef void _add_c(const _GemmArgs *g, float *out, Py_ssize_t row_lo, Py_ssize_t row_hi,
                 Py_ssize_t col_lo, Py_ssize_t col_hi) noexcept nogil:
    """out[rows, cols] = post_ops(out + c_beta * C) for a C broadcast at run time."""
    cdef Py_ssize_t r, j
    cdef float *o
    cdef const float *c
    for r in range(row_lo, row_hi):
        o = out + r * g.n
        c = g.c + r * g.c_s0
        for j in range(col_lo, col_hi):
            o[j] = o[j] + g.c_beta * c[j * g.c_s1]
    if g.chain.len > 0 and row_lo < row_hi and col_lo < col_hi:
        ppl_post_chain_tile(&g.chain, 0, out + row_lo * g.n + col_lo, g.n, PPL_CB,
                            row_hi - row_lo, col_hi - col_lo, col_lo)


cdef inline void _group_panels(const _GemmArgs *g, Py_ssize_t item, Py_ssize_t *p_lo,
                               Py_ssize_t *p_hi) noexcept nogil:
    """Panels [p_lo, p_hi) of work item item's group: near-equal groups (panels_per_group is
    the largest), possibly empty."""
    cdef Py_ssize_t grp = item % g.ngroups
    p_lo[0] = grp * g.npanels // g.ngroups
    p_hi[0] = (grp + 1) * g.npanels // g.ngroups


cdef void _gemm_rows(const _GemmArgs *g, Py_ssize_t bi, Py_ssize_t mb, Py_ssize_t it_lo,
                     Py_ssize_t it_hi, float *scratch_a, const float *packed,
                     bint a_ready) noexcept nogil:
    """Row block mb of entry bi over the panel groups of items [it_lo, it_hi), K chunk by K
    chunk: each chunk of the block's A is copied once (by the first item; not at all when
    a_ready says scratch_a already holds the block's only chunk) and serves every item.
    packed: the items' panels packed at run time (one item), or NULL for the packed B."""
    cdef Py_ssize_t row_lo = mb * g.rows_per_block
    cdef Py_ssize_t row_hi = min(g.m, row_lo + g.rows_per_block)
    cdef Py_ssize_t it, p_lo, p_hi, k0 = 0, kc_len
    cdef const float *a_blk = g.a + g.a_off[bi] + (row_lo if g.trans_a else row_lo * g.lda)
    cdef float *out_blk = g.out + bi * g.m * g.n + row_lo * g.n
    cdef const float *pb
    cdef bint copy
    # The block's own origin: rows [row_lo, row_hi) become rows [0, row_hi - row_lo).
    cdef ppl_epilogue ep = g.ep
    if ep.addend != NULL:
        ep.addend = ep.addend + (bi * g.m + row_lo) * g.n
    while True:  # at least one chunk: k = 0 still writes the epilogue
        kc_len = min(g.kc, g.k - k0)
        copy = not a_ready
        for it in range(it_lo, it_hi):
            _group_panels(g, it, &p_lo, &p_hi)
            if p_lo >= p_hi:
                continue
            pb = packed if packed != NULL else g.b + g.b_off[bi] + p_lo * g.k * PPL_NB
            _gemm_chunk(a_blk, g.lda, g.trans_a, scratch_a, pb, g.k, g.n, out_blk, &ep,
                        row_hi - row_lo, p_lo, p_hi, k0, kc_len, copy)
            copy = False
        k0 += kc_len
        if k0 >= g.k:
            break
    if g.c != NULL:
        for it in range(it_lo, it_hi):
            _group_panels(g, it, &p_lo, &p_hi)
            if p_lo < p_hi:
                _add_c(g, g.out + bi * g.m * g.n, row_lo, row_hi, p_lo * PPL_NB,
                       min(g.n, p_hi * PPL_NB))


cdef void _gemm_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Work items (entry, row-block range, panel group) as this share claims them.  With
    B packed at build time, the share's consecutive items of one row block (the block's
    other panel groups) go through it together, K chunk by K chunk, so that each chunk of
    their A is copied once: item by item, GPT-2's 128 x 3072 x 768 GEMM copied its A (three
    chunks) once per item, four times over at one thread and again on every thread of a
    team; with one K chunk the copy also serves the share's next claim of the same rows.
    With B raw, each item packs its panel group and goes over every row block."""
    cdef const _GemmArgs *g = <const _GemmArgs *>args
    cdef Py_ssize_t nmitems = 1 if g.pack_b else g.nmblocks
    cdef Py_ssize_t begin, end, item, last, rest, bi, mb, p_lo, p_hi
    cdef Py_ssize_t a_held = -1     # (entry, row block) whose only K chunk is in scratch_a
    cdef float *scratch_a = NULL
    cdef float *scratch_b = NULL
    cdef int calls = 0
    if nthreads > g.max_threads:  # a larger team than the scratch was made for
        if tid >= g.max_threads:
            return
        nthreads = g.max_threads
    scratch_b = g.scratch + tid * g.scratch_floats
    scratch_a = scratch_b + (g.panels_per_group * g.k * PPL_NB if g.pack_b else 0)
    while ppl_next_items(<ppl_item_queue *>&g.queue, g.batch * nmitems * g.ngroups, g.claim,
                         tid, nthreads, &calls, &begin, &end):
        item = begin
        while item < end:
            rest = item // g.ngroups
            bi = rest // nmitems
            if not g.pack_b:
                last = min(end, (rest + 1) * g.ngroups)
                mb = rest % nmitems
                _gemm_rows(g, bi, mb, item, last, scratch_a, NULL,
                           a_held == bi * g.nmblocks + mb)
                a_held = bi * g.nmblocks + mb if g.kc >= g.k else -1
                item = last
                continue
            _group_panels(g, item, &p_lo, &p_hi)
            if p_lo < p_hi:
                _pack_panels(g.b + g.b_off[bi], g.b_sk, g.b_sn, g.k, g.n, p_lo, p_hi,
                             scratch_b)
                for mb in range(g.nmblocks):
                    _gemm_rows(g, bi, mb, item, item + 1, scratch_a, scratch_b,
                               a_held == bi * g.nmblocks + mb)
                    # With one K chunk the copy stays valid for this thread's next item of
                    # the same rows (another panel group of the entry, with one row block).
                    a_held = bi * g.nmblocks + mb if g.kc >= g.k else -1
            item += 1


cdef object _padded_bias(bias, Py_ssize_t size, Py_ssize_t n):
    """A float32 copy of bias (length n) padded with zeros to size."""
    bias = numpy.asarray(bias, dtype=numpy.float32).reshape(-1)
    if bias.shape[0] != n:
        raise ValueError(f"bias: expected {n} values, got {bias.shape[0]}")
    padded = numpy.zeros(size, dtype=numpy.float32)
    padded[:n] = bias
    return padded


cdef object _offsets(offsets, Py_ssize_t batch, str name):
    if offsets is None:
        return numpy.zeros(batch, dtype=numpy.intp)
    offsets = numpy.ascontiguousarray(offsets, dtype=numpy.intp).reshape(-1)
    if offsets.shape[0] != batch:
        raise ValueError(f"make_gemm_step: {name} must have {batch} entries (one per batch "
                         f"entry), got {offsets.shape[0]}")
    return offsets


def make_gemm_step(size_t a, size_t b, size_t out, Py_ssize_t m, Py_ssize_t k, Py_ssize_t n,
                   int num_threads, *, Py_ssize_t batch=1, a_offsets=None, b_offsets=None,
                   Py_ssize_t lda=-1, bint trans_a=False, bint b_packed=True,
                   bint trans_b=False, Py_ssize_t ldb=-1, float alpha=1.0, bias=None,
                   size_t addend=0, size_t c=0, Py_ssize_t c_s0=0, Py_ssize_t c_s1=0,
                   float beta=0.0, int post_op=0, float p0=0.0, float p1=0.0, post_chain=(),
                   keep=()):
    """The step computing out[i] = post_ops(alpha * A[i] @ B[i] + beta * C + bias), i < batch.

    Addresses are of float32 memory that outlives the step (``keep`` holds its owners).
    A[i] at a + a_offsets[i] floats: M x K with row stride lda (default K), or with trans_a
    stored K x M (row stride lda, default M).  B[i] at b + b_offsets[i] floats: packed by
    gemm_pack_b when b_packed, else raw K x N (row stride ldb, default N) or with trans_b
    N x K (default K).  out[i] at out + i * M * N, row-major.  bias: N values (or None);
    addend: an M x N array scaled by beta (batch 1); c: a C broadcast at run time, (r, j) at
    c + r * c_s0 + j * c_s1 floats, scaled by beta and added before the post-op (batch 1).
    Post-ops: the activation post_op (p0, p1), then the chain post_chain of
    (kind, alg, p0, p1, address, broadcast) entries (_post_chain_fp32.pxi) on the output at
    out (all batch entries); per-channel operands have n values."""
    if m < 1 or n < 1 or k < 0 or batch < 1:
        raise ValueError(f"make_gemm_step: expected m, n, batch >= 1 and k >= 0, got m={m} "
                         f"n={n} k={k} batch={batch}")
    if post_op not in _POST_OPS:
        raise ValueError(f"make_gemm_step: unknown post_op {post_op}; expected one of "
                         f"{sorted(_POST_OPS)} (post_ops.PostOp)")
    if (addend or c) and batch != 1:
        raise ValueError("make_gemm_step: addend and c need batch 1")
    if addend and c:
        raise ValueError("make_gemm_step: give addend or c, not both")
    chain = _full_chain(post_op, p0, p1, post_chain)
    num_threads = max(1, num_threads)
    a_off = _offsets(a_offsets, batch, "a_offsets")
    b_off = _offsets(b_offsets, batch, "b_offsets")
    cdef Py_ssize_t npanels = (n + PPL_NB - 1) // PPL_NB
    cdef Py_ssize_t mtiles = (m + PPL_MR - 1) // PPL_MR
    # Even row blocks and K chunks: ceil-divide the count, then the size.
    cdef Py_ssize_t nmblocks = (mtiles + _MC_TILES - 1) // _MC_TILES
    cdef Py_ssize_t tiles_per_block = (mtiles + nmblocks - 1) // nmblocks
    # Panel groups: at most _MAX_GROUP_COLS wide, and enough of them that a matrix-vector
    # shape (one row block) still gives every thread several items: M = 1 splits over N.
    cdef Py_ssize_t row_items = batch * (1 if not b_packed else nmblocks)
    cdef Py_ssize_t want = num_threads * _ITEMS_PER_THREAD
    cdef Py_ssize_t ngroups = max((npanels * PPL_NB + _MAX_GROUP_COLS - 1) // _MAX_GROUP_COLS,
                                  (want + row_items - 1) // row_items)
    # a count of items every thread shares equally, where there are panels enough
    while (row_items * ngroups) % num_threads and ngroups < npanels:
        ngroups += 1
    ngroups = min(ngroups, npanels)
    cdef Py_ssize_t panels_per_group = (npanels + ngroups - 1) // ngroups
    cdef Py_ssize_t rows_per_block = tiles_per_block * PPL_MR
    cdef Py_ssize_t a_vec = PPL_VLEN if PPL_A_BCAST else 1   # floats per copied A element
    cdef Py_ssize_t kc_max = min(<Py_ssize_t>_KC_MAX,
                                 max(<Py_ssize_t>_KC_MIN,
                                     _A_CHUNK_FLOATS // (rows_per_block * a_vec)))
    cdef Py_ssize_t nkc = max(1, (k + kc_max - 1) // kc_max)
    cdef Py_ssize_t kc = (k + nkc - 1) // nkc if k > 0 else 1
    # Too few items for the team even with a panel per group (BERT's 128 x 768 x 768: 24
    # panels for 16 threads): cut the row blocks into shorter ones of whole tiles.  K keeps
    # the chunks above, and no block is left a single row (a one-row tile sums in another
    # order), so every output keeps its bits.
    cdef Py_ssize_t sub
    if b_packed and row_items * ngroups < PPL_MIN_ITEMS_PER_THREAD * num_threads:
        sub = (PPL_MIN_ITEMS_PER_THREAD * num_threads + row_items * ngroups - 1) // (
            row_items * ngroups)
        rows_per_block = max(<Py_ssize_t>2, (tiles_per_block + sub - 1) // sub * PPL_MR)
        while rows_per_block < m and m % rows_per_block == 1:
            rows_per_block += 1
        nmblocks = (m + rows_per_block - 1) // rows_per_block
    cdef Py_ssize_t lda_pack = _a_row_floats(kc)

    # per thread: the panel group packed at run time (raw B), then the copied A chunk
    cdef Py_ssize_t scratch_floats = rows_per_block * lda_pack * a_vec
    if not b_packed:
        scratch_floats += panels_per_group * k * PPL_NB
    scratch_floats = (scratch_floats + 15) // 16 * 16
    scratch, _ = per_thread_buffer(num_threads, scratch_floats, numpy.float32)
    bias_pad = None
    if bias is not None:
        # The last panel's vector epilogue reads PPL_NB columns: give it zeros past n.
        bias_pad = _padded_bias(bias, npanels * PPL_NB, n)

    # A matrix-vector product streams B: parallel from a smaller size (ResNet-18's 512 x
    # 1000 classifier, 1 MFLOP and 2 MB of weight, ran on one thread).
    cdef Step step = new_step(_gemm_step, sizeof(_GemmArgs),
                              2.0 * m * n * k * batch >= _PARALLEL_FLOPS
                              or 4.0 * k * n * batch >= _PARALLEL_B_BYTES,
                              (keep, a_off, b_off, scratch, bias_pad))
    cdef _GemmArgs *g = <_GemmArgs *>step.args
    cdef const Py_ssize_t[::1] a_off_v = a_off
    cdef const Py_ssize_t[::1] b_off_v = b_off
    cdef float[::1] scratch_v
    cdef const float[::1] bias_v
    g.a = <const float *>a
    g.trans_a = trans_a
    g.lda = lda if lda >= 0 else (m if trans_a else k)
    g.b = <const float *>b
    g.pack_b = not b_packed
    if trans_b:
        g.b_sk, g.b_sn = 1, (ldb if ldb >= 0 else k)
    else:
        g.b_sk, g.b_sn = (ldb if ldb >= 0 else n), 1
    g.a_off = &a_off_v[0]
    g.b_off = &b_off_v[0]
    g.batch = batch
    g.out = <float *>out
    g.m, g.k, g.n = m, k, n
    _fill_post_chain(&g.chain, chain, out, n, "make_gemm_step")
    ppl_epilogue_reset(&g.ep)
    g.ep.alpha = alpha
    g.ep.beta = beta
    g.ep.bias = NULL
    if bias_pad is not None:
        bias_v = bias_pad
        g.ep.bias = &bias_v[0]
    g.ep.addend = <const float *>addend
    if b_packed:  # else each item packs its panels into warm scratch
        g.ep.b_prefetch = _b_prefetch_floats(4 * k * n)
    if not c:  # else _add_c applies the whole chain after C
        _split_post_chain(&g.chain, &g.ep, True, False)
    g.c = <const float *>c
    g.c_s0, g.c_s1, g.c_beta = c_s0, c_s1, beta
    g.npanels, g.nmblocks, g.rows_per_block = npanels, nmblocks, rows_per_block
    g.ngroups, g.panels_per_group = ngroups, panels_per_group
    g.kc = kc
    scratch_v = scratch
    # 64-byte aligned start, so the copied rows of A begin on cache lines
    g.scratch = &scratch_v[0]  # slices on cache lines of their own (per_thread.py)
    g.scratch_floats = scratch_floats
    g.max_threads = num_threads
    step.work_items = batch * (1 if g.pack_b else nmblocks) * ngroups
    # Items are claimed as the step runs (ppl_next_items), one at a time where a thread's
    # copy of A serves its next item too (one K chunk); with several K chunks every claim
    # copies A again, so a share claims about half of an even share at once.
    g.claim = _claim_chunk(1 if kc >= k else max(1, step.work_items // (2 * num_threads)))
    return step


def gemm_fp32(const float[:, :] a, const float[:, :, ::1] packed_b, int k, int n,
              float[:, ::1] out, float alpha, bias, addend, float beta, int post_op,
              float p0, float p1, int num_threads, post_chain=()):
    """out = post_ops(alpha * (a @ B) + beta * addend + bias), B given by gemm_pack_b; the
    chain post_chain after post_op (make_gemm_step)."""
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
    if post_op not in _POST_OPS:
        raise ValueError(f"gemm_fp32: unknown post_op {post_op}; expected one of "
                         f"{sorted(_POST_OPS)} (post_ops.PostOp)")
    if m == 0:
        return
    cdef const float[:, ::1] addend_v
    cdef size_t addend_address = 0
    if addend is not None:
        addend_v = addend
        if addend_v.shape[0] != m or addend_v.shape[1] != n:
            raise ValueError(f"gemm_fp32: addend must be {m} x {n}, got "
                             f"{(addend_v.shape[0], addend_v.shape[1])}")
        addend_address = <size_t>&addend_v[0, 0]
    # A row stride in floats; a single-column or single-row a may report any stride.
    cdef Py_ssize_t lda = a.strides[0] // sizeof(float) if m > 1 else k
    step = make_gemm_step(<size_t>&a[0, 0], <size_t>&packed_b[0, 0, 0], <size_t>&out[0, 0],
                          m, k, n, num_threads, lda=lda, alpha=alpha, bias=bias,
                          addend=addend_address, beta=beta, post_op=post_op, p0=p0, p1=p1,
                          post_chain=post_chain,
                          keep=(a, packed_b, out, addend))
    run_steps([step], num_threads)
