# Pooling kernels for float32: MaxPool, AveragePool and their global forms, in the NDARRAY
# and N16CX layouts.
#
# This body is written once and included by _pool_fp32_{avx512,fma,sse}.pyx; setup.py
# compiles each copy with its ISA's flags, so gcc vectorises the same loops three ways.
#
# Geometry.  Every ndarray kernel works on three spatial axes (D, H, W); 1-D and 2-D callers
# pass size-1 leading axes (kernel 1, stride 1, pad 0, dilation 1).  Output position o along
# an axis reads the window starting at  o * stride - pad_begin  with taps
# start + k * dilation, k in [0, kernel).  Taps outside [0, size) are padding: they never
# win a max and are never summed.  Output sizes and pads come from
# pplpy.oputils.onnx.pool_geometry.resolve_pads; the kernels clip every read to the input,
# so any output shape is memory-safe.
#
# Loop order.  The kernels slide whole output rows: for each valid tap (kd, kh, kw) they
# update y[od, oh, ow0:ow1] from x[id, ih, ...] in one contiguous (stride 1) or strided
# loop, which gcc vectorises; the window's clipping becomes the row's [ow0, ow1) range.
# In N16CX a row element is a pixel of 16 channels.  Work is split across threads by
# (n, c) plane or (n, channel-block).
#
# Max is written `v if v > m else m`: with -fno-trapping-math gcc turns it into vector
# max/blend inside a loop of unknown trip count, but not in a 16-trip loop it unrolls first
# (the global max kernels stay scalar maxss for that reason; they are rare and cheap).

from cython.parallel cimport prange
from libc.math cimport INFINITY
from libc.stdint cimport int64_t

cdef enum:
    LANES = 16      # channels per N16CX block
    AXES = 3        # spatial axes every ndarray kernel works on


cdef struct Window:
    # Geometry of one pooling along each of the AXES spatial axes.
    Py_ssize_t size[AXES]        # input extent
    Py_ssize_t out[AXES]         # output extent
    Py_ssize_t kernel[AXES]
    Py_ssize_t stride[AXES]
    Py_ssize_t pad_begin[AXES]
    Py_ssize_t pad_end[AXES]     # only AveragePool's count_include_pad reads it
    Py_ssize_t dilation[AXES]


# ---------------------------------------------------------------------------------------
# Index arithmetic (all operands of // are non-negative, so C's truncating division is floor)

cdef inline Py_ssize_t _imin(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a if a < b else b


cdef inline Py_ssize_t _imax(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a if a > b else b


cdef inline Py_ssize_t _tap_count(Py_ssize_t start, Py_ssize_t dilation, Py_ssize_t kernel,
                                  Py_ssize_t lo, Py_ssize_t hi,
                                  Py_ssize_t* first) noexcept nogil:
    """Taps k with lo <= start + k * dilation < hi: k in [first, first + count), count returned."""
    cdef Py_ssize_t k0 = 0 if start >= lo else (lo - start + dilation - 1) // dilation
    cdef Py_ssize_t k1 = (0 if start >= hi
                          else _imin(kernel, (hi - start + dilation - 1) // dilation))
    first[0] = k0
    return _imax(k1 - k0, 0)


cdef inline void _row_range(Py_ssize_t offset, Py_ssize_t stride, Py_ssize_t size,
                            Py_ssize_t out, Py_ssize_t* o0, Py_ssize_t* o1) noexcept nogil:
    """Outputs o in [o0, o1) of a row whose tap reads o * stride + offset inside [0, size)."""
    cdef Py_ssize_t lo = 0 if offset >= 0 else (stride - 1 - offset) // stride
    cdef Py_ssize_t hi = 0 if offset >= size else _imin(out, (size - 1 - offset) // stride + 1)
    o0[0] = lo
    o1[0] = _imax(lo, hi)


cdef inline void _full_range(Py_ssize_t out, Py_ssize_t stride, Py_ssize_t pad_begin,
                             Py_ssize_t extent, Py_ssize_t lo, Py_ssize_t hi,
                             Py_ssize_t* o0, Py_ssize_t* o1) noexcept nogil:
    """Outputs o in [o0, o1) whose window o * stride - pad_begin + [0, extent) is in [lo, hi)."""
    # Callers pass lo = 0 or lo = -pad_begin, so lo + pad_begin >= 0 and // is floor.
    cdef Py_ssize_t first = _imin(out, (lo + pad_begin + stride - 1) // stride)
    cdef Py_ssize_t room = hi - extent + pad_begin
    cdef Py_ssize_t last = 0 if room < 0 else _imin(out, room // stride + 1)
    o0[0] = first
    o1[0] = _imax(first, last)


cdef inline void _divide_by_counts(float* y, Py_ssize_t lanes, Py_ssize_t count_dh,
                                   Py_ssize_t lo, Py_ssize_t hi, const Window* w) noexcept nogil:
    """y[ow, :] /= count_dh * (taps of window ow along W inside [lo, hi)); rows of `lanes`."""
    cdef Py_ssize_t ow, j, full0, full1, unused, count
    cdef Py_ssize_t extent = (w.kernel[2] - 1) * w.dilation[2] + 1
    cdef float c
    # Only windows at the edges are partial: their counts take divisions, so the interior,
    # where every window counts kernel[2] taps, gets one plain vectorised loop.
    _full_range(w.out[2], w.stride[2], w.pad_begin[2], extent, lo, hi, &full0, &full1)
    for ow in range(w.out[2]):
        if ow == full0:
            c = <float>(count_dh * w.kernel[2])
            for j in range(full0 * lanes, full1 * lanes):
                y[j] = y[j] / c
        if full0 <= ow < full1:
            continue
        count = _tap_count(ow * w.stride[2] - w.pad_begin[2], w.dilation[2], w.kernel[2],
                           lo, hi, &unused)
        c = <float>(count_dh * count)
        for j in range(ow * lanes, (ow + 1) * lanes):
            y[j] = y[j] / c


# ---------------------------------------------------------------------------------------
# Row updates: the vectorised inner loops of the ndarray kernels

cdef inline void _max_into(float* y, const float* x, Py_ssize_t n,
                           Py_ssize_t stride) noexcept nogil:
    """y[j] = max(y[j], x[j * stride]) for j < n."""
    cdef Py_ssize_t j
    cdef float v
    # A separate unit-stride loop gives gcc contiguous loads (the common stride-1 case).
    if stride == 1:
        for j in range(n):
            v = x[j]
            y[j] = v if v > y[j] else y[j]
    else:
        for j in range(n):
            v = x[j * stride]
            y[j] = v if v > y[j] else y[j]


cdef inline void _add_into(float* y, const float* x, Py_ssize_t n,
                           Py_ssize_t stride) noexcept nogil:
    """y[j] += x[j * stride] for j < n."""
    cdef Py_ssize_t j
    if stride == 1:
        for j in range(n):
            y[j] += x[j]
    else:
        for j in range(n):
            y[j] += x[j * stride]


# ---------------------------------------------------------------------------------------
# NDARRAY planes: one (n, c) plane of shape (D, H, W) -> (OD, OH, OW)

cdef void _maxpool_plane(const float* x, float* y, const Window* w) noexcept nogil:
    """y[o] = max over in-bounds taps t of x[o * stride - pad_begin + t * dilation], or -inf."""
    cdef Py_ssize_t D = w.size[0], H = w.size[1], W = w.size[2]
    cdef Py_ssize_t OH = w.out[1], OW = w.out[2]
    cdef Py_ssize_t od, oh, ow, kd, kh, kw, kd0, kh0, nd, nh, id_, ih, offset, o0, o1
    cdef float* yrow
    cdef const float* xrow
    for od in range(w.out[0]):
        nd = _tap_count(od * w.stride[0] - w.pad_begin[0], w.dilation[0], w.kernel[0], 0, D, &kd0)
        for oh in range(OH):
            nh = _tap_count(oh * w.stride[1] - w.pad_begin[1], w.dilation[1], w.kernel[1],
                            0, H, &kh0)
            yrow = y + (od * OH + oh) * OW
            for ow in range(OW):
                yrow[ow] = -INFINITY
            for kd in range(kd0, kd0 + nd):
                id_ = od * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0]
                for kh in range(kh0, kh0 + nh):
                    ih = oh * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1]
                    xrow = x + (id_ * H + ih) * W
                    for kw in range(w.kernel[2]):
                        offset = kw * w.dilation[2] - w.pad_begin[2]
                        _row_range(offset, w.stride[2], W, OW, &o0, &o1)
                        if o1 > o0:
                            _max_into(yrow + o0, xrow + o0 * w.stride[2] + offset, o1 - o0,
                                      w.stride[2])


cdef void _maxpool_index_plane(const float* x, float* y, int64_t* idx, int64_t base,
                               bint column_major, const Window* w) noexcept nogil:
    """_maxpool_plane, and idx[o] = base + flat index of the first maximum (row-major taps)."""
    cdef Py_ssize_t D = w.size[0], H = w.size[1], W = w.size[2]
    cdef Py_ssize_t OH = w.out[1], OW = w.out[2]
    cdef Py_ssize_t od, oh, ow, kd, kh, kw, kd0, kh0, nd, nh, id_, ih, iw, offset, o0, o1
    cdef int64_t row_index, w_step
    cdef float v
    cdef float* yrow
    cdef int64_t* irow
    cdef const float* xrow
    # ONNX's Indices flatten (n, c, spatial...) row-major, or with storage_order=1 the
    # spatial part column-major: first spatial axis fastest.
    w_step = D * H if column_major else 1
    for od in range(w.out[0]):
        nd = _tap_count(od * w.stride[0] - w.pad_begin[0], w.dilation[0], w.kernel[0], 0, D, &kd0)
        for oh in range(OH):
            nh = _tap_count(oh * w.stride[1] - w.pad_begin[1], w.dilation[1], w.kernel[1],
                            0, H, &kh0)
            yrow = y + (od * OH + oh) * OW
            irow = idx + (od * OH + oh) * OW
            for ow in range(OW):
                yrow[ow] = -INFINITY
                irow[ow] = -1
            for kd in range(kd0, kd0 + nd):
                id_ = od * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0]
                for kh in range(kh0, kh0 + nh):
                    ih = oh * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1]
                    xrow = x + (id_ * H + ih) * W
                    row_index = base + (id_ + ih * D if column_major else (id_ * H + ih) * W)
                    for kw in range(w.kernel[2]):
                        offset = kw * w.dilation[2] - w.pad_begin[2]
                        _row_range(offset, w.stride[2], W, OW, &o0, &o1)
                        for ow in range(o0, o1):
                            iw = ow * w.stride[2] + offset
                            v = xrow[iw]
                            # Strictly greater keeps the first maximum; the first tap always
                            # lands, as in onnx.reference, so an all -inf window gets an index.
                            if v > yrow[ow] or irow[ow] < 0:
                                yrow[ow] = v
                                irow[ow] = row_index + iw * w_step


cdef void _avgpool_plane(const float* x, float* y, bint count_include_pad,
                         const Window* w) noexcept nogil:
    """y[o] = sum of in-bounds taps / count; count = taps in x (+ pads if count_include_pad)."""
    cdef Py_ssize_t D = w.size[0], H = w.size[1], W = w.size[2]
    cdef Py_ssize_t OH = w.out[1], OW = w.out[2]
    cdef Py_ssize_t od, oh, ow, kd, kh, kw, kd0, kh0, nd, nh, id_, ih, offset, o0, o1
    cdef Py_ssize_t start_d, start_h, unused, count_dh, axis
    cdef float* yrow
    cdef const float* xrow
    # Cells past pad_end (added by ceil_mode) are never counted; a window with no counted
    # cell gives 0 / 0 = NaN, as onnx.reference's np.average of nothing does.
    cdef Py_ssize_t lo[AXES]
    cdef Py_ssize_t hi[AXES]
    for axis in range(AXES):
        lo[axis] = -w.pad_begin[axis] if count_include_pad else 0
        hi[axis] = w.size[axis] + w.pad_end[axis] if count_include_pad else w.size[axis]
    for od in range(w.out[0]):
        start_d = od * w.stride[0] - w.pad_begin[0]
        nd = _tap_count(start_d, w.dilation[0], w.kernel[0], 0, D, &kd0)
        for oh in range(OH):
            start_h = oh * w.stride[1] - w.pad_begin[1]
            nh = _tap_count(start_h, w.dilation[1], w.kernel[1], 0, H, &kh0)
            yrow = y + (od * OH + oh) * OW
            for ow in range(OW):
                yrow[ow] = 0.0
            for kd in range(kd0, kd0 + nd):
                id_ = start_d + kd * w.dilation[0]
                for kh in range(kh0, kh0 + nh):
                    ih = start_h + kh * w.dilation[1]
                    xrow = x + (id_ * H + ih) * W
                    for kw in range(w.kernel[2]):
                        offset = kw * w.dilation[2] - w.pad_begin[2]
                        _row_range(offset, w.stride[2], W, OW, &o0, &o1)
                        if o1 > o0:
                            _add_into(yrow + o0, xrow + o0 * w.stride[2] + offset, o1 - o0,
                                      w.stride[2])
            # The counted cells form a box, so the count is a product of per-axis counts.
            count_dh = (_tap_count(start_d, w.dilation[0], w.kernel[0], lo[0], hi[0], &unused)
                        * _tap_count(start_h, w.dilation[1], w.kernel[1], lo[1], hi[1], &unused))
            _divide_by_counts(yrow, 1, count_dh, lo[2], hi[2], w)


# ---------------------------------------------------------------------------------------
# N16CX planes: one (n, channel-block) plane of shape (H, W, 16) -> (OH, OW, 16); axes 1, 2
# of the Window are H and W.  They slide output rows like the ndarray planes, a pixel being
# 16 floats.  (Keeping one pixel's 16 lanes in a local array instead left its max scalar:
# gcc unrolls a 16-trip loop completely before its vectoriser can if-convert the select.)

cdef inline void _max_into_blocks(float* y, const float* x, Py_ssize_t n,
                                  Py_ssize_t stride) noexcept nogil:
    """y[j, :] = max(y[j, :], x[j * stride, :]) for j < n, rows of 16 floats."""
    cdef Py_ssize_t j, lane
    cdef float v
    for j in range(n):
        for lane in range(LANES):
            v = x[j * stride * LANES + lane]
            y[j * LANES + lane] = v if v > y[j * LANES + lane] else y[j * LANES + lane]


cdef inline void _add_into_blocks(float* y, const float* x, Py_ssize_t n,
                                  Py_ssize_t stride) noexcept nogil:
    """y[j, :] += x[j * stride, :] for j < n, rows of 16 floats."""
    cdef Py_ssize_t j, lane
    for j in range(n):
        for lane in range(LANES):
            y[j * LANES + lane] += x[j * stride * LANES + lane]


cdef void _maxpool_n16cx_plane(const float* x, float* y, const Window* w) noexcept nogil:
    """y[o, :] = max over in-bounds taps t of x[o * stride - pad_begin + t * dilation], or -inf."""
    cdef Py_ssize_t H = w.size[1], W = w.size[2], OW = w.out[2], sw = w.stride[2]
    cdef Py_ssize_t oh, kh, kw, kh0, nh, ih, start_h, offset, o0, o1, j
    cdef float* yrow
    for oh in range(w.out[1]):
        start_h = oh * w.stride[1] - w.pad_begin[1]
        nh = _tap_count(start_h, w.dilation[1], w.kernel[1], 0, H, &kh0)
        yrow = y + oh * OW * LANES
        for j in range(OW * LANES):
            yrow[j] = -INFINITY
        for kh in range(kh0, kh0 + nh):
            ih = start_h + kh * w.dilation[1]
            for kw in range(w.kernel[2]):
                offset = kw * w.dilation[2] - w.pad_begin[2]
                _row_range(offset, sw, W, OW, &o0, &o1)
                if o1 > o0:
                    _max_into_blocks(yrow + o0 * LANES, x + (ih * W + o0 * sw + offset) * LANES,
                                     o1 - o0, sw)


cdef void _avgpool_n16cx_plane(const float* x, float* y, bint count_include_pad,
                               const Window* w) noexcept nogil:
    """y[o, :] = sum of in-bounds taps / count, count as in _avgpool_plane."""
    cdef Py_ssize_t H = w.size[1], W = w.size[2], OW = w.out[2], sw = w.stride[2]
    cdef Py_ssize_t oh, kh, kw, kh0, nh, ih, start_h, offset, o0, o1, j, unused, count_h
    cdef float* yrow
    cdef Py_ssize_t lo_h = -w.pad_begin[1] if count_include_pad else 0
    cdef Py_ssize_t lo_w = -w.pad_begin[2] if count_include_pad else 0
    cdef Py_ssize_t hi_h = H + w.pad_end[1] if count_include_pad else H
    cdef Py_ssize_t hi_w = W + w.pad_end[2] if count_include_pad else W
    for oh in range(w.out[1]):
        start_h = oh * w.stride[1] - w.pad_begin[1]
        nh = _tap_count(start_h, w.dilation[1], w.kernel[1], 0, H, &kh0)
        yrow = y + oh * OW * LANES
        for j in range(OW * LANES):
            yrow[j] = 0.0
        for kh in range(kh0, kh0 + nh):
            ih = start_h + kh * w.dilation[1]
            for kw in range(w.kernel[2]):
                offset = kw * w.dilation[2] - w.pad_begin[2]
                _row_range(offset, sw, W, OW, &o0, &o1)
                if o1 > o0:
                    _add_into_blocks(yrow + o0 * LANES, x + (ih * W + o0 * sw + offset) * LANES,
                                     o1 - o0, sw)
        count_h = _tap_count(start_h, w.dilation[1], w.kernel[1], lo_h, hi_h, &unused)
        _divide_by_counts(yrow, LANES, count_h, lo_w, hi_w, w)


# ---------------------------------------------------------------------------------------
# Global pooling rows

cdef float _row_sum(const float* x, Py_ssize_t n) noexcept nogil:
    """sum(x[:n]) with 16 interleaved partial sums."""
    # gcc will not reorder a float sum without -ffast-math; LANES independent partial sums
    # vectorise as plain element-wise adds, and are more accurate than one running sum.
    cdef float acc[LANES]
    cdef Py_ssize_t j, lane, blocks = n // LANES
    cdef float total = 0.0
    for lane in range(LANES):
        acc[lane] = 0.0
    for j in range(blocks):
        for lane in range(LANES):
            acc[lane] += x[j * LANES + lane]
    for lane in range(LANES):
        total += acc[lane]
    for j in range(blocks * LANES, n):
        total += x[j]
    return total


cdef float _row_max(const float* x, Py_ssize_t n) noexcept nogil:
    """max(x[:n]) with 16 interleaved partial maxima; -inf if n == 0."""
    cdef float acc[LANES]
    cdef Py_ssize_t j, lane, blocks = n // LANES
    cdef float best = -INFINITY
    cdef float v
    for lane in range(LANES):
        acc[lane] = -INFINITY
    for j in range(blocks):
        for lane in range(LANES):
            v = x[j * LANES + lane]
            acc[lane] = v if v > acc[lane] else acc[lane]
    for lane in range(LANES):
        best = acc[lane] if acc[lane] > best else best
    for j in range(blocks * LANES, n):
        best = x[j] if x[j] > best else best
    return best


cdef void _global_avgpool_n16cx_plane(const float* x, float* y, Py_ssize_t n) noexcept nogil:
    """y[:] = mean over s < n of x[s, :]."""
    cdef float acc[LANES]
    cdef Py_ssize_t s, lane
    for lane in range(LANES):
        acc[lane] = 0.0
    for s in range(n):
        for lane in range(LANES):
            acc[lane] += x[s * LANES + lane]
    for lane in range(LANES):
        y[lane] = acc[lane] / <float>n


cdef void _global_maxpool_n16cx_plane(const float* x, float* y, Py_ssize_t n) noexcept nogil:
    """y[:] = max over s < n of x[s, :]."""
    cdef float acc[LANES]
    cdef Py_ssize_t s, lane
    cdef float v
    for lane in range(LANES):
        acc[lane] = -INFINITY
    for s in range(n):
        for lane in range(LANES):
            v = x[s * LANES + lane]
            acc[lane] = v if v > acc[lane] else acc[lane]
    for lane in range(LANES):
        y[lane] = acc[lane]


# ---------------------------------------------------------------------------------------
# Python-visible wrappers: check arguments, fill a Window, release the GIL, split planes

cdef tuple _dims(const Py_ssize_t* shape, int ndim):
    """A memoryview's shape as a tuple (its .shape is a C array)."""
    return tuple([shape[i] for i in range(ndim)])


cdef int _threads(int num_threads, Py_ssize_t tasks) noexcept:
    """No more threads than tasks, and at least one (as the sibling families do)."""
    return <int>_imax(1, _imin(num_threads, tasks))


cdef void _set_axes(Py_ssize_t* dst, name, values, Py_ssize_t first, Py_ssize_t minimum,
                    Py_ssize_t fill) except *:
    """dst[first:] = values (checked >= minimum), dst[:first] = fill."""
    values = tuple(values)
    if len(values) != AXES - first:
        raise ValueError(f"{name}: expected {AXES - first} values, got {list(values)}")
    cdef Py_ssize_t axis
    for axis in range(first):
        dst[axis] = fill
    for axis in range(first, AXES):
        dst[axis] = values[axis - first]
        if dst[axis] < minimum:
            raise ValueError(f"{name}: every value must be >= {minimum}, got {list(values)}")


cdef void _set_window(Window* w, in_shape, out_shape, kernel, strides, pads_begin, pads_end,
                      dilations, Py_ssize_t first) except *:
    """Fill w for AXES - first spatial axes; axes before `first` are trivial (size 1)."""
    _set_axes(w.size, "input spatial shape", in_shape, first, 0, 1)
    _set_axes(w.out, "output spatial shape", out_shape, first, 0, 1)
    _set_axes(w.kernel, "kernel", kernel, first, 1, 1)
    _set_axes(w.stride, "strides", strides, first, 1, 1)
    _set_axes(w.pad_begin, "pads_begin", pads_begin, first, 0, 0)
    _set_axes(w.pad_end, "pads_end", pads_end, first, 0, 0)
    _set_axes(w.dilation, "dilations", dilations, first, 1, 1)


def _check_planes(str op, tuple x_shape, tuple y_shape, Py_ssize_t lead):
    """x and y must agree on their first `lead` dims (and the N16CX lane dim if any)."""
    if x_shape[:lead] != y_shape[:lead]:
        raise ValueError(
            f"{op}: x {list(x_shape)} and y {list(y_shape)} must share their first {lead} dims"
        )


def maxpool_ndarray_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                         int64_t[:, :, :, :, ::1] indices, kernel, strides, pads_begin,
                         dilations, int storage_order, int num_threads):
    """y[n, c, o] = max over in-bounds taps of x[n, c, o * strides - pads_begin + t * dilations].

    x (N, C, D, H, W), y (N, C, OD, OH, OW), indices None or int64 shaped like y (ONNX
    MaxPool's Indices, storage_order 0 row-major, 1 column-major over the spatial axes).
    """
    cdef Window w
    x_shape, y_shape = _dims(x.shape, 5), _dims(y.shape, 5)
    _check_planes("maxpool_ndarray_fp32", x_shape, y_shape, 2)
    if indices is not None and _dims(indices.shape, 5) != y_shape:
        raise ValueError(
            f"maxpool_ndarray_fp32: indices {list(_dims(indices.shape, 5))} must have y's shape "
            f"{list(y_shape)}"
        )
    if storage_order not in (0, 1):
        raise ValueError(f"maxpool_ndarray_fp32: storage_order must be 0 or 1, got {storage_order}")
    _set_window(&w, x_shape[2:], y_shape[2:], kernel, strides, pads_begin, (0, 0, 0),
                dilations, 0)
    cdef Py_ssize_t planes = y.shape[0] * y.shape[1]
    cdef Py_ssize_t in_plane = x.shape[2] * x.shape[3] * x.shape[4]
    cdef Py_ssize_t out_plane = y.shape[2] * y.shape[3] * y.shape[4]
    if planes == 0 or out_plane == 0:
        return
    if in_plane == 0:
        raise ValueError(f"maxpool_ndarray_fp32: empty input spatial shape {list(x_shape[2:])}")
    cdef const float* xp = &x[0, 0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0, 0, 0]
    cdef int64_t* ip = NULL if indices is None else &indices[0, 0, 0, 0, 0]
    cdef bint column_major = storage_order == 1
    cdef Py_ssize_t p
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        if ip == NULL:
            for p in prange(planes, num_threads=threads, schedule="static"):
                _maxpool_plane(xp + p * in_plane, yp + p * out_plane, &w)
        else:
            for p in prange(planes, num_threads=threads, schedule="static"):
                _maxpool_index_plane(xp + p * in_plane, yp + p * out_plane,
                                     ip + p * out_plane, p * in_plane, column_major, &w)


def avgpool_ndarray_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                         kernel, strides, pads_begin, pads_end, dilations,
                         bint count_include_pad, int num_threads):
    """y[n, c, o] = sum of in-bounds taps / count (taps in x, + explicit pads if count_include_pad).

    x (N, C, D, H, W), y (N, C, OD, OH, OW); cells beyond pads_end (from ceil_mode) are
    never counted.
    """
    cdef Window w
    x_shape, y_shape = _dims(x.shape, 5), _dims(y.shape, 5)
    _check_planes("avgpool_ndarray_fp32", x_shape, y_shape, 2)
    _set_window(&w, x_shape[2:], y_shape[2:], kernel, strides, pads_begin, pads_end,
                dilations, 0)
    cdef Py_ssize_t planes = y.shape[0] * y.shape[1]
    cdef Py_ssize_t in_plane = x.shape[2] * x.shape[3] * x.shape[4]
    cdef Py_ssize_t out_plane = y.shape[2] * y.shape[3] * y.shape[4]
    if planes == 0 or out_plane == 0:
        return
    if in_plane == 0:
        raise ValueError(f"avgpool_ndarray_fp32: empty input spatial shape {list(x_shape[2:])}")
    cdef const float* xp = &x[0, 0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0, 0, 0]
    cdef Py_ssize_t p
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        for p in prange(planes, num_threads=threads, schedule="static"):
            _avgpool_plane(xp + p * in_plane, yp + p * out_plane, count_include_pad, &w)


cdef _check_n16cx(str op, tuple x_shape, tuple y_shape):
    _check_planes(op, x_shape, y_shape, 2)
    if x_shape[4] != LANES or y_shape[4] != LANES:
        raise ValueError(
            f"{op}: x {list(x_shape)} and y {list(y_shape)} must end in a {LANES}-channel block"
        )


def maxpool_n16cx_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                       kernel_hw, strides_hw, pads_begin_hw, dilations_hw, int num_threads):
    """y[n, cb, o] = max over in-bounds taps of x[n, cb, o * strides - pads_begin + t * dilations].

    x (N, Cb, H, W, 16), y (N, Cb, OH, OW, 16).
    """
    cdef Window w
    x_shape, y_shape = _dims(x.shape, 5), _dims(y.shape, 5)
    _check_n16cx("maxpool_n16cx_fp32", x_shape, y_shape)
    _set_window(&w, x_shape[2:4], y_shape[2:4], kernel_hw, strides_hw, pads_begin_hw, (0, 0),
                dilations_hw, 1)
    cdef Py_ssize_t planes = y.shape[0] * y.shape[1]
    cdef Py_ssize_t in_plane = x.shape[2] * x.shape[3] * LANES
    cdef Py_ssize_t out_plane = y.shape[2] * y.shape[3] * LANES
    if planes == 0 or out_plane == 0:
        return
    if in_plane == 0:
        raise ValueError(f"maxpool_n16cx_fp32: empty input spatial shape {list(x_shape[2:4])}")
    cdef const float* xp = &x[0, 0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0, 0, 0]
    cdef Py_ssize_t p
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        for p in prange(planes, num_threads=threads, schedule="static"):
            _maxpool_n16cx_plane(xp + p * in_plane, yp + p * out_plane, &w)


def avgpool_n16cx_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                       kernel_hw, strides_hw, pads_begin_hw, pads_end_hw, dilations_hw,
                       bint count_include_pad, int num_threads):
    """y[n, cb, o, :] = sum of in-bounds taps / count, as avgpool_ndarray_fp32.

    x (N, Cb, H, W, 16), y (N, Cb, OH, OW, 16).
    """
    cdef Window w
    x_shape, y_shape = _dims(x.shape, 5), _dims(y.shape, 5)
    _check_n16cx("avgpool_n16cx_fp32", x_shape, y_shape)
    _set_window(&w, x_shape[2:4], y_shape[2:4], kernel_hw, strides_hw, pads_begin_hw,
                pads_end_hw, dilations_hw, 1)
    cdef Py_ssize_t planes = y.shape[0] * y.shape[1]
    cdef Py_ssize_t in_plane = x.shape[2] * x.shape[3] * LANES
    cdef Py_ssize_t out_plane = y.shape[2] * y.shape[3] * LANES
    if planes == 0 or out_plane == 0:
        return
    if in_plane == 0:
        raise ValueError(f"avgpool_n16cx_fp32: empty input spatial shape {list(x_shape[2:4])}")
    cdef const float* xp = &x[0, 0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0, 0, 0]
    cdef Py_ssize_t p
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        for p in prange(planes, num_threads=threads, schedule="static"):
            _avgpool_n16cx_plane(xp + p * in_plane, yp + p * out_plane, count_include_pad, &w)


def global_avgpool_ndarray_fp32(const float[:, ::1] x, float[::1] y, int num_threads):
    """y[r] = sum(x[r, :]) / S for x (R, S), R = N * C and S the spatial size."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"global_avgpool_ndarray_fp32: x {list(_dims(x.shape, 2))} and y "
                         f"{[y.shape[0]]} need one output per row")
    cdef Py_ssize_t rows = x.shape[0], n = x.shape[1], r
    if rows == 0:
        return
    if n == 0:
        raise ValueError("global_avgpool_ndarray_fp32: empty spatial size")
    cdef const float* xp = &x[0, 0]
    cdef int threads = _threads(num_threads, rows)
    with nogil:
        for r in prange(rows, num_threads=threads, schedule="static"):
            y[r] = _row_sum(xp + r * n, n) / <float>n


def global_maxpool_ndarray_fp32(const float[:, ::1] x, float[::1] y, int num_threads):
    """y[r] = max(x[r, :]) for x (R, S), R = N * C and S the spatial size."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"global_maxpool_ndarray_fp32: x {list(_dims(x.shape, 2))} and y "
                         f"{[y.shape[0]]} need one output per row")
    cdef Py_ssize_t rows = x.shape[0], n = x.shape[1], r
    if rows == 0:
        return
    if n == 0:
        raise ValueError("global_maxpool_ndarray_fp32: empty spatial size")
    cdef const float* xp = &x[0, 0]
    cdef int threads = _threads(num_threads, rows)
    with nogil:
        for r in prange(rows, num_threads=threads, schedule="static"):
            y[r] = _row_max(xp + r * n, n)


cdef _check_global_n16cx(str op, const float[:, :, :, ::1] x, float[:, :, ::1] y):
    if _dims(x.shape, 2) != _dims(y.shape, 2) or x.shape[3] != LANES or y.shape[2] != LANES:
        raise ValueError(f"{op}: expected x (N, Cb, S, {LANES}) and y (N, Cb, {LANES}), got x "
                         f"{list(_dims(x.shape, 4))} and y {list(_dims(y.shape, 3))}")
    if x.shape[2] == 0 and x.shape[0] * x.shape[1] != 0:
        raise ValueError(f"{op}: empty spatial size")


def global_avgpool_n16cx_fp32(const float[:, :, :, ::1] x, float[:, :, ::1] y,
                              int num_threads):
    """y[n, cb, :] = sum(x[n, cb, :, :], axis=spatial) / S for x (N, Cb, S, 16)."""
    _check_global_n16cx("global_avgpool_n16cx_fp32", x, y)
    cdef Py_ssize_t planes = x.shape[0] * x.shape[1], n = x.shape[2], p
    if planes == 0:
        return
    cdef const float* xp = &x[0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0]
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        for p in prange(planes, num_threads=threads, schedule="static"):
            _global_avgpool_n16cx_plane(xp + p * n * LANES, yp + p * LANES, n)


def global_maxpool_n16cx_fp32(const float[:, :, :, ::1] x, float[:, :, ::1] y,
                              int num_threads):
    """y[n, cb, :] = max(x[n, cb, :, :], axis=spatial) for x (N, Cb, S, 16)."""
    _check_global_n16cx("global_maxpool_n16cx_fp32", x, y)
    cdef Py_ssize_t planes = x.shape[0] * x.shape[1], n = x.shape[2], p
    if planes == 0:
        return
    cdef const float* xp = &x[0, 0, 0, 0]
    cdef float* yp = &y[0, 0, 0]
    cdef int threads = _threads(num_threads, planes)
    with nogil:
        for p in prange(planes, num_threads=threads, schedule="static"):
            _global_maxpool_n16cx_plane(xp + p * n * LANES, yp + p * LANES, n)
