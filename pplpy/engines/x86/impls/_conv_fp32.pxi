# 2-D convolution on N16CX, direct (no im2col), on the brgemm microkernel.
#
# Written once, included by _conv_fp32_{avx512,fma,sse}.pyx after each defines PPL_VLEN.
#
# N16CX: logical (N, C, H, W) stored as (N, ceil(C/16), H, W, 16), channel c at
# [n, c // 16, h, w, c % 16].
#
# Dense path (any group whose input channels per group are more than one).  One output row
# of one panel of PPL_NB output channels is a brgemm: the A rows are MR consecutive output
# pixels, whose 16 input channels of one block sit 16 * stride_w floats apart; the batch runs
# over kernel taps x input-channel blocks, each a K = 16 step against a packed 16 x PPL_NB
# weight block.  Pixels whose taps all fit along W go MR at a time along their row; border
# columns go MR at a time down the column where all kernel rows fit; the corners one pixel
# at a time.  Out-of-image taps are left out of the batch: padding is never materialised.
# On sse the full tiles along rows read a broadcast copy of their input instead, one batch
# element per tap (_BcastRows).
#
# Groups are folded into the weights: panel p's output channels read only the input-channel
# blocks of the groups they belong to, and the weights of the other groups' channels inside
# those blocks are zero (block-diagonal, but only across the band a panel touches).  Group
# 1 is the special case of one band; a 1x1 stride-1 unpadded conv is a GEMM over the
# flattened H*W pixels.
#
# Depthwise path (one input channel per group, with group > 1 or a single output channel:
# _is_depthwise): each output channel block is vectorised over its 16 channels.  Square
# 3x3 / 5x5 kernels with stride 1 or 2 and no dilation (every depthwise layer of MobileNet,
# EfficientNet, ShuffleNet) run _dwconv_fp32.h's kernel: kernel size, stride and
# activation compile-time constants, tiles of pixels in registers,
# the activation applied before the store; planes up to PPL_DWC_SLAB_W wide are first copied
# per item (a block of output rows) into a zero-padded slab, so no pixel needs a bounds
# check, wider ones go row by row with only their border pixels copied.  Other depthwise
# convs take the general row kernel (ppl_dw_row); with a channel multiplier > 1 an item
# first gathers each output channel's input channel into one plane of its thread's scratch.
#
# The op is one compiled step of the run plan: its work items (image, block of output rows,
# row segment, panel) are independent output blocks that the team's shares claim a few at a
# time as the step runs (ppl_next_items; at most one pixel block's panels per claim, which
# share their input rows), so a slow thread takes fewer of them.  A weight computed at run
# time is packed by the item that uses it (an item is then a whole panel, packed once into
# its share's scratch), so no barrier is needed.  A small layer is cut into more items for a
# larger team (at least PPL_MIN_ITEMS_PER_THREAD per thread where the output allows: shorter
# pixel segments of a pointwise conv, fewer rows per item otherwise), but every output pixel
# is summed in the same order whatever the cut, so every thread count gives the same bits:
# segments are whole narrow tiles from pixel 0, and a tile of one row that only a cut makes
# runs in the tiles' order.
#
# Packed weights are a dict (layout private to this module's tier):
#   kind "dense":     data float32 flat; panels int64 (npanels, 3) = (offset into data,
#                     first input block, number of input blocks); the block of panel p is
#                     [kh][kw][input block][16 input channels][PPL_NB output channels];
#                     max_blocks the largest number of input blocks of a panel.
#   kind "depthwise": data float32 (ceil(oc/16), kh, kw, 16), zero past oc.

from pplpy.runtime.step cimport (PPL_MIN_ITEMS_PER_THREAD, Step, new_step, ppl_claim_size,
                                  ppl_item_queue, ppl_next_items)

import numpy

from pplpy.engines.x86.impls.aligned import aligned_zeros
from pplpy.engines.x86.impls.per_thread import per_thread_buffer
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.runtime.step import run_steps

# Every activation code the epilogue applies (the vector functions of _activation_fp32.h).
_POST_OPS = frozenset(int(code) for code in PostOp)

include "_brgemm_fp32.pxi"

cdef extern from "_dwconv_fp32.h" nogil:
    int ppl_dwc_supported(int K, int S)
    Py_ssize_t ppl_dwc_slab_width(Py_ssize_t W, int pl, Py_ssize_t OW, int K, int S)
    void ppl_dwc_fill(const float *x, Py_ssize_t H, Py_ssize_t W, Py_ssize_t ih0,
                      Py_ssize_t nrows, int pl, Py_ssize_t wp, float *slab)
    void ppl_dwc_rows(int K, int S, int code, const float *slab, Py_ssize_t wp,
                      Py_ssize_t nrows, Py_ssize_t OW, const float *w, const float *bias,
                      float *y, float p0, float p1)
    void ppl_dwc_row(int K, int S, int code, const float *x, Py_ssize_t H, Py_ssize_t W,
                     const float *zero, float *edge, Py_ssize_t oh, int pt, int pl,
                     Py_ssize_t OW, const float *w, const float *bias, float *y, float p0,
                     float p1)
    enum:
        PPL_DWC_SLAB_W

cdef enum:
    # Register tiles of output pixels a work item covers at least (rows permitting): a
    # panel's weights, read from L2, then serve many pixels, and border columns get tiles
    # several rows tall.  Row segments of a few dozen tiles: the input they read stays in L2
    # across panels.  Both at least so many pixels: sse's 2-pixel tiles made items of two
    # rows of 32-pixel segments, whose input rows (copied for _BcastRows) were half halo and
    # whose interiors were split in two.
    _ITEM_TILES = 32
    _ITEM_PIXELS_MIN = 128
    _SEG_TILES = 16
    _SEG_PIXELS_MIN = 64
    _PARALLEL_FLOPS = 1 << 20   # a smaller conv runs as a serial step
    # A depthwise conv moves a byte per few FLOPs: MobileNetV2's 3x3 over 960 channels at
    # 7x7 (0.85 MFLOP) ran serially under the dense threshold.
    _PARALLEL_DW_FLOPS = 1 << 18
    # A dense conv on a few pixels streams its weight (EfficientNet's squeeze-excite 1x1
    # convs on 1x1 maps, 221 KB each): parallel from this many weight bytes whatever its FLOPs.
    _PARALLEL_W_BYTES = 1 << 17
    # Floats of one depthwise slab (_dwconv_fp32.h) at most (128 KB): L2-resident while its
    # item computes from it, and tall enough that the rows two items share are few.
    _DW_SLAB_FLOATS = 32 * 1024
    _BIAS_TMP = 32              # scratch floats for one item's biases (PPL_NB and PPL_CB <= 32)
    # sse: an item's input rows broadcast (_BcastRows) take at most this many floats (1 MB)
    _BCAST_FLOATS = 1 << 18

ctypedef struct _ConvDims:
    Py_ssize_t icb, ocb            # channel blocks of x and y
    Py_ssize_t H, W, OH, OW
    int kh, kw, sh, sw, pt, pl, dh, dw
    int kc                         # K per batch element: 16, or in_c when one block holds all
    int planar                     # dense: x is NCHW (in_c < 16), one batch element per
                                   # (tap, channel) with K = 1
    Py_ssize_t ps                  # floats between two pixels of x's rows: 16, or 1 planar
    Py_ssize_t seg                 # output pixels per work item along a row

ctypedef struct _ConvArgs:
    const float *x
    float *y
    _ConvDims d
    Py_ssize_t batch
    int depthwise
    const float *w                 # packed weight data, or NULL: raw_w is packed by items
    const float *w_rows            # planar x, dilation_w 1: _planar_row_weights, or NULL
    Py_ssize_t w_rows_panel        # its floats per panel
    const float *raw_w             # (OC, IC/group, KH, KW) computed at run time
    const long long *panels        # dense: (offset, first input block, input blocks) each
    Py_ssize_t npanels, max_nicb
    Py_ssize_t oc, icg, ocg, mult  # mult: depthwise channel multiplier
    const float *bias              # padded to whole panels, or NULL: raw_bias (oc values)
    const float *raw_bias
    ppl_epilogue ep                # its chain is &chain: the post-ops past ep's inline prefix
    ppl_post_chain chain
    Py_ssize_t nrowblk, rows, nseg, nitems
    int fixed                      # depthwise: _dwconv_fp32.h's kernel, 2 through a slab
    Py_ssize_t wp                  # its slab width in pixels
    const float **ptrs             # max_threads slices of 2 * cap batch pointers
    Py_ssize_t cap
    float *scratch                 # max_threads slices of scratch_floats
    Py_ssize_t scratch_floats
    Py_ssize_t bcast_off           # sse: where _BcastRows.data starts in a slice; -1: none
    Py_ssize_t bcast_floats        # and its size
    int max_threads
    Py_ssize_t claim               # items a share claims at a time (ppl_next_items)
    ppl_item_queue queue


ctypedef struct _Src:
    # Where a batch element's A starts: input block c's pixel (ih, iw) at
    # base + c * plane + (ih - ih0) * row + (iw - iw0) * pix; one element spans `blocks`
    # input blocks (1, or all of them where a pixel's blocks are side by side).
    const float *base
    Py_ssize_t plane, row, pix, ih0, iw0, blocks


ctypedef struct _BcastRows:
    # sse (PPL_A_BCAST): the input rows [ih_lo, ih_hi), columns [iw_lo, iw_hi) of input
    # blocks [icb_lo, icb_lo + nicb) of image n that an item's row interiors read, every
    # float broadcast to a whole vector (_brgemm_fp32.h, PPL_A_BCAST), a pixel's nicb
    # blocks side by side: the direct conv's 2 x 4 tile then loads each broadcast instead
    # of shuffling it, as the GEMM's does, and each tap is one batch element of K = 16 *
    # nicb (the weight's blocks of one tap are side by side too).  Kept for the thread's
    # next items over the same pixels (the other panels: panels are the innermost item
    # index).  benchmarks/brgemm.py's 9 x (3136 x 64 x 64) layer on the 2-core Zen 4 EPYC,
    # sse tier: 79% of the tier's peak before, 82-84% with the copy in 16-channel batch
    # elements (the per-element overhead of 36 elements of K = 16 then dominated: the loop
    # itself ran at 87% in benchmarks/brgemm_harness.c), 95-97% with a tap per element.
    float *data
    Py_ssize_t n, icb_lo, nicb, ih_lo, ih_hi, iw_lo, iw_hi    # what data holds; n -1: none


def _is_depthwise(Py_ssize_t oc, Py_ssize_t icg, Py_ssize_t group):
    """One input channel per group, except a group-1 conv of one input channel into several
    outputs (an audio model's first conv over the waveform, a grayscale image's): that is a
    dense conv whose K is its taps.  On the depthwise kernel it would be a channel multiplier
    of out_c, each output channel its own pass over the input; wav2vec2's 1 -> 512 conv
    (kernel 10, stride 5, over 16000 samples) took 14 ms there, 38x ONNX Runtime's time."""
    return icg == 1 and (group > 1 or oc == 1)


def _conv_layout(Py_ssize_t oc, Py_ssize_t icg, Py_ssize_t group, Py_ssize_t kh,
                 Py_ssize_t kw):
    """The packed-weight dict of conv_pack_weight without its data: shapes alone decide it."""
    cdef Py_ssize_t ocg = oc // group
    cdef Py_ssize_t ocb = _ceil_div(oc, PPL_CB)
    info = {"oc": oc, "ic": icg * group, "group": group, "kh": kh, "kw": kw}
    if _is_depthwise(oc, icg, group):
        return {"kind": "depthwise", "size": ocb * kh * kw * PPL_CB, **info}
    cdef Py_ssize_t npanels = _ceil_div(ocb * PPL_CB, PPL_NB)
    panels = numpy.zeros((npanels, 3), dtype=numpy.int64)
    cdef Py_ssize_t offset = 0, p, oc_lo, oc_hi, g_lo, g_hi, icb_lo, nicb
    for p in range(npanels):
        oc_lo, oc_hi = p * PPL_NB, min(oc, (p + 1) * PPL_NB)
        if oc_lo >= oc:  # only padding channels: an empty batch gives bias (zero) lanes
            panels[p] = (offset, 0, 0)
            continue
        g_lo, g_hi = oc_lo // ocg, (oc_hi - 1) // ocg
        icb_lo = g_lo * icg // PPL_CB
        nicb = _ceil_div((g_hi + 1) * icg, PPL_CB) - icb_lo
        panels[p] = (offset, icb_lo, nicb)
        offset += kh * kw * nicb * PPL_CB * PPL_NB
    return {"kind": "dense", "size": max(1, offset), "panels": panels,
            "max_blocks": max(1, int(panels[:, 2].max())), **info}


cdef void _pack_dense_panel(const float *w, Py_ssize_t oc, Py_ssize_t icg, Py_ssize_t ocg,
                            int kh, int kw, Py_ssize_t p, Py_ssize_t icb_lo, Py_ssize_t nicb,
                            float *dst) noexcept nogil:
    """dst[tap][c][j] = w[o, ci - g * icg, tap] for output channel o = p * NB + j of group
    g = o // ocg and input channel ci = icb_lo * 16 + c inside that group; else 0."""
    cdef Py_ssize_t t, c, j, o, ci, cl, taps = <Py_ssize_t>kh * kw
    cdef float *row
    for t in range(taps):
        for c in range(nicb * PPL_CB):
            ci = icb_lo * PPL_CB + c
            row = dst + (t * nicb * PPL_CB + c) * PPL_NB
            for j in range(PPL_NB):
                o = p * PPL_NB + j
                row[j] = 0
                if o < oc:
                    cl = ci - (o // ocg) * icg
                    if 0 <= cl < icg:
                        row[j] = w[(o * icg + cl) * taps + t]


cdef void _pack_dw_block(const float *w, Py_ssize_t oc, Py_ssize_t taps, Py_ssize_t cb,
                         float *dst) noexcept nogil:
    """dst[tap][lane] = w[cb * 16 + lane, 0, tap] (0 past oc)."""
    cdef Py_ssize_t t, lane, o
    for t in range(taps):
        for lane in range(PPL_CB):
            o = cb * PPL_CB + lane
            dst[t * PPL_CB + lane] = w[o * taps + t] if o < oc else 0


def conv_pack_weight(w, int group):
    """Pack an ONNX conv weight (OC, IC/group, KH, KW) for conv2d_n16cx_fp32."""
    w = numpy.ascontiguousarray(w, dtype=numpy.float32)
    if w.ndim != 4 or group < 1 or w.shape[0] % group != 0:
        raise ValueError(f"conv_pack_weight: expected (OC, IC/group, KH, KW) with OC divisible "
                         f"by group={group}, got {w.shape}")
    oc, icg, kh, kw = w.shape
    packed = _conv_layout(oc, icg, group, kh, kw)
    data = aligned_zeros(packed.pop("size"), numpy.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] dv = data
    cdef const long long[:, ::1] pv
    cdef Py_ssize_t p
    if w.size == 0:
        packed["data"] = data
        return packed
    if packed["kind"] == "depthwise":
        for p in range(_ceil_div(oc, PPL_CB)):
            _pack_dw_block(&wv[0], oc, kh * kw, p, &dv[p * kh * kw * PPL_CB])
        packed["data"] = data.reshape(-1, kh, kw, PPL_CB)
        return packed
    pv = packed["panels"]
    for p in range(pv.shape[0]):
        if pv[p, 2] > 0:
            _pack_dense_panel(&wv[0], oc, icg, oc // group, kh, kw, p, pv[p, 1], pv[p, 2],
                              &dv[pv[p, 0]])
    packed["data"] = data
    return packed


def _planar_row_weights(data, panels, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t kc):
    """A planar x's packed weights once more, each panel's block [kh][kw][16][PPL_NB] as
    [kh][c < kc][kw][PPL_NB]: the kw taps of a kernel row and channel side by side, as the
    pixels of x's row they multiply are (dilation_w 1), so that a row interior's tile takes
    a whole kernel row per batch element (_gather_kernel_rows) instead of a tap: with K = 1
    per element, ResNet-50's 7 x 7 stem and the 3 x 3 stems of the mobile nets ran at half
    of the core's peak, the loop around each element costing as much as its FMAs."""
    cdef Py_ssize_t p, size = kh * kc * kw * PPL_NB
    out = aligned_zeros((panels.shape[0], size), numpy.float32)
    for p in range(panels.shape[0]):
        if panels[p, 2] == 0:  # padding channels only: an empty batch
            continue
        block = data[panels[p, 0]:panels[p, 0] + kh * kw * PPL_CB * PPL_NB]
        out[p] = block.reshape(kh, kw, PPL_CB, PPL_NB)[:, :, :kc].transpose(0, 2, 1, 3).reshape(-1)
    return out


cdef inline Py_ssize_t _seg_pixels() noexcept nogil:
    """Output pixels per row segment of a dense conv's work item (see _SEG_TILES)."""
    return max(<Py_ssize_t>(_SEG_TILES * PPL_MR), <Py_ssize_t>_SEG_PIXELS_MIN)


cdef inline Py_ssize_t _ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef void _interior_cols(const _ConvDims *d, Py_ssize_t *lo, Py_ssize_t *hi) noexcept nogil:
    """[lo, hi): output columns whose every tap lands inside [0, W)."""
    cdef Py_ssize_t last = d.W - 1 + d.pl - <Py_ssize_t>(d.kw - 1) * d.dw
    lo[0] = _ceil_div(d.pl, d.sw)
    hi[0] = min(d.OW, last // d.sw + 1) if last >= 0 else 0
    if lo[0] > hi[0]:
        lo[0] = hi[0] = 0


cdef void _interior_rows(const _ConvDims *d, Py_ssize_t *lo, Py_ssize_t *hi) noexcept nogil:
    """[lo, hi): output rows whose every tap lands inside [0, H)."""
    cdef Py_ssize_t last = d.H - 1 + d.pt - <Py_ssize_t>(d.kh - 1) * d.dh
    lo[0] = _ceil_div(d.pt, d.sh)
    hi[0] = min(d.OH, last // d.sh + 1) if last >= 0 else 0
    if lo[0] > hi[0]:
        lo[0] = hi[0] = 0


cdef Py_ssize_t _gather_taps(const _ConvDims *d, const _Src *src, const float *wp,
                             Py_ssize_t nicb, Py_ssize_t oh, Py_ssize_t ow,
                             const float **a_ptrs, const float **b_ptrs) noexcept nogil:
    """The brgemm batch of output pixel (oh, ow): A (in src) and B blocks of every (tap,
    input block) whose tap lands inside the image, or with a planar x of every (tap, input
    channel), row c of the tap's block; returns its length."""
    # A panel of padding channels only (nicb 0) has an empty batch: its lanes get bias 0.
    cdef Py_ssize_t per_tap = (d.kc if nicb > 0 else 0) if d.planar else nicb
    cdef Py_ssize_t ih, iw, c, nb = 0
    cdef int kh, kw
    for kh in range(d.kh):
        ih = oh * d.sh - d.pt + <Py_ssize_t>kh * d.dh
        if ih < 0 or ih >= d.H:
            continue
        for kw in range(d.kw):
            iw = ow * d.sw - d.pl + <Py_ssize_t>kw * d.dw
            if iw < 0 or iw >= d.W:
                continue
            c = 0
            while c < per_tap:
                a_ptrs[nb] = (src.base + c * src.plane + (ih - src.ih0) * src.row
                              + (iw - src.iw0) * src.pix)
                if d.planar:
                    b_ptrs[nb] = wp + ((kh * d.kw + kw) * PPL_CB + c) * PPL_NB
                else:
                    b_ptrs[nb] = wp + ((kh * d.kw + kw) * nicb + c) * PPL_CB * PPL_NB
                nb += 1
                c += src.blocks
    return nb


cdef Py_ssize_t _gather_kernel_rows(const _ConvDims *d, const float *x_n,
                                    const float *w_rows, Py_ssize_t nicb, Py_ssize_t oh,
                                    Py_ssize_t ow, const float **a_ptrs,
                                    const float **b_ptrs) noexcept nogil:
    """The brgemm batch of output pixel (oh, ow) of a planar x whose taps along W all fit:
    one element per (kernel row inside the image, input channel), of K = kw taps side by side
    in x's row (dilation_w 1) against w_rows (_planar_row_weights) of the panel; returns its
    length."""
    cdef Py_ssize_t ih, c, nb = 0
    cdef int kh
    for kh in range(d.kh):
        ih = oh * d.sh - d.pt + <Py_ssize_t>kh * d.dh
        if ih < 0 or ih >= d.H or nicb == 0:
            continue
        for c in range(d.kc):
            a_ptrs[nb] = x_n + (c * d.H + ih) * d.W + ow * d.sw - d.pl
            b_ptrs[nb] = w_rows + (kh * d.kc + c) * d.kw * PPL_NB
            nb += 1
    return nb


cdef bint _bcast_rows(const _ConvDims *d, const float *x_n, Py_ssize_t n,
                      Py_ssize_t icb_lo, Py_ssize_t nicb, Py_ssize_t oh_lo,
                      Py_ssize_t oh_hi, Py_ssize_t ow_lo, Py_ssize_t ow_hi,
                      Py_ssize_t cap, _BcastRows *bc, _Src *src) noexcept nogil:
    """Make bc hold the broadcast input that output rows [oh_lo, oh_hi) x interior columns
    [ow_lo, ow_hi) read (copying it unless it already does) and src point into it; False
    (nothing done) where it would take more than cap floats."""
    cdef Py_ssize_t ih_lo = max(<Py_ssize_t>0, oh_lo * d.sh - d.pt)
    cdef Py_ssize_t ih_hi = min(d.H, (oh_hi - 1) * d.sh - d.pt
                                + <Py_ssize_t>(d.kh - 1) * d.dh + 1)
    cdef Py_ssize_t iw_lo = ow_lo * d.sw - d.pl
    cdef Py_ssize_t iw_hi = (ow_hi - 1) * d.sw - d.pl + <Py_ssize_t>(d.kw - 1) * d.dw + 1
    cdef Py_ssize_t nrows = ih_hi - ih_lo, ncols = iw_hi - iw_lo, c, ih, iw, j, l
    cdef const float *s
    cdef float *t
    if nrows <= 0 or nrows * ncols * nicb * PPL_CB * PPL_VLEN > cap:
        return False
    if not (bc.n == n and bc.icb_lo == icb_lo and bc.nicb == nicb and bc.ih_lo == ih_lo
            and bc.ih_hi == ih_hi and bc.iw_lo == iw_lo and bc.iw_hi == iw_hi):
        for ih in range(ih_lo, ih_hi):
            for iw in range(iw_lo, iw_hi):
                t = bc.data + ((ih - ih_lo) * ncols + iw - iw_lo) * nicb * PPL_CB * PPL_VLEN
                for c in range(nicb):
                    s = x_n + (c * d.H * d.W + ih * d.W + iw) * PPL_CB
                    for j in range(PPL_CB):
                        for l in range(PPL_VLEN):
                            t[(c * PPL_CB + j) * PPL_VLEN + l] = s[j]
        bc.n, bc.icb_lo, bc.nicb = n, icb_lo, nicb
        bc.ih_lo, bc.ih_hi, bc.iw_lo, bc.iw_hi = ih_lo, ih_hi, iw_lo, iw_hi
    src.base = bc.data
    src.plane = PPL_CB * PPL_VLEN
    src.pix = nicb * src.plane
    src.row = ncols * src.pix
    src.ih0, src.iw0, src.blocks = ih_lo, iw_lo, nicb
    return True


cdef void _conv_dense_column(const _ConvDims *d, const _Src *src, const float *wp,
                             Py_ssize_t nicb, Py_ssize_t ow, Py_ssize_t oh_lo, Py_ssize_t oh_hi,
                             Py_ssize_t r_lo, Py_ssize_t r_hi, bint interior, int kc,
                             float *y_p, Py_ssize_t cbs, int n_valid, const ppl_epilogue *ep,
                             const float **a_ptrs, const float **b_ptrs) noexcept nogil:
    """Output column ow of an item that its row tiles left out: down the column over the
    rows [r_lo, r_hi) whose kernel rows all fit, then (unless the column is interior, its
    other rows done along their rows) the corner pixels one at a time."""
    cdef Py_ssize_t nb, col_rows, oh
    if r_lo < r_hi:
        # The item's rows depend on the team size; a last tile of one row goes in the
        # tiles' order of summation (ppl_brgemm_row1_tiled), so no split changes a bit.
        nb = _gather_taps(d, src, wp, nicb, r_lo, ow, a_ptrs, b_ptrs)
        col_rows = r_hi - r_lo - (1 if (r_hi - r_lo) % PPL_MR == 1 else 0)
        ppl_brgemm_run(col_rows, nb, a_ptrs, b_ptrs, kc, <Py_ssize_t>d.sh * d.W * d.ps,
                       y_p + (r_lo * d.OW + ow) * PPL_CB, d.OW * PPL_CB, cbs, n_valid, ep)
        if col_rows < r_hi - r_lo:
            ppl_brgemm_row1_tiled(nb, a_ptrs, b_ptrs, kc,
                                  y_p + ((r_hi - 1) * d.OW + ow) * PPL_CB, cbs, n_valid, ep)
    if interior:
        return
    for oh in range(oh_lo, oh_hi):
        if r_lo <= oh < r_hi:
            continue
        nb = _gather_taps(d, src, wp, nicb, oh, ow, a_ptrs, b_ptrs)
        ppl_brgemm(1, n_valid, nb, a_ptrs, b_ptrs, kc, 0, y_p + (oh * d.OW + ow) * PPL_CB,
                   PPL_CB, cbs, ep)


cdef void _conv_dense_item(const float *x, const float *wp, Py_ssize_t icb_lo,
                           Py_ssize_t nicb, const float *bias, float *y, const _ConvDims *d,
                           Py_ssize_t n, Py_ssize_t oh_lo, Py_ssize_t oh_hi,
                           Py_ssize_t ow_begin, Py_ssize_t ow_end, Py_ssize_t p,
                           const ppl_epilogue *ep_base, const float **a_ptrs,
                           const float **b_ptrs, _BcastRows *bc, Py_ssize_t bc_cap,
                           const float *w_rows) noexcept nogil:
    """y[n, panel p, oh_lo:oh_hi, ow_begin:ow_end] as brgemm tiles over (tap, input block)
    batches: MR pixels along a row where every tap fits, MR pixels down a border (or
    remainder) column where every kernel row fits, and the corners pixel by pixel.  wp is
    the panel's packed weight block, reading input blocks [icb_lo, icb_lo + nicb); bias its
    PPL_NB biases.  bc (or NULL): where the row interiors' full tiles may read a broadcast
    copy of their input, at most bc_cap floats.  w_rows (or NULL): with a planar x, the
    panel's weights for row interiors in batch elements of a whole kernel row
    (_gather_kernel_rows)."""
    cdef Py_ssize_t col0 = p * PPL_NB
    cdef int n_valid = <int>min(<Py_ssize_t>PPL_NB, d.ocb * PPL_CB - col0)
    cdef Py_ssize_t cbs = d.OH * d.OW * PPL_CB
    # Origin of this panel's output plane; pixel (oh, ow) at + (oh * OW + ow) * 16.
    cdef float *y_p = y + (n * d.ocb + col0 // PPL_CB) * cbs + col0 % PPL_CB
    cdef const float *x_n = x + (n * d.icb + icb_lo) * d.H * d.W * PPL_CB
    cdef int kc = 1 if d.planar else d.kc
    if d.planar:  # one block: the image's kc planes
        x_n = x + n * d.kc * d.H * d.W
    cdef _Src src, src_b
    src.base, src.ih0, src.iw0, src.blocks = x_n, 0, 0, 1
    src.pix = d.ps
    src.row = d.W * d.ps
    src.plane = d.H * d.W * d.ps
    cdef Py_ssize_t ow_lo, ow_hi, r_lo, r_hi, oh, ow, nb, full
    cdef ppl_epilogue ep = ep_base[0]
    ep.bias = bias
    ep.col0 = col0

    _interior_cols(d, &ow_lo, &ow_hi)
    ow_lo = max(ow_lo, ow_begin)
    ow_hi = min(ow_hi, ow_end)
    if ow_lo >= ow_hi:
        ow_lo = ow_hi = ow_end
    _interior_rows(d, &r_lo, &r_hi)

    # The last (ow_hi - ow_lo) % MR interior columns would make a short tile in every row;
    # where the rows allow, they go down their columns in tall tiles instead (a 7-wide
    # output becomes 6-wide row tiles and one 7-tall column).  Decided on the layer's
    # interior rows, not the item's, so that it does not depend on the split into items.
    cdef Py_ssize_t rest = (ow_hi - ow_lo) % PPL_MR
    cdef Py_ssize_t ow_split = ow_hi
    if rest > 0 and rest * _ceil_div(r_hi - r_lo, PPL_MR) < r_hi - r_lo:
        ow_split = ow_hi - rest
    r_lo = max(r_lo, oh_lo)
    r_hi = min(r_hi, oh_hi)
    if r_lo >= r_hi:
        r_lo = r_hi = oh_hi

    # Row interiors (every tap along W fits; rows may lose kernel rows at the top/bottom).
    # A batch element is a tap and input block (_gather_taps); on sse the full tiles read a
    # broadcast copy instead, a whole tap per element (_BcastRows); with a planar x, a kernel
    # row of one channel per element (_gather_kernel_rows).
    cdef Py_ssize_t end
    cdef bint bcast = (bc != NULL and n_valid > PPL_NB // 2 and ow_lo < ow_hi and nicb > 0
                       and _bcast_rows(d, x_n, n, icb_lo, nicb, oh_lo, oh_hi, ow_lo, ow_hi,
                                       bc_cap, bc, &src_b))
    for oh in range(oh_lo, oh_hi):
        end = ow_split if r_lo <= oh < r_hi else ow_hi
        if ow_lo >= end:
            continue
        if w_rows != NULL:
            nb = _gather_kernel_rows(d, x_n, w_rows, nicb, oh, ow_lo, a_ptrs, b_ptrs)
            ppl_brgemm_run(end - ow_lo, nb, a_ptrs, b_ptrs, d.kw, d.sw,
                           y_p + (oh * d.OW + ow_lo) * PPL_CB, PPL_CB, cbs, n_valid, &ep)
            continue
        full = (end - ow_lo) // PPL_MR * PPL_MR if bcast else 0
        if full > 0:
            nb = _gather_taps(d, &src_b, wp, nicb, oh, ow_lo, a_ptrs, b_ptrs)
            ppl_brgemm_run_bcast(full, nb, a_ptrs, b_ptrs, nicb * PPL_CB,
                                 <Py_ssize_t>d.sw * nicb * PPL_CB,
                                 y_p + (oh * d.OW + ow_lo) * PPL_CB, PPL_CB, cbs, n_valid,
                                 &ep)
        if ow_lo + full < end:
            nb = _gather_taps(d, &src, wp, nicb, oh, ow_lo + full, a_ptrs, b_ptrs)
            ppl_brgemm_run(end - ow_lo - full, nb, a_ptrs, b_ptrs, kc,
                           <Py_ssize_t>d.sw * d.ps, y_p + (oh * d.OW + ow_lo + full) * PPL_CB,
                           PPL_CB, cbs, n_valid, &ep)

    # Columns: down the column over rows whose kernel rows all fit, then the corners; the
    # ones left of the interior, then those right of ow_split (not a loop over every column
    # that skips the interior: a pointwise conv's one row has H*W of them).
    cdef Py_ssize_t side, side_lo, side_hi
    for side in range(2):
        side_lo = ow_begin if side == 0 else max(ow_begin, ow_split)
        side_hi = min(ow_lo, ow_end) if side == 0 else ow_end
        for ow in range(side_lo, side_hi):
            _conv_dense_column(d, &src, wp, nicb, ow, oh_lo, oh_hi, r_lo, r_hi,
                               ow_lo <= ow < ow_hi, kc, y_p, cbs, n_valid, &ep, a_ptrs,
                               b_ptrs)


cdef const float *_item_bias(const _ConvArgs *c, Py_ssize_t col0, Py_ssize_t width,
                             float *tmp) noexcept nogil:
    """width biases from output channel col0: padded ones, or a run-time bias copied."""
    cdef Py_ssize_t j
    if c.bias != NULL:
        return c.bias + col0
    for j in range(width):
        tmp[j] = c.raw_bias[col0 + j] if col0 + j < c.oc else 0
    return tmp


cdef void _conv_dense_items(const _ConvArgs *c, Py_ssize_t begin, Py_ssize_t end,
                            float *scratch, const float **a_ptrs, const float **b_ptrs,
                            _BcastRows *bcp) noexcept nogil:
    """Items [begin, end) of a dense conv step, with one share's scratch and pointer lists."""
    cdef const _ConvDims *d = &c.d
    cdef Py_ssize_t item, rest, p, s, rb, n, n_lo, n_hi
    cdef Py_ssize_t oh_lo, oh_hi, ow_lo, ow_hi
    cdef const float *wp
    cdef const float *bias
    for item in range(begin, end):
        p = item % c.npanels
        rest = item // c.npanels
        s = rest % c.nseg
        rest = rest // c.nseg
        rb = rest % c.nrowblk
        n = rest // c.nrowblk
        bias = _item_bias(c, p * PPL_NB, PPL_NB, scratch)
        if c.w != NULL:
            wp = c.w + c.panels[3 * p]
            n_lo, n_hi = n, n + 1
            oh_lo, oh_hi = rb * c.rows, min(d.OH, (rb + 1) * c.rows)
            ow_lo, ow_hi = s * d.seg, min(d.OW, (s + 1) * d.seg)
        else:  # item = panel: pack it, then every image and pixel
            if c.panels[3 * p + 2] > 0:
                _pack_dense_panel(c.raw_w, c.oc, c.icg, c.ocg, d.kh, d.kw, p,
                                  c.panels[3 * p + 1], c.panels[3 * p + 2], scratch + _BIAS_TMP)
            wp = scratch + _BIAS_TMP
            n_lo, n_hi = 0, c.batch
            oh_lo, oh_hi, ow_lo, ow_hi = 0, d.OH, 0, d.OW
        for n in range(n_lo, n_hi):
            _conv_dense_item(c.x, wp, c.panels[3 * p + 1], c.panels[3 * p + 2], bias, c.y, d,
                             n, oh_lo, oh_hi, ow_lo, ow_hi, p, &c.ep, a_ptrs, b_ptrs,
                             bcp if c.w != NULL else NULL, c.bcast_floats,
                             c.w_rows + p * c.w_rows_panel if c.w_rows != NULL else NULL)


cdef void _conv_dense_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Items (image, block of output rows, row segment, panel), panels innermost so that
    consecutive items of a claim share their input rows; with a run-time weight, whole
    panels, each packed once."""
    cdef const _ConvArgs *c = <const _ConvArgs *>args
    cdef Py_ssize_t begin, end
    cdef int calls = 0
    cdef float *scratch
    cdef const float **a_ptrs
    cdef _BcastRows bc
    cdef _BcastRows *bcp = NULL
    if nthreads > c.max_threads:  # a larger team than the scratch was made for
        if tid >= c.max_threads:
            return
        nthreads = c.max_threads
    a_ptrs = c.ptrs + tid * 2 * c.cap
    scratch = c.scratch + tid * c.scratch_floats
    if c.bcast_off >= 0:  # empty at every run: x may hold a new input
        bc.data = scratch + c.bcast_off
        bc.n = -1
        bcp = &bc
    while ppl_next_items(<ppl_item_queue *>&c.queue, c.nitems, c.claim, tid, nthreads,
                         &calls, &begin, &end):
        _conv_dense_items(c, begin, end, scratch, a_ptrs, a_ptrs + c.cap, bcp)


cdef void _conv_dw_slab_item(const _ConvArgs *c, Py_ssize_t item, float *scratch,
                             float *slab) noexcept nogil:
    """Item (image, channel block, block of c.rows output rows) of a depthwise conv on the
    slab kernel: its input rows copied with their padding into slab, then every row."""
    cdef const _ConvDims *d = &c.d
    cdef Py_ssize_t rb = item % c.nrowblk, rest = item // c.nrowblk
    cdef Py_ssize_t cb = rest % d.ocb, n = rest // d.ocb
    cdef Py_ssize_t oh_lo = rb * c.rows, oh_hi = min(d.OH, (rb + 1) * c.rows)
    cdef Py_ssize_t taps = <Py_ssize_t>d.kh * d.kw
    cdef const float *bias = _item_bias(c, cb * PPL_CB, PPL_CB, scratch)
    cdef const float *wp
    cdef float *y_p = c.y + ((n * d.ocb + cb) * d.OH + oh_lo) * d.OW * PPL_CB
    if c.w != NULL:
        wp = c.w + cb * taps * PPL_CB
    else:
        _pack_dw_block(c.raw_w, c.oc, taps, cb, scratch + _BIAS_TMP)
        wp = scratch + _BIAS_TMP
    ppl_dwc_fill(c.x + (n * d.icb + cb) * d.H * d.W * PPL_CB, d.H, d.W, oh_lo * d.sh - d.pt,
                 (oh_hi - oh_lo - 1) * d.sh + d.kh, d.pl, c.wp, slab)
    ppl_dwc_rows(d.kh, d.sh, c.ep.post_op, slab, c.wp, oh_hi - oh_lo, d.OW, wp, bias, y_p,
                 c.ep.p0, c.ep.p1)
    if c.ep.chain != NULL:  # the rest of the chain on the rows just written
        ppl_post_chain_tile(&c.chain, c.ep.chain_first, y_p, PPL_CB, 0,
                            (oh_hi - oh_lo) * d.OW, PPL_CB, cb * PPL_CB)


cdef void _conv_dw_items(const _ConvArgs *c, Py_ssize_t begin, Py_ssize_t end,
                        float *scratch, float *gathered) noexcept nogil:
    """Items [begin, end) of a depthwise conv step, with one share's scratch (gathered: its
    plane, slab or zero row)."""
    cdef const _ConvDims *d = &c.d
    cdef Py_ssize_t item, rest, oh, oh_lo, oh_hi, cb, n, lane, ci, hw, valid
    cdef Py_ssize_t plane = d.H * d.W * PPL_CB, taps = <Py_ssize_t>d.kh * d.kw
    cdef Py_ssize_t lane_src[PPL_CB]  # a channel multiplier's lanes: offsets into x
    cdef const float *x_p
    cdef const float *wp
    cdef const float *bias
    cdef float *y_p
    cdef bint whole = c.mult > 1
    for item in range(begin, end):
        if c.fixed == 2:
            _conv_dw_slab_item(c, item, scratch, gathered)
            continue
        if whole:
            oh_lo, oh_hi, rest = 0, d.OH, item
        else:
            oh_lo = item % d.OH
            oh_hi, rest = oh_lo + 1, item // d.OH
        cb = rest % d.ocb
        n = rest // d.ocb
        bias = _item_bias(c, cb * PPL_CB, PPL_CB, scratch)
        if c.w != NULL:
            wp = c.w + cb * taps * PPL_CB
        else:
            _pack_dw_block(c.raw_w, c.oc, taps, cb, scratch + _BIAS_TMP)
            wp = scratch + _BIAS_TMP
        if whole:  # lane o of the block reads input channel o // mult
            # Pixel by pixel, each pixel's lanes from its (at most two) input blocks: lane by
            # lane, a whole plane per lane, read every cache line of the input 16 times.
            valid = min(<Py_ssize_t>PPL_CB, c.oc - cb * PPL_CB)
            for lane in range(valid):
                ci = (cb * PPL_CB + lane) // c.mult
                lane_src[lane] = (n * d.icb + ci // PPL_CB) * plane + ci % PPL_CB
            for hw in range(d.H * d.W):
                for lane in range(valid):
                    gathered[hw * PPL_CB + lane] = c.x[lane_src[lane] + hw * PPL_CB]
                for lane in range(valid, PPL_CB):
                    gathered[hw * PPL_CB + lane] = 0
            x_p = gathered
        else:
            x_p = c.x + (n * d.icb + cb) * plane
        y_p = c.y + (n * d.ocb + cb) * d.OH * d.OW * PPL_CB
        for oh in range(oh_lo, oh_hi):
            if c.fixed:
                ppl_dwc_row(d.kh, d.sh, c.ep.post_op, x_p, d.H, d.W, gathered,
                            gathered + d.W * PPL_CB, oh, d.pt, d.pl, d.OW, wp, bias,
                            y_p + oh * d.OW * PPL_CB, c.ep.p0, c.ep.p1)
            else:
                ppl_dw_row(x_p, d.H, d.W, wp, bias, y_p + oh * d.OW * PPL_CB, d.OW, oh, d.kh,
                           d.kw, d.sh, d.sw, d.pt, d.pl, d.dh, d.dw, c.ep.post_op, c.ep.p0,
                           c.ep.p1)
            if c.ep.chain != NULL:  # the rest of the chain on the row just written
                ppl_post_chain_tile(&c.chain, c.ep.chain_first, y_p + oh * d.OW * PPL_CB,
                                    PPL_CB, 0, d.OW, PPL_CB, cb * PPL_CB)


cdef void _conv_depthwise_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Items (image, channel block, output row); whole planes when an item must first gather
    its input channels (channel multiplier > 1)."""
    cdef const _ConvArgs *c = <const _ConvArgs *>args
    cdef Py_ssize_t begin, end
    cdef int calls = 0
    cdef float *scratch
    if nthreads > c.max_threads:
        if tid >= c.max_threads:
            return
        nthreads = c.max_threads
    # [bias][taps x 16][plane], [slab], or [W * 16 zeros][edge: taps x 16]
    scratch = c.scratch + tid * c.scratch_floats
    while ppl_next_items(<ppl_item_queue *>&c.queue, c.nitems, c.claim, tid, nthreads,
                         &calls, &begin, &end):
        _conv_dw_items(c, begin, end, scratch,
                       scratch + _BIAS_TMP + <Py_ssize_t>c.d.kh * c.d.kw * PPL_CB)


cdef inline bint _is_pointwise(int kh, int kw, int stride_h, int stride_w, int pad_top,
                               int pad_left) noexcept:
    """A 1x1 stride-1 unpadded kernel: a GEMM over the flattened pixels (one long row)."""
    return (kh == 1 and kw == 1 and stride_h == 1 and stride_w == 1 and pad_top == 0
            and pad_left == 0)


cdef Py_ssize_t _dense_split(_ConvDims *d, bint pointwise, Py_ssize_t batch,
                             Py_ssize_t npanels, int num_threads, Py_ssize_t *nrowblk,
                             Py_ssize_t *rows, Py_ssize_t *nseg) noexcept:
    """Row blocks (nrowblk of rows rows), row segments (nseg of d.seg pixels) and the item
    count of a dense conv with a packed weight for a team of num_threads."""
    cdef Py_ssize_t want, unit
    nseg[0] = _ceil_div(d.OW, d.seg)
    # Items span several rows unless rows are long (see _ITEM_TILES).
    nrowblk[0] = _ceil_div(d.OH, _ceil_div(max(_ITEM_TILES * PPL_MR, _ITEM_PIXELS_MIN),
                                           min(d.OW, d.seg)))
    want = _ceil_div(PPL_MIN_ITEMS_PER_THREAD * num_threads, batch * npanels)
    if nrowblk[0] * nseg[0] < want:  # too few items for the team (PPL_MIN_ITEMS_PER_THREAD)
        if pointwise:
            # Shorter segments of whole narrow tiles (2 * PPL_MR pixels) from pixel 0: the
            # tiles, and so every output's bits, are those of one segment.
            unit = 2 * PPL_MR
            d.seg = unit * max(<Py_ssize_t>1, _ceil_div(d.OW, unit) // want)
            nseg[0] = _ceil_div(d.OW, d.seg)
        else:
            nrowblk[0] = min(d.OH, _ceil_div(want, nseg[0]))
    rows[0] = _ceil_div(d.OH, nrowblk[0])
    nrowblk[0] = _ceil_div(d.OH, rows[0])
    return batch * nrowblk[0] * nseg[0] * npanels


def conv_dense_work_items(Py_ssize_t batch, int in_c, int out_c, Py_ssize_t OH, Py_ssize_t OW,
                          int kh, int kw, int stride_h, int stride_w, int pad_top,
                          int pad_left, int num_threads):
    """The work items of make_conv2d_n16cx_step's step (its Step.work_items) for a group-1
    conv of these shapes with a packed weight and a team of num_threads: for choosing an
    algorithm before any step is made."""
    cdef _ConvDims d
    d.OH, d.OW, d.seg = OH, OW, _seg_pixels()
    cdef bint pointwise = _is_pointwise(kh, kw, stride_h, stride_w, pad_top, pad_left)
    if pointwise:
        d.OW, d.OH = OH * OW, 1
    cdef Py_ssize_t npanels = _ceil_div(_ceil_div(out_c, PPL_CB) * PPL_CB, PPL_NB)
    cdef Py_ssize_t nrowblk, rows, nseg
    return _dense_split(&d, pointwise, batch, npanels, max(1, num_threads), &nrowblk, &rows,
                        &nseg)


def make_conv2d_n16cx_step(size_t x, size_t y, Py_ssize_t batch, int in_c, int out_c,
                           int group, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH,
                           Py_ssize_t OW, int kh, int kw, int stride_h, int stride_w,
                           int pad_top, int pad_left, int dil_h, int dil_w, int post_op,
                           float p0, float p1, int num_threads, *, packed_w=None,
                           size_t w=0, bias=None, size_t b=0, post_chain=(), keep=(),
                           bint x_planar=False):
    """The step computing y = post_op(conv2d(x, W, groups=group) + bias), x and y in N16CX
    at addresses x (N, ceil(in_c/16), H, W, 16) and y (N, ceil(out_c/16), OH, OW, 16).

    W: packed_w from conv_pack_weight, or the address w of a raw (OC, IC/group, KH, KW)
    weight computed at run time.  Bias: an array of out_c values, or the address b of one
    computed at run time, or neither.  Memory at addresses outlives the step (``keep``).
    Post-ops: post_op (p0, p1), then the chain post_chain (_post_chain_fp32.pxi) on y;
    per-channel operands have out_c values, per-element ones are N16CX like y.

    x_planar: x is NCHW (N, in_c, H, W) instead, for group 1 and in_c < 16 (an image's first
    conv, which then needs no Reorder to a mostly-padding N16CX copy)."""
    if min(stride_h, stride_w, dil_h, dil_w) < 1 or min(pad_top, pad_left) < 0:
        raise ValueError("make_conv2d_n16cx_step: strides and dilations must be >= 1, "
                         "pads >= 0")
    if post_op not in _POST_OPS:
        raise ValueError(f"make_conv2d_n16cx_step: unknown post_op {post_op}; expected one "
                         f"of {sorted(_POST_OPS)} (post_ops.PostOp)")
    if group < 1 or in_c % group or out_c % group or min(in_c, out_c, kh, kw) < 1:
        raise ValueError(f"make_conv2d_n16cx_step: bad channels in_c={in_c} out_c={out_c} "
                         f"group={group} or kernel {kh}x{kw}")
    if min(batch, H, W, OH, OW) < 1:
        raise ValueError(f"make_conv2d_n16cx_step: empty x or y (batch={batch} H={H} W={W} "
                         f"OH={OH} OW={OW}): make no step")
    if (packed_w is None) == (w == 0):
        raise ValueError("make_conv2d_n16cx_step: give packed_w or the address w, not both")
    if bias is not None and b:
        raise ValueError("make_conv2d_n16cx_step: give bias or the address b, not both")
    if packed_w is not None:
        if (packed_w["oc"] != out_c or packed_w["ic"] != in_c or packed_w["group"] != group
                or packed_w["kh"] != kh or packed_w["kw"] != kw):
            raise ValueError(
                f"make_conv2d_n16cx_step: packed weight is for oc={packed_w['oc']} "
                f"ic={packed_w['ic']} group={packed_w['group']} kernel="
                f"{packed_w['kh']}x{packed_w['kw']}, called with oc={out_c} ic={in_c} "
                f"group={group} kernel={kh}x{kw}: repack the weight")
        layout = packed_w
    else:
        layout = _conv_layout(out_c, in_c // group, group, kh, kw)
    num_threads = max(1, num_threads)
    cdef bint depthwise = layout["kind"] == "depthwise"
    if x_planar and (depthwise or group != 1 or in_c >= PPL_CB):
        raise ValueError(f"make_conv2d_n16cx_step: a planar (NCHW) x needs group 1 and fewer "
                         f"than 16 input channels, got in_c={in_c} group={group}")
    cdef _ConvDims d
    d.icb = _ceil_div(in_c, PPL_CB)
    d.ocb = _ceil_div(out_c, PPL_CB)
    d.H, d.W, d.OH, d.OW = H, W, OH, OW
    d.kh, d.kw, d.sh, d.sw = kh, kw, stride_h, stride_w
    d.pt, d.pl, d.dh, d.dw = pad_top, pad_left, dil_h, dil_w
    # With fewer than 16 input channels (an RGB first layer) the rest of the block is
    # padding: reduce over the real channels only (their weight rows come first).
    d.kc = in_c if d.icb == 1 else PPL_CB
    d.planar = x_planar
    d.ps = 1 if x_planar else PPL_CB
    d.seg = _seg_pixels()
    cdef bint pointwise = (not depthwise and OH == H and OW == W
                           and _is_pointwise(kh, kw, stride_h, stride_w, pad_top, pad_left))
    if pointwise:
        # A pointwise conv is one long row of H*W pixels: no row-end tails.
        d.W = d.OW = H * W
        d.H = d.OH = 1

    # Bias padded with zeros to whole panels: padding lanes come out finite (post_op(0)).
    bias_pad = None
    if bias is not None or not b:
        bias_pad = numpy.zeros(_ceil_div(d.ocb * PPL_CB, PPL_NB) * PPL_NB, dtype=numpy.float32)
    if bias is not None:
        bias = numpy.asarray(bias, dtype=numpy.float32).reshape(-1)
        if bias.shape[0] != out_c:
            raise ValueError(f"make_conv2d_n16cx_step: bias must have {out_c} values, got "
                             f"{bias.shape[0]}")
        bias_pad[:out_c] = bias

    cdef Py_ssize_t npanels = 0, max_nicb = 0, nitems, cap = 1
    cdef Py_ssize_t bcast_off = -1, bcast_floats = 0    # sse: _BcastRows in the scratch
    cdef Py_ssize_t scratch_floats = _BIAS_TMP  # a run-time bias
    cdef Py_ssize_t taps = <Py_ssize_t>kh * kw
    cdef Py_ssize_t mult = out_c // in_c if depthwise else 1
    cdef Py_ssize_t nrowblk = 1, rows = 1, nseg = 1
    # Square 3x3 / 5x5, stride 1 or 2, no dilation: the kernel of _dwconv_fp32.h; on narrow
    # planes through a slab, items of as many output rows as fit _DW_SLAB_FLOATS (at least
    # one); on wide ones row by row, with a row of zeros and a K x K edge buffer.
    cdef int fixed = 0
    if (depthwise and mult == 1 and kh == kw and stride_h == stride_w and dil_h == 1
            and dil_w == 1 and ppl_dwc_supported(kh, stride_h)):
        fixed = 2 if W <= PPL_DWC_SLAB_W else 1
    cdef Py_ssize_t wp = 0
    if fixed == 2:
        scratch_floats += taps * PPL_CB
        wp = ppl_dwc_slab_width(W, pad_left, OW, kw, stride_w)
        rows = max(<Py_ssize_t>1, min(OH, (_DW_SLAB_FLOATS // (wp * PPL_CB) - kh)
                                      // stride_h + 1))
        nrowblk = _ceil_div(OH, rows)
        # at least PPL_MIN_ITEMS_PER_THREAD items per thread where the rows allow (each pixel is
        # summed alone: no cut changes a bit)
        nrowblk = max(nrowblk, min(OH, _ceil_div(PPL_MIN_ITEMS_PER_THREAD * num_threads,
                                                 batch * d.ocb)))
        rows = _ceil_div(OH, nrowblk)
        nrowblk = _ceil_div(OH, rows)
        scratch_floats += ((rows - 1) * stride_h + kh) * wp * PPL_CB
        nitems = batch * d.ocb * nrowblk
    elif fixed == 1:
        scratch_floats += taps * PPL_CB + W * PPL_CB + taps * PPL_CB
        nitems = batch * d.ocb * OH
    elif depthwise:
        scratch_floats += taps * PPL_CB
        if mult > 1:
            scratch_floats += H * W * PPL_CB
            nitems = batch * d.ocb
        else:
            nitems = batch * d.ocb * OH
    else:
        npanels = layout["panels"].shape[0]
        max_nicb = layout["max_blocks"]
        cap = max(<Py_ssize_t>1, taps * (in_c if x_planar else max_nicb))
        if w:
            scratch_floats += taps * max_nicb * PPL_CB * PPL_NB
            nitems = npanels
        else:
            nitems = _dense_split(&d, pointwise, batch, npanels, num_threads, &nrowblk, &rows,
                                  &nseg)
            if PPL_A_BCAST and not x_planar and taps > 1:
                bcast_floats = (min(H, (rows - 1) * stride_h + (kh - 1) * dil_h + 1)
                                * min(W, (min(d.seg, OW) - 1) * stride_w + (kw - 1) * dil_w + 1)
                                * max_nicb * PPL_CB * PPL_VLEN)
                if bcast_floats <= _BCAST_FLOATS:
                    bcast_off = _ceil_div(scratch_floats, 16) * 16
                    scratch_floats = bcast_off + bcast_floats
                else:
                    bcast_floats = 0
    # Each thread's slices on cache lines of their own (per_thread.py): whole lines.
    scratch_floats = _ceil_div(scratch_floats, 16) * 16
    scratch, _ = per_thread_buffer(num_threads, scratch_floats, numpy.float32)
    cap = _ceil_div(cap, 4) * 4
    ptrs, _ = per_thread_buffer(num_threads, 2 * cap, numpy.uintp)

    w_rows = None
    if x_planar and dil_w == 1 and packed_w is not None:
        w_rows = _planar_row_weights(packed_w["data"].reshape(-1), packed_w["panels"], kh, kw,
                                     in_c)

    cdef double flops = 2.0 * batch * out_c * OH * OW * taps * (in_c // group)
    cdef Step step = new_step(_conv_depthwise_step if depthwise else _conv_dense_step,
                              sizeof(_ConvArgs),
                              flops >= (_PARALLEL_DW_FLOPS if depthwise else _PARALLEL_FLOPS)
                              or (not depthwise and
                                  4.0 * out_c * taps * (in_c // group) >= _PARALLEL_W_BYTES),
                              (keep, layout, bias_pad, scratch, ptrs, w_rows))
    cdef _ConvArgs *c = <_ConvArgs *>step.args
    cdef float[::1] scratch_v = scratch
    cdef size_t[::1] ptrs_v = ptrs
    cdef const float[::1] bias_v
    cdef const float[::1] wv
    cdef const float[:, ::1] w_rows_v
    cdef const long long[:, ::1] panels_v
    c.x = <const float *>x
    c.y = <float *>y
    c.d = d
    c.batch = batch
    c.depthwise = depthwise
    c.w = NULL
    if packed_w is not None:
        wv = packed_w["data"].reshape(-1)
        c.w = &wv[0]
    c.raw_w = <const float *>w
    c.w_rows, c.w_rows_panel = NULL, 0
    if w_rows is not None:
        w_rows_v = w_rows
        c.w_rows = &w_rows_v[0, 0]
        c.w_rows_panel = w_rows.shape[1]
    c.panels = NULL
    if not depthwise:
        panels_v = layout["panels"]
        c.panels = &panels_v[0, 0]
    c.npanels, c.max_nicb = npanels, max_nicb
    c.oc, c.icg, c.ocg, c.mult = out_c, in_c // group, out_c // group, mult
    c.bias = NULL
    if bias_pad is not None:
        bias_v = bias_pad
        c.bias = &bias_v[0]
    c.raw_bias = <const float *>b
    _fill_post_chain(&c.chain, _full_chain(post_op, p0, p1, post_chain), y, out_c,
                     "make_conv2d_n16cx_step")
    ppl_epilogue_reset(&c.ep)
    c.ep.bias = c.bias
    # B prefetch for weights packed here (raw ones are packed by the items into warm scratch)
    if packed_w is not None and not depthwise:
        c.ep.b_prefetch = _b_prefetch_floats(packed_w["data"].nbytes)
    # Dense: a leading sum and a cheap activation on the accumulators; depthwise: any one
    # activation in ppl_dw_row.  The rest over the stored tile or row.
    _split_post_chain(&c.chain, &c.ep, not depthwise, depthwise)
    c.nrowblk, c.rows, c.nseg, c.nitems = nrowblk, rows, nseg, nitems
    step.work_items = nitems
    c.fixed, c.wp = fixed, wp
    c.ptrs = <const float **>&ptrs_v[0]
    c.cap = cap
    c.scratch = &scratch_v[0]
    c.scratch_floats = scratch_floats
    c.bcast_off, c.bcast_floats = bcast_off, bcast_floats
    c.max_threads = num_threads
    # Items are claimed as the step runs (ppl_next_items); a dense claim stays within one
    # pixel block's panels, whose items share their input rows.
    c.claim = _claim_chunk(ppl_claim_size(nitems, num_threads) if depthwise
                           else min(ppl_claim_size(nitems, num_threads), npanels))
    return step


def conv2d_n16cx_fp32(x, packed_w, bias, y, int in_c, int out_c, int group, int kh, int kw,
                      int stride_h, int stride_w, int pad_top, int pad_left, int dil_h,
                      int dil_w, int post_op, float p0, float p1, int num_threads,
                      post_chain=()):
    """y = post_op(conv2d(x, w, groups=group) + bias), x and y in N16CX; packed_w from
    conv_pack_weight, or a raw (OC, IC/group, KH, KW) float32 array."""
    cdef const float[:, :, :, :, ::1] xv = x
    cdef float[:, :, :, :, ::1] yv = y
    if (xv.shape[4] != PPL_CB or yv.shape[4] != PPL_CB or xv.shape[1] != _ceil_div(in_c, PPL_CB)
            or yv.shape[1] != _ceil_div(out_c, PPL_CB) or yv.shape[0] != xv.shape[0]):
        raise ValueError(
            f"conv2d_n16cx_fp32: expected x (N, {_ceil_div(in_c, PPL_CB)}, H, W, 16) and y "
            f"(N, {_ceil_div(out_c, PPL_CB)}, OH, OW, 16), got x "
            f"{tuple(numpy.shape(x))} and y {tuple(numpy.shape(y))}")
    if xv.shape[0] == 0 or yv.shape[2] == 0 or yv.shape[3] == 0:
        return
    cdef const float[::1] raw_v
    cdef size_t w_address = 0
    if not isinstance(packed_w, dict):
        packed_w = numpy.ascontiguousarray(packed_w, dtype=numpy.float32)
        if packed_w.shape != (out_c, in_c // group, kh, kw):
            raise ValueError(f"conv2d_n16cx_fp32: weight must be "
                             f"{(out_c, in_c // group, kh, kw)}, got {packed_w.shape}")
        raw_v = packed_w.reshape(-1)
        w_address = <size_t>&raw_v[0]
    step = make_conv2d_n16cx_step(
        <size_t>&xv[0, 0, 0, 0, 0], <size_t>&yv[0, 0, 0, 0, 0], xv.shape[0], in_c, out_c,
        group, xv.shape[2], xv.shape[3], yv.shape[2], yv.shape[3], kh, kw, stride_h, stride_w,
        pad_top, pad_left, dil_h, dil_w, post_op, p0, p1, num_threads,
        packed_w=None if w_address else packed_w, w=w_address, bias=bias,
        post_chain=post_chain, keep=(x, y, packed_w))
    run_steps([step], num_threads)
