# Transposed convolution (ConvTranspose) for float32 as a GEMM and a scatter, in one step:
#
#     col[p, (tap, o)] = sum_ic x[ic, p] * W[ic, o, tap]          (the brgemm microkernel)
#     y[o, p * stride - pad + tap * dilation] += col[p, (tap, o)]  (col2im, with bias first)
#
# per image n and group g.  Written once, included by _deconv_fp32_{avx512,fma,sse}.pyx after
# each defines PPL_VLEN.  Up to three spatial axes (D, H, W); 1-D and 2-D have size-1 leading
# axes.  x and y are NDARRAY or N16CX: a channel c lives at  chan[c] + pixel * pix  floats
# from its image (NDARRAY: chan[c] = c * pixels, pix = 1; N16CX: chan[c] = (c / 16) *
# pixels * 16 + c % 16, pix = 16), so one body serves both formats.
#
# The output channels of a group are cut into chunks of at most 16 (one N16CX block when
# aligned).  A work item is (n, g, chunk): it writes only its own output channels (bias or
# 0 first, then the scatter-adds of every input pixel), so items are independent and a
# thread count never changes the bits.  Inside an item the input pixels go by blocks of
# _PB: the block's x is gathered into a pixel-major tile (A of the GEMM, lda = IC/g), the
# microkernel multiplies it by the chunk's packed weight panels into a col tile, and col2im
# adds the tile into y.  Both tiles live in the thread's scratch.
#
# Weights are packed per (g, chunk) into panels of PPL_NB columns, column = tap * occ + o
# (occ the chunk's channel count), zero past the chunk's columns.  A constant weight is
# packed once when the kernel is made (deconv_pack_weight); a weight computed at run time is
# packed by a first step (items (g, chunk) in parallel), the GEMM step follows after the
# plan's barrier.
#
# A post-op chain (_post_chain_fp32.h, fused by passes/fuse_post_ops.py) runs on an item's
# channels once its last scatter-add is done, while the item's own output is the freshest
# in cache: in N16CX over the pixel rows of each 16-channel block piece, in NDARRAY over
# each channel plane.  The N16CX padding lanes are never touched (they stay 0).

from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy

from pplpy.engines.x86.impls.aligned import aligned_empty
from pplpy.engines.x86.impls.per_thread import per_thread_buffer
from pplpy.runtime.step import run_steps

include "_brgemm_fp32.pxi"

cdef extern from "_post_chain_fp32.h" nogil:
    void ppl_post_chain_plane(const ppl_post_chain *ch, int first, float *c, Py_ssize_t n,
                              Py_ssize_t channel)

cdef enum:
    _AXES = 3
    _OCC = 16                   # output channels per chunk at most
    _PB = 128                   # input pixels per GEMM block
    _PARALLEL_FLOPS = 1 << 20   # a smaller product runs as a serial step


ctypedef struct _DeconvArgs:
    const float *x
    float *y
    const float *w                  # raw (C, M/g, *K) weight for the pack step, else NULL
    float *packed                   # (G, nchunks, panels, ICg, NB)
    const float *bias               # NULL or OC values
    Py_ssize_t batch, group, icg, ocg, oc, oc_pad
    Py_ssize_t nchunks, panels, ldcol, taps
    Py_ssize_t size[_AXES]
    Py_ssize_t out[_AXES]
    Py_ssize_t kernel[_AXES]
    Py_ssize_t stride[_AXES]
    Py_ssize_t pad[_AXES]
    Py_ssize_t dil[_AXES]
    Py_ssize_t in_pixels, out_pixels
    const Py_ssize_t *xchan         # per input channel
    const Py_ssize_t *ychan         # per output channel, oc_pad entries
    Py_ssize_t xpix, ypix, x_image, y_image
    float *scratch
    Py_ssize_t scratch_floats
    int max_threads
    ppl_post_chain chain            # len 0: no post-ops


cdef inline Py_ssize_t _cdiv(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef void _pack_chunk(const float *w, float *dst, Py_ssize_t g, Py_ssize_t c,
                      Py_ssize_t icg, Py_ssize_t ocg, Py_ssize_t taps,
                      Py_ssize_t panels) noexcept nogil:
    """dst[panel, ic, j] = W[g*icg + ic, c*16 + o, tap] for column panel*NB + j = tap*occ + o
    (0 past the chunk's columns); dst holds this (g, c)'s panels."""
    cdef Py_ssize_t oc0 = c * _OCC
    cdef Py_ssize_t occ = min(<Py_ssize_t>_OCC, ocg - oc0)
    cdef Py_ssize_t ncols = taps * occ, ic, col, j, p, tap, o
    cdef const float *wi
    cdef float *row
    for ic in range(icg):
        wi = w + (g * icg + ic) * ocg * taps
        for p in range(panels):
            row = dst + (p * icg + ic) * PPL_NB
            for j in range(PPL_NB):
                col = p * PPL_NB + j
                if col < ncols:
                    tap = col // occ
                    o = col - tap * occ
                    row[j] = wi[(oc0 + o) * taps + tap]
                else:
                    row[j] = 0


cdef void _deconv_pack_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Pack a run-time weight: items (g, chunk) of this thread."""
    cdef const _DeconvArgs *a = <const _DeconvArgs *>args
    cdef Py_ssize_t begin, end, item
    ppl_partition(a.group * a.nchunks, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        _pack_chunk(a.w, a.packed + item * a.panels * a.icg * PPL_NB, item // a.nchunks,
                    item % a.nchunks, a.icg, a.ocg, a.taps, a.panels)


cdef void _fill_outputs(const _DeconvArgs *a, float *y_n, Py_ssize_t oc0,
                        Py_ssize_t occ) noexcept nogil:
    """y[oc0 : oc0 + occ] = bias (or 0) over every output pixel; the item holding the last
    channel also zeroes the N16CX padding lanes past it."""
    cdef Py_ssize_t o, q, oc_hi = oc0 + occ
    cdef float v
    cdef float *yc
    if oc_hi == a.oc:
        oc_hi = a.oc_pad
    for o in range(oc0, oc_hi):
        v = a.bias[o] if (a.bias != NULL and o < a.oc) else 0
        yc = y_n + a.ychan[o]
        if a.ypix == 1:
            for q in range(a.out_pixels):
                yc[q] = v
        else:
            for q in range(a.out_pixels):
                yc[q * a.ypix] = v


cdef void _col2im_block(const _DeconvArgs *a, const float *col, float *y_n, Py_ssize_t p0,
                        Py_ssize_t np_, Py_ssize_t oc0, Py_ssize_t occ) noexcept nogil:
    """Add the col tile of input pixels [p0, p0 + np_) into y's channels [oc0, oc0 + occ)."""
    cdef Py_ssize_t p, i0, i1, i2, k0, k1, k2, o0, o1, o2, tap, o, rem
    cdef Py_ssize_t base = a.ychan[oc0]
    cdef bint block16 = a.ypix == 16 and occ == 16 and a.ychan[oc0 + 15] == base + 15
    cdef const float *crow
    cdef const float *ct
    cdef float *yp
    for p in range(p0, p0 + np_):
        i2 = p % a.size[2]
        rem = p // a.size[2]
        i1 = rem % a.size[1]
        i0 = rem // a.size[1]
        crow = col + (p - p0) * a.ldcol
        for k0 in range(a.kernel[0]):
            o0 = i0 * a.stride[0] - a.pad[0] + k0 * a.dil[0]
            if o0 < 0 or o0 >= a.out[0]:
                continue
            for k1 in range(a.kernel[1]):
                o1 = i1 * a.stride[1] - a.pad[1] + k1 * a.dil[1]
                if o1 < 0 or o1 >= a.out[1]:
                    continue
                for k2 in range(a.kernel[2]):
                    o2 = i2 * a.stride[2] - a.pad[2] + k2 * a.dil[2]
                    if o2 < 0 or o2 >= a.out[2]:
                        continue
                    tap = (k0 * a.kernel[1] + k1) * a.kernel[2] + k2
                    ct = crow + tap * occ
                    yp = y_n + ((o0 * a.out[1] + o1) * a.out[2] + o2) * a.ypix
                    if block16:
                        yp = yp + base
                        for o in range(16):
                            yp[o] += ct[o]
                    else:
                        for o in range(occ):
                            yp[a.ychan[oc0 + o]] += ct[o]


cdef void _deconv_item(const _DeconvArgs *a, Py_ssize_t item, float *xt,
                       float *col) noexcept nogil:
    cdef Py_ssize_t c = item % a.nchunks
    cdef Py_ssize_t rest = item // a.nchunks
    cdef Py_ssize_t g = rest % a.group
    cdef Py_ssize_t n = rest // a.group
    cdef Py_ssize_t oc0_g = c * _OCC
    cdef Py_ssize_t occ = min(<Py_ssize_t>_OCC, a.ocg - oc0_g)
    cdef Py_ssize_t oc0 = g * a.ocg + oc0_g
    cdef Py_ssize_t ncols = a.taps * occ
    cdef const float *x_n = a.x + n * a.x_image
    cdef float *y_n = a.y + n * a.y_image
    cdef const float *pk = a.packed + (g * a.nchunks + c) * a.panels * a.icg * PPL_NB
    cdef Py_ssize_t p0, np_, ic, p, r0, pn
    cdef const float *xc
    cdef const float *a_ptr
    cdef const float *b_ptr
    cdef int mm, n_valid
    cdef ppl_epilogue ep
    ppl_epilogue_reset(&ep)
    _fill_outputs(a, y_n, oc0, occ)
    p0 = 0
    while p0 < a.in_pixels:
        np_ = min(<Py_ssize_t>_PB, a.in_pixels - p0)
        # A: the block's pixels x the group's input channels, pixel-major.
        for ic in range(a.icg):
            xc = x_n + a.xchan[g * a.icg + ic] + p0 * a.xpix
            if a.xpix == 1:
                for p in range(np_):
                    xt[p * a.icg + ic] = xc[p]
            else:
                for p in range(np_):
                    xt[p * a.icg + ic] = xc[p * a.xpix]
        for pn in range(a.panels):
            n_valid = <int>min(<Py_ssize_t>PPL_NB, ncols - pn * PPL_NB)
            if n_valid <= 0:
                break
            b_ptr = pk + pn * a.icg * PPL_NB
            r0 = 0
            while r0 < np_:
                mm = <int>min(<Py_ssize_t>PPL_MR, np_ - r0)
                a_ptr = xt + r0 * a.icg
                ppl_brgemm(mm, n_valid, 1, &a_ptr, &b_ptr, a.icg, a.icg,
                           col + r0 * a.ldcol + pn * PPL_NB, a.ldcol, PPL_CB, &ep)
                r0 += mm
        _col2im_block(a, col, y_n, p0, np_, oc0, occ)
        p0 += np_
    if a.chain.len > 0:
        _deconv_post_chain(a, y_n, oc0, occ)


cdef void _deconv_post_chain(const _DeconvArgs *a, float *y_n, Py_ssize_t oc0,
                             Py_ssize_t occ) noexcept nogil:
    """The post-op chain over output channels [oc0, oc0 + occ) of one image."""
    cdef Py_ssize_t s = oc0, e, o
    if a.ypix == 1:
        for o in range(oc0, oc0 + occ):
            ppl_post_chain_plane(&a.chain, 0, y_n + a.ychan[o], a.out_pixels, o)
        return
    while s < oc0 + occ:  # pieces within one 16-channel block: pixel rows of 16 floats
        e = min(oc0 + occ, (s // 16 + 1) * 16)
        ppl_post_chain_tile(&a.chain, 0, y_n + a.ychan[s], 16, 16, a.out_pixels, e - s, s)
        s = e


cdef void _deconv_step(const void *args, int tid, int nthreads) noexcept nogil:
    """Work items (n, g, chunk) [begin, end) of this thread."""
    cdef const _DeconvArgs *a = <const _DeconvArgs *>args
    cdef Py_ssize_t begin, end, item
    cdef float *xt
    if nthreads > a.max_threads:  # a larger team than the scratch was made for
        if tid >= a.max_threads:
            return
        nthreads = a.max_threads
    xt = a.scratch + tid * a.scratch_floats
    ppl_partition(a.batch * a.group * a.nchunks, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        _deconv_item(a, item, xt, xt + _PB * a.icg)


def deconv_layout(Py_ssize_t ocg, Py_ssize_t taps):
    """(nchunks, panels per chunk) of a group of ocg output channels and taps kernel taps."""
    cdef Py_ssize_t nchunks = _cdiv(ocg, _OCC)
    cdef Py_ssize_t occ = min(<Py_ssize_t>_OCC, ocg)
    return nchunks, _cdiv(taps * occ, PPL_NB)


def deconv_pack_weight(w, int group):
    """The packed panels of a ConvTranspose weight w (C, M/group, *K) for make_deconv_step."""
    w = numpy.ascontiguousarray(w, dtype=numpy.float32)
    if w.ndim < 3 or group < 1 or w.shape[0] % group:
        raise ValueError(f"deconv_pack_weight: expected (C, M/group, *kernel) with C divisible "
                         f"by group {group}, got {w.shape}")
    cdef Py_ssize_t icg = w.shape[0] // group, ocg = w.shape[1]
    cdef Py_ssize_t taps = w[0, 0].size if w.shape[0] and ocg else 0
    if taps == 0 or icg == 0 or ocg == 0:
        raise ValueError(f"deconv_pack_weight: empty weight {w.shape}")
    nchunks, panels = deconv_layout(ocg, taps)
    packed = aligned_empty(group * nchunks * panels * icg * PPL_NB, numpy.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] pv = packed
    cdef Py_ssize_t item, nch = nchunks, npn = panels
    with nogil:
        for item in range(group * nch):
            _pack_chunk(&wv[0], &pv[item * npn * icg * PPL_NB], item // nch, item % nch, icg,
                        ocg, taps, npn)
    return packed


def _channel_offsets(Py_ssize_t channels, Py_ssize_t pixels, bint n16cx):
    """(offsets of each channel within an image, pixel stride, image size) in floats."""
    c = numpy.arange(channels, dtype=numpy.intp)
    if n16cx:
        cpad = _cdiv(channels, PPL_CB) * PPL_CB
        c = numpy.arange(cpad, dtype=numpy.intp)
        return (c // PPL_CB) * pixels * PPL_CB + c % PPL_CB, PPL_CB, cpad * pixels
    return c * pixels, 1, channels * pixels


def _axes3(name, values, Py_ssize_t fill, Py_ssize_t minimum):
    values = tuple(int(v) for v in values)
    if not 1 <= len(values) <= _AXES or any(v < minimum for v in values):
        raise ValueError(f"make_deconv_step: {name} must have 1 to 3 values >= {minimum}, "
                         f"got {list(values)}")
    return (fill,) * (_AXES - len(values)) + values


def make_deconv_step(size_t x, size_t y, Py_ssize_t batch, Py_ssize_t in_c, Py_ssize_t out_c,
                     int group, in_spatial, out_spatial, kernel, strides, pads_begin,
                     dilations, bint x_n16cx, bint y_n16cx, int num_threads, *,
                     packed_w=None, size_t w=0, bias=None, size_t b=0, post_chain=(),
                     keep=()):
    """The steps computing y = conv_transpose(x, W, group) + bias: a list of one step, or of
    two (pack a run-time weight, then multiply and scatter).

    x (batch, in_c, *in_spatial) and y (batch, out_c, *out_spatial), 1 to 3 spatial axes,
    each NDARRAY or N16CX at its address.  W: packed_w from deconv_pack_weight, or the address
    w of a raw (in_c, out_c/group, *kernel) weight.  Bias: an array of out_c values, or the
    address b of one computed at run time, or neither.  post_chain: post-op entries
    (_post_chain_fp32.pxi) applied to y after the bias.  pads_begin may be negative (an
    output_shape larger than the natural output).  Memory at addresses outlives the steps."""
    in_spatial = tuple(int(v) for v in in_spatial)
    rank = len(in_spatial)
    if len(tuple(out_spatial)) != rank or len(tuple(kernel)) != rank:
        raise ValueError("make_deconv_step: in_spatial, out_spatial and kernel need one value "
                         "per spatial axis")
    size = _axes3("in_spatial", in_spatial, 1, 1)
    out = _axes3("out_spatial", out_spatial, 1, 1)
    ker = _axes3("kernel", kernel, 1, 1)
    st = _axes3("strides", strides, 1, 1)
    pb = _axes3("pads_begin", pads_begin, 0, -(1 << 40))
    dl = _axes3("dilations", dilations, 1, 1)
    if group < 1 or in_c % group or out_c % group or min(batch, in_c, out_c) < 1:
        raise ValueError(f"make_deconv_step: bad channels in_c={in_c} out_c={out_c} "
                         f"group={group} or batch {batch}")
    if (packed_w is None) == (w == 0):
        raise ValueError("make_deconv_step: give packed_w or the address w, not both")
    if bias is not None and b:
        raise ValueError("make_deconv_step: give bias or the address b, not both")
    cdef Py_ssize_t icg = in_c // group, ocg = out_c // group
    cdef Py_ssize_t taps = ker[0] * ker[1] * ker[2]
    nchunks, panels = deconv_layout(ocg, taps)
    cdef Py_ssize_t packed_floats = group * nchunks * panels * icg * PPL_NB
    if packed_w is not None:
        packed_w = numpy.ascontiguousarray(packed_w, dtype=numpy.float32).reshape(-1)
        if packed_w.shape[0] != packed_floats:
            raise ValueError(f"make_deconv_step: packed weight has {packed_w.shape[0]} floats, "
                             f"expected {packed_floats}: repack it for this shape")
        packed = packed_w
    else:
        packed = aligned_empty(packed_floats, numpy.float32)
    if bias is not None:
        bias = numpy.ascontiguousarray(bias, dtype=numpy.float32).reshape(-1)
        if bias.shape[0] != out_c:
            raise ValueError(f"make_deconv_step: bias must have {out_c} values, got "
                             f"{bias.shape[0]}")
    cdef Py_ssize_t in_pixels = size[0] * size[1] * size[2]
    cdef Py_ssize_t out_pixels = out[0] * out[1] * out[2]
    xchan, xpix, x_image = _channel_offsets(in_c, in_pixels, x_n16cx)
    ychan, ypix, y_image = _channel_offsets(out_c, out_pixels, y_n16cx)
    num_threads = max(1, num_threads)
    cdef Py_ssize_t ldcol = panels * PPL_NB
    cdef Py_ssize_t scratch_floats = _cdiv(_PB * icg + _PB * ldcol, 16) * 16
    scratch, _ = per_thread_buffer(num_threads, scratch_floats, numpy.float32)
    cdef double flops = 2.0 * batch * in_c * in_pixels * taps * ocg
    holders = (keep, packed, bias, xchan, ychan, scratch)
    cdef Step step = new_step(_deconv_step, sizeof(_DeconvArgs), flops >= _PARALLEL_FLOPS,
                              holders)
    cdef _DeconvArgs *a = <_DeconvArgs *>step.args
    cdef float[::1] packed_v = packed
    cdef float[::1] scratch_v = scratch
    cdef const Py_ssize_t[::1] xchan_v = xchan
    cdef const Py_ssize_t[::1] ychan_v = ychan
    cdef const float[::1] bias_v
    cdef int i
    a.x = <const float *>x
    a.y = <float *>y
    a.w = <const float *>w
    a.packed = &packed_v[0]
    a.bias = NULL
    if bias is not None:
        bias_v = bias
        a.bias = &bias_v[0]
    elif b:
        a.bias = <const float *>b
    a.batch, a.group, a.icg, a.ocg, a.oc = batch, group, icg, ocg, out_c
    a.oc_pad = ychan.shape[0]
    a.nchunks, a.panels, a.ldcol, a.taps = nchunks, panels, ldcol, taps
    for i in range(_AXES):
        a.size[i], a.out[i], a.kernel[i] = size[i], out[i], ker[i]
        a.stride[i], a.pad[i], a.dil[i] = st[i], pb[i], dl[i]
    a.in_pixels, a.out_pixels = in_pixels, out_pixels
    a.xchan = &xchan_v[0]
    a.ychan = &ychan_v[0]
    a.xpix, a.ypix, a.x_image, a.y_image = xpix, ypix, x_image, y_image
    a.scratch = &scratch_v[0]
    a.scratch_floats = scratch_floats
    a.max_threads = num_threads
    _fill_post_chain(&a.chain, [tuple(e) for e in post_chain], y, out_c, "make_deconv_step")
    step.work_items = batch * group * nchunks
    if packed_w is not None:
        return [step]
    cdef Step pack = new_step(_deconv_pack_step, sizeof(_DeconvArgs),
                              group * nchunks * panels * icg * PPL_NB >= 65536, holders)
    (<_DeconvArgs *>pack.args)[0] = a[0]
    return [pack, step]


def deconv_fp32(x, w, bias, int group, out_spatial, strides, pads_begin, dilations,
                int num_threads, bint prepack=True):
    """Test wrapper: y = conv_transpose(x, w) + bias for NDARRAY numpy arrays."""
    x = numpy.ascontiguousarray(x, dtype=numpy.float32)
    w = numpy.ascontiguousarray(w, dtype=numpy.float32)
    out_c = w.shape[1] * group
    y = numpy.empty((x.shape[0], out_c) + tuple(out_spatial), dtype=numpy.float32)
    kwargs = {}
    if prepack:
        kwargs["packed_w"] = deconv_pack_weight(w, group)
    else:
        kwargs["w"] = w.ctypes.data
    if bias is not None:
        kwargs["bias"] = bias
    steps = make_deconv_step(x.ctypes.data, y.ctypes.data, x.shape[0], x.shape[1], out_c,
                             group, x.shape[2:], out_spatial, w.shape[2:], strides, pads_begin,
                             dilations, False, False, num_threads, keep=(x, w, y), **kwargs)
    run_steps(steps, num_threads)
    return y
