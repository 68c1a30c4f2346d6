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
#
# Groups are folded into the weights: panel p's output channels read only the input-channel
# blocks of the groups they belong to, and the weights of the other groups' channels inside
# those blocks are zero (block-diagonal, but only across the band a panel touches).  Group
# 1 is the special case of one band; a 1x1 stride-1 unpadded conv is a GEMM over the
# flattened H*W pixels.
#
# Depthwise path (one input channel per group): each output channel block is vectorised
# over its 16 channels (ppl_dw_row); a channel multiplier > 1 first gathers each output
# channel's input channel into an N16CX tensor of out_c channels.
#
# Packed weights are a dict (layout private to this module's tier):
#   kind "dense":     data float32 flat; panels int64 (npanels, 3) = (offset into data,
#                     first input block, number of input blocks); the block of panel p is
#                     [kh][kw][input block][16 input channels][PPL_NB output channels];
#                     max_blocks the largest number of input blocks of a panel.
#   kind "depthwise": data float32 (ceil(oc/16), kh, kw, 16), zero past oc.

from cython.parallel cimport parallel, prange
from libc.stdlib cimport free, malloc

import numpy

include "_brgemm_fp32.pxi"

cdef enum:
    # Output pixels a work item covers at least (rows permitting): a panel's weights, read
    # from L2, then serve many pixels, and border columns get tiles several rows tall.
    _ITEM_PIXELS = 32 * PPL_MR

ctypedef struct _ConvDims:
    Py_ssize_t icb, ocb            # channel blocks of x and y
    Py_ssize_t H, W, OH, OW
    int kh, kw, sh, sw, pt, pl, dh, dw
    int kc                         # K per batch element: 16, or in_c when one block holds all
    Py_ssize_t seg                 # output pixels per work item along a row


def conv_pack_weight(w, int group):
    """Pack an ONNX conv weight (OC, IC/group, KH, KW) for conv2d_n16cx_fp32."""
    w = numpy.ascontiguousarray(w, dtype=numpy.float32)
    if w.ndim != 4 or group < 1 or w.shape[0] % group != 0:
        raise ValueError(f"conv_pack_weight: expected (OC, IC/group, KH, KW) with OC divisible "
                         f"by group={group}, got {w.shape}")
    oc, icg, kh, kw = w.shape
    ocg = oc // group
    ocb = (oc + PPL_CB - 1) // PPL_CB
    info = {"oc": oc, "ic": icg * group, "group": group, "kh": kh, "kw": kw}
    if icg == 1:
        data = numpy.zeros((ocb * PPL_CB, kh, kw), dtype=numpy.float32)
        data[:oc] = w[:, 0]
        data = data.reshape(ocb, PPL_CB, kh, kw).transpose(0, 2, 3, 1)
        return {"kind": "depthwise", "data": numpy.ascontiguousarray(data), **info}
    npanels = (ocb * PPL_CB + PPL_NB - 1) // PPL_NB
    panels = numpy.zeros((npanels, 3), dtype=numpy.int64)
    blocks = []
    offset = 0
    for p in range(npanels):
        oc_lo, oc_hi = p * PPL_NB, min(oc, (p + 1) * PPL_NB)
        if oc_lo >= oc:  # only padding channels: an empty batch gives bias (zero) lanes
            panels[p] = (offset, 0, 0)
            continue
        g_lo, g_hi = oc_lo // ocg, (oc_hi - 1) // ocg
        icb_lo = g_lo * icg // PPL_CB
        nicb = ((g_hi + 1) * icg + PPL_CB - 1) // PPL_CB - icb_lo
        blk = numpy.zeros((kh, kw, nicb * PPL_CB, PPL_NB), dtype=numpy.float32)
        for g in range(g_lo, g_hi + 1):
            o0, o1 = max(oc_lo, g * ocg), min(oc_hi, (g + 1) * ocg)
            c0 = g * icg - icb_lo * PPL_CB
            blk[:, :, c0:c0 + icg, o0 - oc_lo:o1 - oc_lo] = w[o0:o1].transpose(2, 3, 1, 0)
        panels[p] = (offset, icb_lo, nicb)
        blocks.append(blk.reshape(-1))
        offset += blk.size
    data = numpy.concatenate(blocks) if blocks else numpy.zeros(1, dtype=numpy.float32)
    return {"kind": "dense", "data": data, "panels": panels,
            "max_blocks": max(1, int(panels[:, 2].max())), **info}


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


cdef Py_ssize_t _gather_taps(const _ConvDims *d, const float *x_n, const float *wp,
                             Py_ssize_t nicb, Py_ssize_t oh, Py_ssize_t ow,
                             const float **a_ptrs, const float **b_ptrs) noexcept nogil:
    """The brgemm batch of output pixel (oh, ow): A and B blocks of every (tap, input block)
    whose tap lands inside the image; returns its length."""
    cdef Py_ssize_t plane = d.H * d.W * PPL_CB
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
            for c in range(nicb):
                a_ptrs[nb] = x_n + c * plane + (ih * d.W + iw) * PPL_CB
                b_ptrs[nb] = wp + ((kh * d.kw + kw) * nicb + c) * PPL_CB * PPL_NB
                nb += 1
    return nb


cdef void _brgemm_run(Py_ssize_t count, Py_ssize_t nb, const float **a_ptrs,
                      const float **b_ptrs, Py_ssize_t lda, float *c, Py_ssize_t ldc,
                      Py_ssize_t cbs, int n_valid, int kc, const ppl_epilogue *ep) noexcept nogil:
    """count pixels whose A rows are lda apart and C rows ldc apart, MR at a time; the batch
    built for the first pixel is shifted along."""
    cdef int mm
    cdef Py_ssize_t i
    while count > 0:
        mm = <int>min(<Py_ssize_t>PPL_MR, count)
        ppl_brgemm(mm, n_valid, nb, a_ptrs, b_ptrs, kc, lda, c, ldc, cbs, ep)
        for i in range(nb):
            a_ptrs[i] += mm * lda
        c += mm * ldc
        count -= mm


cdef void _conv_dense_item(const float *x, const float *wdata, const long long *panels,
                           float *y, const _ConvDims *d, Py_ssize_t n, Py_ssize_t oh_lo,
                           Py_ssize_t oh_hi, Py_ssize_t ow_begin, Py_ssize_t ow_end,
                           Py_ssize_t p, const ppl_epilogue *ep_base, const float **a_ptrs,
                           const float **b_ptrs) noexcept nogil:
    """y[n, panel p, oh_lo:oh_hi, ow_begin:ow_end] as brgemm tiles over (tap, input block)
    batches: MR pixels along a row where every tap fits, MR pixels down a border (or
    remainder) column where every kernel row fits, and the corners pixel by pixel."""
    cdef const float *wp = wdata + panels[3 * p]
    cdef Py_ssize_t nicb = panels[3 * p + 2]
    cdef Py_ssize_t col0 = p * PPL_NB
    cdef int n_valid = <int>min(<Py_ssize_t>PPL_NB, d.ocb * PPL_CB - col0)
    cdef Py_ssize_t cbs = d.OH * d.OW * PPL_CB
    # Origin of this panel's output plane; pixel (oh, ow) at + (oh * OW + ow) * 16.
    cdef float *y_p = y + (n * d.ocb + col0 // PPL_CB) * cbs + col0 % PPL_CB
    cdef const float *x_n = x + (n * d.icb + panels[3 * p + 1]) * d.H * d.W * PPL_CB
    cdef Py_ssize_t ow_lo, ow_hi, r_lo, r_hi, oh, ow, nb
    cdef ppl_epilogue ep = ep_base[0]
    if ep.bias != NULL:
        ep.bias = ep.bias + col0

    _interior_cols(d, &ow_lo, &ow_hi)
    ow_lo = max(ow_lo, ow_begin)
    ow_hi = min(ow_hi, ow_end)
    if ow_lo >= ow_hi:
        ow_lo = ow_hi = ow_end
    _interior_rows(d, &r_lo, &r_hi)
    r_lo = max(r_lo, oh_lo)
    r_hi = min(r_hi, oh_hi)
    if r_lo >= r_hi:
        r_lo = r_hi = oh_hi

    # The last (ow_hi - ow_lo) % MR interior columns would make a short tile in every row;
    # where the rows allow, they go down their columns in tall tiles instead (a 7-wide
    # output becomes 6-wide row tiles and one 7-tall column).
    cdef Py_ssize_t rest = (ow_hi - ow_lo) % PPL_MR
    cdef Py_ssize_t ow_split = ow_hi
    if rest > 0 and rest * _ceil_div(r_hi - r_lo, PPL_MR) < r_hi - r_lo:
        ow_split = ow_hi - rest

    # Row interiors (every tap along W fits; rows may lose kernel rows at the top/bottom).
    cdef Py_ssize_t end
    for oh in range(oh_lo, oh_hi):
        end = ow_split if r_lo <= oh < r_hi else ow_hi
        if ow_lo < end:
            nb = _gather_taps(d, x_n, wp, nicb, oh, ow_lo, a_ptrs, b_ptrs)
            _brgemm_run(end - ow_lo, nb, a_ptrs, b_ptrs, <Py_ssize_t>d.sw * PPL_CB,
                        y_p + (oh * d.OW + ow_lo) * PPL_CB, PPL_CB, cbs, n_valid, d.kc, &ep)

    # Columns: down the column over rows whose kernel rows all fit, then the corners.
    for ow in range(ow_begin, ow_end):
        if ow_lo <= ow < ow_split:
            continue
        if r_lo < r_hi:
            nb = _gather_taps(d, x_n, wp, nicb, r_lo, ow, a_ptrs, b_ptrs)
            _brgemm_run(r_hi - r_lo, nb, a_ptrs, b_ptrs, <Py_ssize_t>d.sh * d.W * PPL_CB,
                        y_p + (r_lo * d.OW + ow) * PPL_CB, d.OW * PPL_CB, cbs, n_valid,
                        d.kc, &ep)
        if ow_lo <= ow < ow_hi:
            continue  # an interior column: its other rows were done along their rows
        for oh in range(oh_lo, oh_hi):
            if r_lo <= oh < r_hi:
                continue
            nb = _gather_taps(d, x_n, wp, nicb, oh, ow, a_ptrs, b_ptrs)
            ppl_brgemm(1, n_valid, nb, a_ptrs, b_ptrs, d.kc, 0, y_p + (oh * d.OW + ow) * PPL_CB,
                       PPL_CB, cbs, &ep)


cdef void _conv_dense(const float *x, const float *wdata, const long long *panels,
                      Py_ssize_t npanels, Py_ssize_t max_nicb, float *y,
                      Py_ssize_t batch, const _ConvDims *d, const ppl_epilogue *ep,
                      int num_threads) noexcept nogil:
    """Every (image, block of output rows, row segment, panel) is an independent work item."""
    cdef Py_ssize_t nseg = _ceil_div(d.OW, d.seg)
    # Items span several rows unless rows are long (see _ITEM_PIXELS).
    cdef Py_ssize_t nrowblk = _ceil_div(d.OH, _ceil_div(_ITEM_PIXELS, min(d.OW, d.seg)))
    cdef Py_ssize_t rows = _ceil_div(d.OH, nrowblk)
    cdef Py_ssize_t nitems = batch * nrowblk * nseg * npanels
    cdef Py_ssize_t cap = max(<Py_ssize_t>1, <Py_ssize_t>d.kh * d.kw * max_nicb)
    cdef Py_ssize_t item, rest, p, s, rb, n
    cdef const float **a_ptrs = NULL
    cdef const float **b_ptrs = NULL
    with parallel(num_threads=max(1, num_threads)):
        # Per-thread batch pointer arrays.
        a_ptrs = <const float **>malloc(cap * sizeof(float *))
        b_ptrs = <const float **>malloc(cap * sizeof(float *))
        if a_ptrs != NULL and b_ptrs != NULL:
            # Panels innermost: consecutive items on one thread share their input rows.
            for item in prange(nitems, schedule="static"):
                p = item % npanels
                rest = item // npanels
                s = rest % nseg
                rest = rest // nseg
                rb = rest % nrowblk
                n = rest // nrowblk
                _conv_dense_item(x, wdata, panels, y, d, n, rb * rows,
                                 min(d.OH, (rb + 1) * rows), s * d.seg,
                                 min(d.OW, (s + 1) * d.seg), p, ep, a_ptrs, b_ptrs)
        free(a_ptrs)
        free(b_ptrs)


cdef void _conv_depthwise(const float *x, const float *wdata, const float *bias, float *y,
                          Py_ssize_t batch, const _ConvDims *d, int post_op, float p0,
                          float p1, int num_threads) noexcept nogil:
    """y[n, cb, oh] = dw(x[n, cb]) per (image, channel block, output row)."""
    cdef Py_ssize_t nitems = batch * d.ocb * d.OH
    cdef Py_ssize_t item, oh, cb, n
    for item in prange(nitems, num_threads=max(1, num_threads), schedule="static"):
        oh = item % d.OH
        cb = (item // d.OH) % d.ocb
        n = item // (d.OH * d.ocb)
        ppl_dw_row(x + (n * d.icb + cb) * d.H * d.W * PPL_CB, d.H, d.W,
                   wdata + cb * d.kh * d.kw * PPL_CB, bias + cb * PPL_CB,
                   y + ((n * d.ocb + cb) * d.OH + oh) * d.OW * PPL_CB, d.OW, oh, d.kh, d.kw,
                   d.sh, d.sw, d.pt, d.pl, d.dh, d.dw, post_op, p0, p1)


cdef object _gather_channels(x, Py_ssize_t in_c, Py_ssize_t out_c, Py_ssize_t mult):
    """N16CX copy of x with out_c channels, channel o taken from input channel o // mult."""
    n, icb, h, w, _ = x.shape
    logical = x.transpose(0, 1, 4, 2, 3).reshape(n, icb * PPL_CB, h, w)
    ocb = _ceil_div(out_c, PPL_CB)
    src = numpy.zeros((n, ocb * PPL_CB, h, w), dtype=numpy.float32)
    src[:, :out_c] = logical[:, numpy.arange(out_c) // mult]
    return numpy.ascontiguousarray(src.reshape(n, ocb, PPL_CB, h, w).transpose(0, 1, 3, 4, 2))


def conv2d_n16cx_fp32(x, packed_w, bias, y, int in_c, int out_c, int group, int kh, int kw,
                      int stride_h, int stride_w, int pad_top, int pad_left, int dil_h,
                      int dil_w, int post_op, float p0, float p1, int num_threads):
    """y = post_op(conv2d(x, w, groups=group) + bias), x and y in N16CX."""
    if (packed_w["oc"] != out_c or packed_w["ic"] != in_c or packed_w["group"] != group
            or packed_w["kh"] != kh or packed_w["kw"] != kw):
        raise ValueError(
            f"conv2d_n16cx_fp32: packed weight is for oc={packed_w['oc']} ic={packed_w['ic']} "
            f"group={packed_w['group']} kernel={packed_w['kh']}x{packed_w['kw']}, called with "
            f"oc={out_c} ic={in_c} group={group} kernel={kh}x{kw}: repack the weight")
    if min(stride_h, stride_w, dil_h, dil_w) < 1 or min(pad_top, pad_left) < 0:
        raise ValueError("conv2d_n16cx_fp32: strides and dilations must be >= 1, pads >= 0")
    if post_op < 0 or post_op > 4:
        raise ValueError(f"conv2d_n16cx_fp32: unknown post_op {post_op}")
    depthwise = packed_w["kind"] == "depthwise"
    if depthwise and out_c != in_c:
        x = _gather_channels(numpy.asarray(x), in_c, out_c, out_c // in_c)
    cdef const float[:, :, :, :, ::1] xv = x
    cdef float[:, :, :, :, ::1] yv = y
    cdef _ConvDims d
    d.icb = xv.shape[1]
    d.ocb = yv.shape[1]
    d.H, d.W, d.OH, d.OW = xv.shape[2], xv.shape[3], yv.shape[2], yv.shape[3]
    d.kh, d.kw, d.sh, d.sw = kh, kw, stride_h, stride_w
    d.pt, d.pl, d.dh, d.dw = pad_top, pad_left, dil_h, dil_w
    cdef Py_ssize_t batch = xv.shape[0]
    expect_icb = _ceil_div(out_c if depthwise else in_c, PPL_CB)
    if (xv.shape[4] != PPL_CB or yv.shape[4] != PPL_CB or d.icb != expect_icb
            or d.ocb != _ceil_div(out_c, PPL_CB) or yv.shape[0] != batch):
        raise ValueError(
            f"conv2d_n16cx_fp32: expected x (N, {_ceil_div(in_c, PPL_CB)}, H, W, 16) and y "
            f"(N, {_ceil_div(out_c, PPL_CB)}, OH, OW, 16), got x "
            f"{tuple(numpy.shape(x))} and y {tuple(numpy.shape(y))}")
    if batch == 0 or d.OH == 0 or d.OW == 0:
        return

    # Bias padded with zeros to whole panels: padding lanes come out finite (post_op(0)).
    cdef Py_ssize_t width = max(d.ocb * PPL_CB, _ceil_div(d.ocb * PPL_CB, PPL_NB) * PPL_NB)
    bias_pad = numpy.zeros(width, dtype=numpy.float32)
    if bias is not None:
        bias = numpy.asarray(bias, dtype=numpy.float32).reshape(-1)
        if bias.shape[0] != out_c:
            raise ValueError(f"conv2d_n16cx_fp32: bias must have {out_c} values, got "
                             f"{bias.shape[0]}")
        bias_pad[:out_c] = bias
    cdef const float[::1] bv = bias_pad
    cdef const float[::1] wv = packed_w["data"].reshape(-1)

    if depthwise:
        with nogil:
            _conv_depthwise(&xv[0, 0, 0, 0, 0], &wv[0], &bv[0], &yv[0, 0, 0, 0, 0], batch, &d,
                            post_op, p0, p1, num_threads)
        return

    cdef const long long[:, ::1] panels = packed_w["panels"]
    cdef Py_ssize_t max_nicb = packed_w["max_blocks"]
    cdef ppl_epilogue ep
    ep.alpha = 1.0
    ep.beta = 0.0
    ep.bias = &bv[0]
    ep.addend = NULL
    ep.accumulate = 0
    ep.post_op = post_op
    ep.p0 = p0
    ep.p1 = p1
    if (kh == 1 and kw == 1 and stride_h == 1 and stride_w == 1 and pad_top == 0
            and pad_left == 0 and d.OH == d.H and d.OW == d.W):
        # A pointwise conv is one long row of H*W pixels: no row-end tails.
        d.W = d.OW = d.H * d.W
        d.H = d.OH = 1
    # With fewer than 16 input channels (an RGB first layer) the rest of the block is
    # padding: reduce over the real channels only (their weight rows come first).
    d.kc = in_c if d.icb == 1 else PPL_CB
    # Row segments of a few dozen tiles: the input they read stays in L2 across panels.
    d.seg = PPL_MR * 16
    with nogil:
        _conv_dense(&xv[0, 0, 0, 0, 0], &wv[0], &panels[0, 0], panels.shape[0], max_nicb,
                    &yv[0, 0, 0, 0, 0], batch, &d, &ep, num_threads)
