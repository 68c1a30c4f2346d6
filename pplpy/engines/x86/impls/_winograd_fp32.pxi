# Winograd F(4x4, 3x3) convolution on N16CX: 3x3, stride 1, dilation 1, group 1.
#
# Written once, included by _winograd_fp32_{avx512,fma,sse}.pyx after each defines PPL_VLEN.
#
# The output is cut into 4x4 tiles, each computed from the 6x6 input tile around it:
#
#     y = A^T [ U (.) V ] A,   U = G g G^T (per output/input channel pair, at build time),
#                              V = B^T d B (per input tile and channel, at run time)
#
# Summed over input channels, entry t of the 6x6 element-wise product is a GEMM:
# M_t[tiles x OC] = V_t[tiles x IC] . U_t[IC x OC], 36 of them per block of tiles, run on the
# brgemm microkernel with the batch over input-channel blocks (K = 16 each).  That is 36 * IC
# * OC multiply-adds per 16 output pixels instead of 9 * 16 * IC * OC: 4x fewer.
#
# A work item is a block of T consecutive tiles (over image, tile row, tile column) and a
# group of output-channel panels, and does all three phases into its thread's scratch:
#     input transform   V[t][icb][T tiles][16]          (36 * ICB * T * 16 floats)
#     36 GEMMs          M[t][ocb][T tiles][16]          (the group's panels of 36 * OCBP * T * 16)
#     output transform  A^T m A + bias, post-op, into the group's N16CX output channels
# so items are independent and the op is one step with no barrier.  T is chosen so that V and
# M stay in L2, and smaller (down to a register tile) where a large team needs more items
# (winograd_tiles_per_item); a one-row register tile sums in the others' order, so every T,
# and every thread count, gives the same bits.  Where there are still fewer tile blocks than
# threads (ResNet's 14x14 layers have 16 tiles: two blocks), the output channels are split
# into panel groups as well, so that a 16-thread team has 16 items.  The groups of a block
# then share its V, transformed once by a step of its own before the conv step, where all the
# blocks' V is at most _SHARED_V_BYTES (each group repeating the transform over 256 channels
# cost +34% of the work in eight groups); a larger V is transformed again by each group's
# items in their own scratch, since readers on other cores fetch it through the shared cache
# after a barrier (64 channels at 56 x 56 cut for 4 or 16 threads, V 1.8 MB: shared took
# 9-11% longer at two threads on a quiet EPYC with cold weights, 45% longer in a spell when
# the other core was busy; on the 16-core Xeon the 64- and 128-channel layers with shared V
# scaled 1.1-1.6x from one thread to four).  Splitting by channels changes no sum: same bits
# again.
# Pixels outside the image read as zero, so padding is never materialised; tiles hanging over
# the bottom or right edge of the output write only their valid pixels.
#
# Packed weights are a dict (layout private to this module's tier):
#   kind "winograd_f4x3": data float32 (36, npanels, ICB, 16, PPL_NB): U_t for output
#   channels of panel p and input channels of block icb, zero past oc and ic.

from pplpy.runtime.step cimport (PPL_MIN_ITEMS_PER_THREAD, Step, new_step, ppl_claim_size,
                                  ppl_item_queue, ppl_next_items)

import numpy

from pplpy.engines.x86.impls.aligned import aligned_copy, aligned_empty
from pplpy.engines.x86.impls.per_thread import per_thread_buffer
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.runtime.step import run_steps

include "_brgemm_fp32.pxi"

cdef extern from "_winograd_fp32.h" nogil:
    void ppl_wino_input_tile(const float *x, Py_ssize_t H, Py_ssize_t W, Py_ssize_t ih0,
                             Py_ssize_t iw0, float *v, Py_ssize_t vstride)
    void ppl_wino_output_tile(const float *m, Py_ssize_t mstride, const float *bias, float *y,
                              Py_ssize_t OW, Py_ssize_t oh0, Py_ssize_t ow0, int nh, int nw,
                              int post_op, float p0, float p1)

cdef enum:
    _POS = 36                   # 6 x 6 transformed tile positions
    _PARALLEL_FLOPS = 1 << 20   # direct-equivalent FLOPs below which the step is serial
    # Scratch budget per item (V and M together), in floats: 512 KiB stays in a 1-2 MiB L2.
    _ITEM_FLOATS = 128 * 1024
    # Panel groups share their blocks' V (a step of its own) only up to this many bytes of V
    # for all blocks: ResNet's 256 channels at 14 x 14 (0.59-0.66 MB) share; 128 at 28 x 28
    # (0.9-1 MB: on a quiet EPYC shared took the same time cut for 4 threads and 9% less cut
    # for 16, 15-16% longer in a spell with the other core busy; slow to scale on the Xeon)
    # and 64 at 56 x 56 (1.8 MB) do not.
    _SHARED_V_BYTES = 768 * 1024

# G of F(4x4, 3x3): U = G g G^T.  (Written as 24ths: Cython folds 1 / 4 as C int division.)
_G = numpy.array([[6, 0, 0], [-4, -4, -4], [-4, 4, -4], [1, 2, 4], [1, -2, 4], [0, 0, 24]],
                 dtype=numpy.float64) / 24.0


ctypedef struct _WinoArgs:
    const float *x
    float *y
    const float *u                 # packed (36, npanels, icb, 16, PPL_NB)
    const float *bias              # ocbp * 16 padded biases, or NULL: raw_bias
    const float *raw_bias          # oc values computed at run time, or NULL
    Py_ssize_t oc, icb, ocb, ocbp, npanels
    Py_ssize_t H, W, OH, OW, TH, TW, pt, pl
    Py_ssize_t tiles, block, nitems  # all tiles (batch * TH * TW), tiles per item, items
    Py_ssize_t ngroups, group_panels  # output-channel panel groups per block, panels in each
    float *shared_v                # NULL, or every block's V, transformed once by a step of
                                   # its own before the GEMM step (ngroups > 1)
    int kc
    int post_op                    # the chain's leading activation, in the output transform
    ppl_post_chain chain           # entries [chain_first, len) after it, per output tile row
    int chain_first
    float p0, p1
    ppl_epilogue ep
    float *scratch                 # max_threads slices of scratch_floats
    Py_ssize_t scratch_floats
    const float **ptrs             # max_threads slices of 2 * icb batch pointers,
    Py_ssize_t ptr_stride          # ptr_stride apart
    int max_threads
    Py_ssize_t claim               # items a share claims at a time (ppl_next_items)
    ppl_item_queue queue


cdef inline Py_ssize_t _ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


def winograd_layout(Py_ssize_t oc, Py_ssize_t ic):
    """Blocking of the packed weight for oc x ic channels: (npanels, icb, ocbp)."""
    cdef Py_ssize_t npanels = _ceil_div(_ceil_div(oc, PPL_CB) * PPL_CB, PPL_NB)
    return npanels, _ceil_div(ic, PPL_CB), _ceil_div(npanels * PPL_NB, PPL_CB)


def winograd_pack_weight(w):
    """U = G g G^T of an ONNX (OC, IC, 3, 3) weight, packed for winograd_conv steps."""
    w = numpy.asarray(w, dtype=numpy.float32)
    if w.ndim != 4 or w.shape[2:] != (3, 3) or min(w.shape[:2]) < 1:
        raise ValueError(f"winograd_pack_weight: expected (OC, IC, 3, 3), got {w.shape}")
    oc, ic = w.shape[:2]
    npanels, icb, _ = winograd_layout(oc, ic)
    u = numpy.einsum("ap,oipq,bq->abio", _G, w.astype(numpy.float64), _G).reshape(_POS, ic, oc)
    full = numpy.zeros((_POS, icb * PPL_CB, npanels * PPL_NB), numpy.float32)
    full[:, :ic, :oc] = u
    # (36, ic, panel, NB) -> (36, panel, ic blocks, 16, NB)
    data = full.reshape(_POS, icb, PPL_CB, npanels, PPL_NB).transpose(0, 3, 1, 2, 4)
    return {"kind": "winograd_f4x3", "oc": oc, "ic": ic, "npanels": npanels,
            "data": aligned_copy(data)}


def winograd_panel_groups(Py_ssize_t nblocks, Py_ssize_t npanels, int num_threads):
    """Panels per group for nblocks tile blocks, npanels panels and a team of num_threads:
    all panels in one group where the blocks alone give every thread of a team
    PPL_MIN_ITEMS_PER_THREAD items (room for the claims to even out a slow thread), else
    enough groups for that many (at most one per channel block; one group on one thread).
    Groups start on channel blocks (a panel narrower than 16 channels shares its block with
    the next), so that each group's output transform writes whole blocks."""
    cdef Py_ssize_t per_cb = max(1, PPL_CB // PPL_NB)   # panels per channel block
    cdef Py_ssize_t units = _ceil_div(npanels, per_cb)   # channel-block-aligned units
    cdef Py_ssize_t groups = 1
    cdef Py_ssize_t want = PPL_MIN_ITEMS_PER_THREAD * num_threads
    if num_threads > 1 and nblocks < want:
        groups = min(units, _ceil_div(want, nblocks))
    return _ceil_div(units, groups) * per_cb


def winograd_tiles_per_item(Py_ssize_t batch, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t in_c,
                            Py_ssize_t out_c, int num_threads=1):
    """T: tiles per work item.  As many as keep V and M within the scratch budget (at least
    one register tile of rows); fewer (down to a register tile) where a team of num_threads
    would get fewer than PPL_MIN_ITEMS_PER_THREAD items each even with a channel block per
    panel group (SqueezeNet's 16 -> 64 at 55x55: 5 blocks, 10 items for 16 threads); then
    evened out over the items.  A one-row register tile sums in the tiles' order, so no block
    size changes a bit."""
    npanels, icb, ocbp = winograd_layout(out_c, in_c)
    cdef Py_ssize_t tiles = batch * _ceil_div(OH, 4) * _ceil_div(OW, 4)
    cdef Py_ssize_t per_tile = _POS * (icb + ocbp) * PPL_CB
    cdef Py_ssize_t block = max(<Py_ssize_t>PPL_MR, _ITEM_FLOATS // per_tile // PPL_MR * PPL_MR)
    cdef Py_ssize_t units = _ceil_div(npanels, max(1, PPL_CB // PPL_NB))  # most panel groups
    cdef Py_ssize_t nblocks_want = _ceil_div(PPL_MIN_ITEMS_PER_THREAD * max(1, num_threads), units)
    if _ceil_div(tiles, block) < nblocks_want:
        block = max(<Py_ssize_t>PPL_MR, _ceil_div(tiles, nblocks_want))
    block = min(block, tiles)
    return _ceil_div(tiles, _ceil_div(tiles, block))


def winograd_work_items(Py_ssize_t batch, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t in_c,
                        Py_ssize_t out_c, int num_threads):
    """The work items of make_winograd_conv_step's step (its Step.work_items) for these
    shapes and a team of num_threads: for choosing an algorithm before any step is made."""
    npanels, _, _ = winograd_layout(out_c, in_c)
    cdef Py_ssize_t tiles = batch * _ceil_div(OH, 4) * _ceil_div(OW, 4)
    cdef Py_ssize_t block = min(winograd_tiles_per_item(batch, OH, OW, in_c, out_c,
                                                        num_threads), tiles)
    cdef Py_ssize_t nblocks = _ceil_div(tiles, block)
    return nblocks * _ceil_div(npanels, winograd_panel_groups(nblocks, npanels,
                                                              max(1, num_threads)))


cdef void _wino_input_block(const _WinoArgs *c, Py_ssize_t t0, Py_ssize_t t1,
                            float *v) noexcept nogil:
    """V of tiles [t0, t1): position pos, input block cb, tile i at
    v + pos * icb * T * 16 + (cb * T + i) * 16."""
    cdef Py_ssize_t T = c.block, vstride = c.icb * c.block * PPL_CB
    cdef Py_ssize_t plane = c.H * c.W * PPL_CB, i, tile, n, th, tw, cb
    for i in range(t1 - t0):
        tile = t0 + i
        tw = tile % c.TW
        th = (tile // c.TW) % c.TH
        n = tile // (c.TW * c.TH)
        for cb in range(c.icb):
            ppl_wino_input_tile(c.x + (n * c.icb + cb) * plane, c.H, c.W, th * 4 - c.pt,
                                tw * 4 - c.pl, v + (cb * T + i) * PPL_CB, vstride)


cdef void _wino_input_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Items are blocks: each block's V into shared_v, once for all its panel groups."""
    cdef const _WinoArgs *c = <const _WinoArgs *>args
    cdef Py_ssize_t begin, end, blk, nblocks = _ceil_div(c.tiles, c.block)
    cdef int calls = 0
    while ppl_next_items(<ppl_item_queue *>&c.queue, nblocks, c.claim, tid, nthreads, &calls,
                         &begin, &end):
        for blk in range(begin, end):
            _wino_input_block(c, blk * c.block, min(c.tiles, (blk + 1) * c.block),
                              c.shared_v + blk * _POS * c.icb * c.block * PPL_CB)


cdef void _wino_item(const _WinoArgs *c, Py_ssize_t t0, Py_ssize_t t1, Py_ssize_t p0,
                     Py_ssize_t p1, float *scratch, const float **a_ptrs,
                     const float **b_ptrs) noexcept nogil:
    """Tiles [t0, t1), output panels [p0, p1): input transform (unless shared_v holds it),
    36 GEMMs, output transform."""
    cdef Py_ssize_t T = c.block, nt = t1 - t0
    cdef Py_ssize_t vstride = c.icb * T * PPL_CB     # between tile positions in V
    cdef Py_ssize_t mstride = c.ocbp * T * PPL_CB    # between tile positions in M
    cdef float *bias = scratch
    cdef float *v = scratch + c.ocbp * PPL_CB   # unless shared_v: then M follows the bias
    cdef float *m = v + (0 if c.shared_v != NULL else _POS * vstride)
    cdef Py_ssize_t oplane = c.OH * c.OW * PPL_CB
    cdef Py_ssize_t i, tile, n, th, tw, cb, pos, p, j, col0, rows
    cdef Py_ssize_t cb0 = p0 * PPL_NB // PPL_CB
    cdef Py_ssize_t cb1 = min(c.ocb, _ceil_div(p1 * PPL_NB, PPL_CB))
    cdef const float *bsrc
    cdef float *cdst

    if c.bias != NULL:
        bsrc = c.bias
    else:
        for j in range(c.ocbp * PPL_CB):
            bias[j] = c.raw_bias[j] if c.raw_bias != NULL and j < c.oc else 0
        bsrc = bias

    if c.shared_v != NULL:  # transformed by the step before
        v = c.shared_v + (t0 // T) * _POS * vstride
    else:
        _wino_input_block(c, t0, t1, v)

    for pos in range(_POS):
        for p in range(p0, p1):
            col0 = p * PPL_NB
            for cb in range(c.icb):
                a_ptrs[cb] = v + pos * vstride + cb * T * PPL_CB
                b_ptrs[cb] = c.u + ((pos * c.npanels + p) * c.icb + cb) * PPL_CB * PPL_NB
            cdst = m + pos * mstride + (col0 // PPL_CB) * T * PPL_CB + col0 % PPL_CB
            # a last one-row tile in the tiles' order: bits independent of the block size
            rows = nt - (1 if nt % PPL_MR == 1 else 0)
            ppl_brgemm_run(rows, c.icb, a_ptrs, b_ptrs, c.kc, PPL_CB, cdst, PPL_CB, T * PPL_CB,
                           PPL_NB, &c.ep)
            if rows < nt:
                ppl_brgemm_row1_tiled(c.icb, a_ptrs, b_ptrs, c.kc, cdst + rows * PPL_CB,
                                      T * PPL_CB, PPL_NB, &c.ep)

    for i in range(nt):
        tile = t0 + i
        tw = tile % c.TW
        th = (tile // c.TW) % c.TH
        n = tile // (c.TW * c.TH)
        for cb in range(cb0, cb1):
            ppl_wino_output_tile(m + (cb * T + i) * PPL_CB, mstride, bsrc + cb * PPL_CB,
                                 c.y + (n * c.ocb + cb) * oplane, c.OW, th * 4, tw * 4,
                                 <int>min(<Py_ssize_t>4, c.OH - th * 4),
                                 <int>min(<Py_ssize_t>4, c.OW - tw * 4),
                                 c.post_op, c.p0, c.p1)
            if c.chain_first < c.chain.len:
                _wino_chain_rows(c, n, cb, th * 4, tw * 4,
                                 <int>min(<Py_ssize_t>4, c.OH - th * 4),
                                 <int>min(<Py_ssize_t>4, c.OW - tw * 4))


cdef void _wino_chain_rows(const _WinoArgs *c, Py_ssize_t n, Py_ssize_t cb, Py_ssize_t oh0,
                          Py_ssize_t ow0, int nh, int nw) noexcept nogil:
    """The chain past its leading activation on the nh x nw output tile at (oh0, ow0) of
    channel block cb, one pixel row at a time (each row's pixels are 16 floats apart)."""
    cdef float *row
    cdef int i
    for i in range(nh):
        row = c.y + ((n * c.ocb + cb) * c.OH * c.OW + (oh0 + i) * c.OW + ow0) * PPL_CB
        ppl_post_chain_tile(&c.chain, c.chain_first, row, PPL_CB, 0, nw, PPL_CB, cb * PPL_CB)


cdef void _wino_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Items are (block of T tiles, panel group), claimed as the step runs."""
    cdef const _WinoArgs *c = <const _WinoArgs *>args
    cdef Py_ssize_t begin, end, item, blk, p0
    cdef int calls = 0
    if nthreads > c.max_threads:  # a larger team than the scratch was made for
        if tid >= c.max_threads:
            return
        nthreads = c.max_threads
    cdef float *scratch = c.scratch + tid * c.scratch_floats
    cdef const float **a_ptrs = c.ptrs + tid * c.ptr_stride
    while ppl_next_items(<ppl_item_queue *>&c.queue, c.nitems, c.claim, tid, nthreads,
                         &calls, &begin, &end):
        for item in range(begin, end):
            blk = item // c.ngroups
            p0 = (item % c.ngroups) * c.group_panels
            _wino_item(c, blk * c.block, min(c.tiles, (blk + 1) * c.block), p0,
                       min(c.npanels, p0 + c.group_panels), scratch, a_ptrs, a_ptrs + c.icb)


def make_winograd_conv_step(size_t x, size_t y, Py_ssize_t batch, int in_c, int out_c,
                            Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW,
                            int pad_top, int pad_left, int post_op, float p0, float p1,
                            int num_threads, *, packed_w, bias=None, size_t b=0, keep=(),
                            Py_ssize_t tiles_per_item=0, post_chain=(),
                            Py_ssize_t group_panels=0, share_input=None):
    """The steps computing y = post_op(conv3x3(x, W) + bias), stride 1, dilation 1, group 1,
    x and y in N16CX at addresses x (N, ceil(in_c/16), H, W, 16) and y (N, ceil(out_c/16),
    OH, OW, 16); pads end are implied by OH and OW.  A list: the conv step, preceded by a
    step that transforms every block's input once where the output panels are split into
    groups and all blocks' V takes at most _SHARED_V_BYTES (else each group's items repeat
    their block's input transform).

    packed_w from winograd_pack_weight.  Bias: an array of out_c values, or the address b of
    one computed at run time, or neither.  Memory at addresses outlives the step (``keep``).
    tiles_per_item: 0 picks it from the shapes (winograd_tiles_per_item).  group_panels:
    output panels per work item, 0 picks it from the blocks and num_threads
    (winograd_panel_groups); a test may force any multiple of the panels per channel block.
    share_input: None decides as above; True or False forces sharing V between the groups or
    not (for tests and benchmarks; no effect with one group)."""
    if min(pad_top, pad_left) < 0 or min(batch, H, W, OH, OW, in_c, out_c) < 1:
        raise ValueError(f"make_winograd_conv_step: bad shapes batch={batch} in_c={in_c} "
                         f"out_c={out_c} H={H} W={W} OH={OH} OW={OW} pads=({pad_top}, "
                         f"{pad_left})")
    if post_op < 0 or post_op > max(PostOp):
        raise ValueError(f"make_winograd_conv_step: unknown post_op {post_op}")
    if (not isinstance(packed_w, dict) or packed_w.get("kind") != "winograd_f4x3"
            or packed_w["oc"] != out_c or packed_w["ic"] != in_c):
        raise ValueError(f"make_winograd_conv_step: packed_w must come from "
                         f"winograd_pack_weight for oc={out_c} ic={in_c}")
    if bias is not None and b:
        raise ValueError("make_winograd_conv_step: give bias or the address b, not both")
    npanels, icb, ocbp = winograd_layout(out_c, in_c)
    num_threads = max(1, num_threads)
    if tiles_per_item <= 0:
        tiles_per_item = winograd_tiles_per_item(batch, OH, OW, in_c, out_c, num_threads)
    cdef Py_ssize_t TH = _ceil_div(OH, 4), TW = _ceil_div(OW, 4)
    cdef Py_ssize_t tiles = batch * TH * TW
    cdef Py_ssize_t block = min(tiles_per_item, tiles)
    cdef Py_ssize_t per_cb = max(1, PPL_CB // PPL_NB)
    if group_panels <= 0:
        group_panels = winograd_panel_groups(_ceil_div(tiles, block), npanels, num_threads)
    elif group_panels % per_cb:
        raise ValueError(f"make_winograd_conv_step: group_panels must be a multiple of "
                         f"{per_cb} (panels per 16-channel block), got {group_panels}")
    group_panels = min(group_panels, _ceil_div(npanels, per_cb) * per_cb)

    bias_pad = None
    if not b:
        bias_pad = numpy.zeros(ocbp * PPL_CB, dtype=numpy.float32)
        if bias is not None:
            bias = numpy.asarray(bias, dtype=numpy.float32).reshape(-1)
            if bias.shape[0] != out_c:
                raise ValueError(f"make_winograd_conv_step: bias must have {out_c} values, "
                                 f"got {bias.shape[0]}")
            bias_pad[:out_c] = bias
    # per thread: the biases, V (unless the groups share it: shared_v below) and M
    cdef Py_ssize_t nblocks = _ceil_div(tiles, block)
    cdef bint share_v = _ceil_div(npanels, group_panels) > 1 and (
        nblocks * _POS * icb * block * PPL_CB * 4 <= _SHARED_V_BYTES if share_input is None
        else bool(share_input))
    cdef Py_ssize_t scratch_floats = ocbp * PPL_CB + _POS * ((0 if share_v else icb) + ocbp) * \
        block * PPL_CB
    # Each thread's slices on cache lines of their own (per_thread.py): whole lines.
    scratch_floats = _ceil_div(scratch_floats, 16) * 16
    scratch, _ = per_thread_buffer(num_threads, scratch_floats, numpy.float32)
    ptrs, ptr_stride = per_thread_buffer(num_threads, 2 * icb, numpy.uintp)

    cdef double flops = 2.0 * batch * out_c * OH * OW * 9 * in_c
    data = packed_w["data"]
    cdef Step step = new_step(_wino_step, sizeof(_WinoArgs), flops >= _PARALLEL_FLOPS,
                              (keep, data, bias_pad, scratch, ptrs))
    cdef _WinoArgs *c = <_WinoArgs *>step.args
    cdef const float[::1] uv = data.reshape(-1)
    cdef float[::1] scratch_v = scratch
    cdef size_t[::1] ptrs_v = ptrs
    cdef const float[::1] bias_v
    c.x = <const float *>x
    c.y = <float *>y
    c.u = &uv[0]
    c.bias = NULL
    if bias_pad is not None:
        bias_v = bias_pad
        c.bias = &bias_v[0]
    c.raw_bias = <const float *>b
    c.oc, c.icb, c.ocb, c.ocbp, c.npanels = out_c, icb, _ceil_div(out_c, PPL_CB), ocbp, npanels
    c.H, c.W, c.OH, c.OW, c.TH, c.TW, c.pt, c.pl = H, W, OH, OW, TH, TW, pad_top, pad_left
    c.ngroups, c.group_panels = _ceil_div(npanels, group_panels), group_panels
    c.tiles, c.block, c.nitems = tiles, block, _ceil_div(tiles, block) * c.ngroups
    step.work_items = c.nitems
    # With fewer than 16 input channels the rest of the block is padding: reduce over the
    # real channels only (their weight rows come first).
    c.kc = in_c if icb == 1 else PPL_CB
    _fill_post_chain(&c.chain, _full_chain(post_op, p0, p1, post_chain), y, out_c,
                     "make_winograd_conv_step")
    cdef ppl_epilogue split  # only for the split: the output transform applies the activation
    ppl_epilogue_reset(&split)
    _split_post_chain(&c.chain, &split, False, True)
    c.post_op, c.p0, c.p1 = split.post_op, split.p0, split.p1
    c.chain_first = split.chain_first
    ppl_epilogue_reset(&c.ep)  # the products into scratch: no epilogue
    c.ep.b_prefetch = _b_prefetch_floats(data.nbytes)
    c.scratch = &scratch_v[0]
    c.scratch_floats = scratch_floats
    c.ptrs = <const float **>&ptrs_v[0]
    c.ptr_stride = ptr_stride
    c.max_threads = num_threads
    c.claim = _claim_chunk(ppl_claim_size(c.nitems, num_threads))
    c.shared_v = NULL
    if not share_v:
        return [step]
    shared = aligned_empty(nblocks * _POS * icb * block * PPL_CB, numpy.float32)
    cdef float[::1] shared_mv = shared
    c.shared_v = &shared_mv[0]
    step.keep = (step.keep, shared)
    cdef Step transform = new_step(_wino_input_step, sizeof(_WinoArgs),
                                   flops >= _PARALLEL_FLOPS, (step.keep,))
    (<_WinoArgs *>transform.args)[0] = c[0]
    (<_WinoArgs *>transform.args).claim = _claim_chunk(ppl_claim_size(nblocks, num_threads))
    transform.work_items = nblocks
    return [transform, step]


def winograd_conv2d_n16cx_fp32(x, packed_w, bias, y, int in_c, int out_c, int pad_top,
                               int pad_left, int post_op, float p0, float p1, int num_threads,
                               Py_ssize_t tiles_per_item=0, post_chain=(),
                               Py_ssize_t group_panels=0, share_input=None):
    """y = post_op(conv3x3(x, w) + bias), stride 1, x and y in N16CX; packed_w from
    winograd_pack_weight.  The test wrapper of make_winograd_conv_step."""
    cdef const float[:, :, :, :, ::1] xv = x
    cdef float[:, :, :, :, ::1] yv = y
    if (xv.shape[4] != PPL_CB or yv.shape[4] != PPL_CB or xv.shape[1] != _ceil_div(in_c, PPL_CB)
            or yv.shape[1] != _ceil_div(out_c, PPL_CB) or yv.shape[0] != xv.shape[0]):
        raise ValueError(
            f"winograd_conv2d_n16cx_fp32: expected x (N, {_ceil_div(in_c, PPL_CB)}, H, W, 16) "
            f"and y (N, {_ceil_div(out_c, PPL_CB)}, OH, OW, 16), got x "
            f"{tuple(numpy.shape(x))} and y {tuple(numpy.shape(y))}")
    step = make_winograd_conv_step(
        <size_t>&xv[0, 0, 0, 0, 0], <size_t>&yv[0, 0, 0, 0, 0], xv.shape[0], in_c, out_c,
        xv.shape[2], xv.shape[3], yv.shape[2], yv.shape[3], pad_top, pad_left, post_op, p0, p1,
        num_threads, packed_w=packed_w, bias=bias, keep=(x, y),
        tiles_per_item=tiles_per_item, post_chain=post_chain, group_panels=group_panels,
        share_input=share_input)
    run_steps(step, num_threads)
