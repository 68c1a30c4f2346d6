# LpPool and MaxUnpool for float32, as compiled steps of the run plan (see step.pxd).
#
# Written once, included by _pool2_fp32_{avx512,fma,sse}.pyx, each compiled with its ISA's
# flags.
#
# LpPool:  y = (sum over the window's in-bounds taps of |x|^p)^(1/p).  Padding cells are zero
# and add nothing, so taps outside the input are skipped, as are the cells ceil_mode adds.
# Geometry as in _pool_fp32.pxi: three spatial axes (D, H, W), 1-D and 2-D with size-1
# leading axes; output position o reads taps  o * stride - pad_begin + k * dilation.  A work
# item is one output row (n, c, od, oh, :) in NDARRAY or (n, cb, od, oh, :, 16) in N16CX
# (`lanes` floats per row element, the innermost loop, which gcc vectorises for 16 lanes).
# p = 1 and p = 2 avoid powf.
#
# MaxUnpool:  y = 0, then y.flat[I[i]] = x.flat[i] in order (a later index wins, as numpy's
# fancy assignment does), one serial step.  I indexes the unpooled shape that kernel,
# strides and pads give; an output_shape larger than it holds that result in its leading
# corner (onnx.reference's reading, which the ONNX conformance cases check).  Indices
# outside the shape are skipped: a step never fails.

from libc.math cimport fabsf, powf, sqrtf
from libc.stdint cimport int64_t
from libc.string cimport memset
from pplpy.runtime.step cimport (Step, new_step, ppl_fault, ppl_fault_record, ppl_partition,
                                 set_fault)

import numpy

from pplpy.engines.x86.impls.fault_text import valid_indices
from pplpy.runtime.step import run_steps

cdef enum:
    _AXES = 3
    _PARALLEL_MIN = 65536   # taps below which a step runs serially
    _DIMS = 5               # N, C and three spatial axes


cdef struct _LpArgs:
    const float* x
    float* y
    Py_ssize_t planes            # N * C (NDARRAY) or N * ceil(C / 16) (N16CX)
    Py_ssize_t lanes
    Py_ssize_t size[_AXES]
    Py_ssize_t out[_AXES]
    Py_ssize_t kernel[_AXES]
    Py_ssize_t stride[_AXES]
    Py_ssize_t pad[_AXES]
    Py_ssize_t dil[_AXES]
    int mode                     # 1: p = 1, 2: p = 2, 0: powf
    float p
    float inv_p


cdef void _lp_row(const _LpArgs* a, Py_ssize_t row) noexcept nogil:
    cdef Py_ssize_t o1 = row % a.out[1]
    cdef Py_ssize_t rest = row // a.out[1]
    cdef Py_ssize_t o0 = rest % a.out[0]
    cdef Py_ssize_t plane = rest // a.out[0]
    cdef Py_ssize_t lanes = a.lanes, o2, k0, k1, k2, i0, i1, i2, l
    cdef const float* xp = a.x + plane * a.size[0] * a.size[1] * a.size[2] * lanes
    cdef float* yrow = a.y + ((plane * a.out[0] + o0) * a.out[1] + o1) * a.out[2] * lanes
    cdef float* acc
    cdef const float* xt
    cdef float v, p = a.p, inv_p = a.inv_p
    cdef int mode = a.mode
    for o2 in range(a.out[2]):
        acc = yrow + o2 * lanes
        for l in range(lanes):
            acc[l] = 0
        for k0 in range(a.kernel[0]):
            i0 = o0 * a.stride[0] - a.pad[0] + k0 * a.dil[0]
            if i0 < 0 or i0 >= a.size[0]:
                continue
            for k1 in range(a.kernel[1]):
                i1 = o1 * a.stride[1] - a.pad[1] + k1 * a.dil[1]
                if i1 < 0 or i1 >= a.size[1]:
                    continue
                for k2 in range(a.kernel[2]):
                    i2 = o2 * a.stride[2] - a.pad[2] + k2 * a.dil[2]
                    if i2 < 0 or i2 >= a.size[2]:
                        continue
                    xt = xp + ((i0 * a.size[1] + i1) * a.size[2] + i2) * lanes
                    if mode == 2:
                        for l in range(lanes):
                            acc[l] += xt[l] * xt[l]
                    elif mode == 1:
                        for l in range(lanes):
                            acc[l] += fabsf(xt[l])
                    else:
                        for l in range(lanes):
                            acc[l] += powf(fabsf(xt[l]), p)
        if mode == 2:
            for l in range(lanes):
                acc[l] = sqrtf(acc[l])
        elif mode == 0:
            for l in range(lanes):
                acc[l] = powf(acc[l], inv_p)


cdef void _lp_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _LpArgs* a = <const _LpArgs*>p
    cdef Py_ssize_t begin, end, row
    ppl_partition(a.planes * a.out[0] * a.out[1], tid, nthreads, &begin, &end)
    for row in range(begin, end):
        _lp_row(a, row)


def _axes3(name, values, Py_ssize_t fill, Py_ssize_t minimum):
    values = tuple(int(v) for v in values)
    if not 1 <= len(values) <= _AXES or any(v < minimum for v in values):
        raise ValueError(f"{name} must have 1 to 3 values >= {minimum}, got {list(values)}")
    return (fill,) * (_AXES - len(values)) + values


def make_lppool_step(size_t x, size_t y, Py_ssize_t planes, Py_ssize_t lanes, in_spatial,
                     out_spatial, kernel, strides, pads_begin, dilations, float p):
    """The step computing y = (sum of |x|^p over each window)^(1/p): x (planes, *in_spatial,
    lanes) and y (planes, *out_spatial, lanes); lanes 1 (NDARRAY) or 16 (N16CX)."""
    rank = len(tuple(in_spatial))
    if any(len(tuple(v)) != rank for v in (out_spatial, kernel, strides, pads_begin,
                                            dilations)):
        raise ValueError("make_lppool_step: every geometry argument needs one value per axis")
    size = _axes3("in_spatial", in_spatial, 1, 1)
    out = _axes3("out_spatial", out_spatial, 1, 1)
    ker = _axes3("kernel", kernel, 1, 1)
    st = _axes3("strides", strides, 1, 1)
    pb = _axes3("pads_begin", pads_begin, 0, 0)
    dl = _axes3("dilations", dilations, 1, 1)
    if lanes not in (1, 16) or planes < 1:
        raise ValueError(f"make_lppool_step: lanes must be 1 or 16 and planes >= 1, got "
                         f"{lanes}, {planes}")
    if not p > 0:
        raise ValueError(f"make_lppool_step: p must be > 0, got {p}")
    cdef double taps = <double>planes * lanes * out[0] * out[1] * out[2] * ker[0] * ker[1] * ker[2]
    cdef Step step = new_step(_lp_step, sizeof(_LpArgs), taps >= _PARALLEL_MIN)
    cdef _LpArgs* a = <_LpArgs*>step.args
    cdef int i
    a.x = <const float*>x
    a.y = <float*>y
    a.planes, a.lanes = planes, lanes
    for i in range(_AXES):
        a.size[i], a.out[i], a.kernel[i] = size[i], out[i], ker[i]
        a.stride[i], a.pad[i], a.dil[i] = st[i], pb[i], dl[i]
    a.mode = 1 if p == 1 else (2 if p == 2 else 0)
    a.p = p
    a.inv_p = 1 / p
    return step


def lppool_fp32(x, out_spatial, kernel, strides, pads_begin, dilations, float p,
                int num_threads, bint n16cx=False):
    """Test wrapper: LpPool of x (N, C, *S) NDARRAY, or (N, CB, *S, 16) physical N16CX."""
    x = numpy.ascontiguousarray(x, dtype=numpy.float32)
    lanes = 16 if n16cx else 1
    spatial = x.shape[2:-1] if n16cx else x.shape[2:]
    shape = x.shape[:2] + tuple(out_spatial) + ((16,) if n16cx else ())
    y = numpy.empty(shape, dtype=numpy.float32)
    step = make_lppool_step(x.ctypes.data, y.ctypes.data, x.shape[0] * x.shape[1], lanes,
                            spatial, out_spatial, kernel, strides, pads_begin, dilations, p)
    step.keep = (x, y)
    run_steps([step], num_threads)
    return y


cdef struct _UnpoolArgs:
    const float* x
    const int64_t* indices
    float* y
    Py_ssize_t count            # elements of x and of indices
    Py_ssize_t y_count          # elements of y
    Py_ssize_t src_total        # elements of the unpooled shape the indices address
    int same                    # the unpooled shape is y's: no decomposition
    Py_ssize_t src[_DIMS]       # the unpooled shape, padded with leading 1s
    Py_ssize_t dst[_DIMS]       # y's shape, likewise
    ppl_fault fault             # an index out of range, fed at run time


cdef void _unpool_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _UnpoolArgs* a = <const _UnpoolArgs*>p
    cdef Py_ssize_t i, j, v, rest, off, coord, stride
    cdef bint inside
    memset(a.y, 0, a.y_count * sizeof(float))
    for i in range(a.count):
        v = <Py_ssize_t>a.indices[i]
        if v < 0 or v >= a.src_total:
            ppl_fault_record(<ppl_fault *>&a.fault, v)
            continue
        if a.same:
            a.y[v] = a.x[i]
            continue
        rest = v
        off = 0
        inside = True
        stride = 1
        for j in range(_DIMS - 1, -1, -1):
            coord = rest % a.src[j]
            rest = rest // a.src[j]
            if coord >= a.dst[j]:
                inside = False
                break
            off += coord * stride
            stride *= a.dst[j]
        if inside:
            a.y[off] = a.x[i]


def make_maxunpool_step(size_t x, size_t indices, size_t y, Py_ssize_t count, src_shape,
                        dst_shape):
    """The serial step computing y (dst_shape) = 0 then y[I[i]] = x[i], I indexing the
    unpooled shape src_shape (placed in y's leading corner); an index out of range is
    skipped and makes the run raise an InputError."""
    src = tuple(int(v) for v in src_shape)
    dst = tuple(int(v) for v in dst_shape)
    if len(src) != len(dst) or not 1 <= len(src) <= _DIMS or min(src + dst) < 0:
        raise ValueError(f"make_maxunpool_step: shapes {list(src)} and {list(dst)} must have "
                         f"the same rank, 1 to 5, and no negative dim")
    if count < 0:
        raise ValueError("make_maxunpool_step: negative count")
    cdef Step step = new_step(_unpool_step, sizeof(_UnpoolArgs), False)
    cdef _UnpoolArgs* a = <_UnpoolArgs*>step.args
    cdef int i
    pad = (1,) * (_DIMS - len(src))
    src, dst = pad + src, pad + dst
    a.x = <const float*>x
    a.indices = <const int64_t*>indices
    a.y = <float*>y
    a.count = count
    a.y_count = 1
    a.src_total = 1
    for i in range(_DIMS):
        a.src[i], a.dst[i] = src[i], dst[i]
        a.y_count *= dst[i]
        a.src_total *= src[i]
    a.same = src == dst
    set_fault(step, &a.fault, f"index {{value}} of I is out of range for the unpooled shape "
              f"{list(src_shape)} ({valid_indices(a.src_total, negative=False)})")
    return step


def maxunpool_fp32(x, indices, src_shape, dst_shape):
    """Test wrapper: y (dst_shape) = 0, y[I[i]] = x[i] with I indexing src_shape."""
    x = numpy.ascontiguousarray(x, dtype=numpy.float32)
    indices = numpy.ascontiguousarray(indices, dtype=numpy.int64)
    if x.size != indices.size:
        raise ValueError("maxunpool_fp32: x and indices need as many elements")
    y = numpy.empty(tuple(dst_shape), dtype=numpy.float32)
    step = make_maxunpool_step(x.ctypes.data, indices.ctypes.data, y.ctypes.data, x.size,
                               src_shape, dst_shape)
    step.keep = (x, indices, y)
    run_steps([step], 1)
    return y
