# Pooling kernels for float32: MaxPool, AveragePool and their global forms, in the NDARRAY
# and N16CX layouts, as compiled steps of the run plan (see pplpy/runtime/step.pxd).
#
# This body is written once and included by _pool_fp32_{avx512,fma,sse}.pyx; setup.py
# compiles each copy with its ISA's flags, so gcc vectorises the same loops three ways.
#
# Geometry.  One Window describes a pooling along three spatial axes (D, H, W); a 1-D or
# 2-D pool has size-1 leading axes (kernel 1, stride 1, pad 0, dilation 1).  Output
# position o along an axis reads the window starting at  o * stride - pad_begin  with taps
# start + k * dilation, k in [0, kernel).  Taps outside [0, size) are padding: they never
# win a max and are never summed.  Output sizes and pads come from
# pplpy.oputils.onnx.pool_geometry.resolve_pads; the kernels clip every read to the input,
# so any output shape is memory-safe.
#
# One row driver for every windowed pool.  A work item is one output row (n, c, od, oh, :)
# in NDARRAY or (n, cb, od, oh, :, 16) in N16CX: a row element is one float or one pixel of
# 16 channels (`lanes`).  For each valid tap (kd, kh, kw) the driver updates the row from
# one input row in a contiguous (stride 1) or strided loop, which gcc vectorises; the
# window's clipping becomes the row's [ow0, ow1) range.  Rows are independent, so a step
# splits them across the team with ppl_partition, and every thread count gives the same
# bytes.
#
# Max is _max_nan: `v if (v > m or v != v) else m`, so a NaN tap makes the output NaN
# wherever it lies in the window (numpy's max, PyTorch's max_pool; ReduceMax does the same;
# onnx.reference keeps a NaN only as a window's first tap, ONNX Runtime only as its last).
# With -fno-trapping-math gcc turns it into vector compares and a blend inside a loop of
# unknown trip count, but not in a 16-trip loop it unrolls first (the global max kernels
# stay scalar for that reason; they are rare and cheap).
#
# Post-op chains (_post_chain_fp32.h, fused by passes/fuse_post_ops.py): a step given one
# applies it to each output row right after the row is done (a global pool: to each (n, c)
# value or (n, cb) block), while the row is in L1: an NDARRAY row belongs to one channel, an
# N16CX row is a tile of pixels x 16 channels whose padding lanes the chain leaves at 0.

from libc.math cimport INFINITY
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as _numpy  # (private: the module's public names are its kernels)

from pplpy.runtime.step import run_steps

include "_brgemm_fp32.pxi"  # the post-op chain declarations (_post_chain_fp32.pxi)

cdef extern from "_post_chain_fp32.h" nogil:
    void ppl_post_chain_plane(const ppl_post_chain *ch, int first, float *c, Py_ssize_t n,
                              Py_ssize_t channel)

cdef enum:
    LANES = 16      # channels per N16CX block
    AXES = 3        # spatial axes of a Window
    # Work (floats read or window taps) below which a step runs serially: a fork and join
    # cost more than they save.
    PARALLEL_MIN = 65536
    # Input rows at most this wide are combined down the window first (_pool_row).
    COLUMN_ROW_MAX = 4096

cdef enum PoolKind:
    POOL_MAX = 0
    POOL_MAX_INDEX = 1    # MaxPool with its Indices output (NDARRAY only)
    POOL_AVG = 2


cdef struct Window:
    # Geometry of one pooling along each of the AXES spatial axes.
    Py_ssize_t size[AXES]        # input extent
    Py_ssize_t out[AXES]         # output extent
    Py_ssize_t kernel[AXES]
    Py_ssize_t stride[AXES]
    Py_ssize_t pad_begin[AXES]
    Py_ssize_t pad_end[AXES]
    Py_ssize_t dilation[AXES]
    # The box [count_lo, count_hi) of cells AveragePool divides by: the input, or with
    # count_include_pad the input and its explicit pads.  Cells past pad_end (added by
    # ceil_mode) are never counted; a window with no counted cell gives 0 / 0 = NaN, as
    # onnx.reference's np.average of nothing does.
    Py_ssize_t count_lo[AXES]
    Py_ssize_t count_hi[AXES]


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


cdef inline void _divide_by_counts(float* y, Py_ssize_t lanes, float count_dh,
                                   const float* w_counts, Py_ssize_t ow_n) noexcept nogil:
    """y[ow, :] /= count_dh * w_counts[ow]: the window's counted cells (exact in float); rows
    of `lanes`."""
    cdef Py_ssize_t ow, j
    cdef float c
    if lanes == 1:
        for ow in range(ow_n):
            y[ow] = y[ow] / (count_dh * w_counts[ow])
        return
    for ow in range(ow_n):
        c = count_dh * w_counts[ow]
        for j in range(ow * lanes, (ow + 1) * lanes):
            y[j] = y[j] / c


cdef object _row_tables(const Window* w):
    """(w_ranges, w_counts, d_taps, h_taps) of _PoolArgs for this window, as arrays a step
    keeps."""
    cdef Py_ssize_t kw, o, o0, o1, unused, first, axis
    ranges = _numpy.zeros((max(w.kernel[2], 1), 2), _numpy.intp)
    counts = _numpy.zeros(max(w.out[2], 1), _numpy.float32)
    cdef Py_ssize_t[:, ::1] rv = ranges
    cdef Py_ssize_t[:, ::1] tv
    cdef float[::1] cv = counts
    for kw in range(w.kernel[2]):
        _row_range(kw * w.dilation[2] - w.pad_begin[2], w.stride[2], w.size[2], w.out[2],
                   &o0, &o1)
        rv[kw, 0], rv[kw, 1] = o0, o1
    for o in range(w.out[2]):
        cv[o] = <float>_tap_count(o * w.stride[2] - w.pad_begin[2], w.dilation[2],
                                  w.kernel[2], w.count_lo[2], w.count_hi[2], &unused)
    taps = []
    for axis in range(2):
        table = _numpy.zeros((max(w.out[axis], 1), 3), _numpy.intp)
        tv = table
        for o in range(w.out[axis]):
            start = o * w.stride[axis] - w.pad_begin[axis]
            tv[o, 1] = _tap_count(start, w.dilation[axis], w.kernel[axis], 0, w.size[axis],
                                  &first)
            tv[o, 0] = first
            tv[o, 2] = _tap_count(start, w.dilation[axis], w.kernel[axis], w.count_lo[axis],
                                  w.count_hi[axis], &unused)
        taps.append(table)
    return ranges, counts, taps[0], taps[1]


# ---------------------------------------------------------------------------------------
# Row updates: the vectorised inner loops (NDARRAY: an element is one float)

cdef inline float _max_nan(float v, float m) noexcept nogil:
    """max(m, v) where a NaN on either side wins (the accumulator m sticks once NaN)."""
    m = v if v > m else m
    return v if v != v else m


cdef inline void _max_into(float* y, const float* x, Py_ssize_t n,
                           Py_ssize_t stride) noexcept nogil:
    """y[j] = max(y[j], x[j * stride]) for j < n."""
    cdef Py_ssize_t j
    # A separate unit-stride loop gives gcc contiguous loads (the common stride-1 case).
    if stride == 1:
        for j in range(n):
            y[j] = _max_nan(x[j], y[j])
    else:
        for j in range(n):
            y[j] = _max_nan(x[j * stride], y[j])


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


# N16CX: an element is a pixel of 16 floats.  (Keeping one pixel's 16 lanes in a local array
# instead left its max scalar: gcc unrolls a 16-trip loop completely before its vectoriser
# can if-convert the select.)

cdef inline void _max_into_blocks(float* y, const float* x, Py_ssize_t n,
                                  Py_ssize_t stride) noexcept nogil:
    """y[j, :] = max(y[j, :], x[j * stride, :]) for j < n, rows of 16 floats."""
    cdef Py_ssize_t j, lane
    for j in range(n):
        for lane in range(LANES):
            y[j * LANES + lane] = _max_nan(x[j * stride * LANES + lane], y[j * LANES + lane])


cdef inline void _add_into_blocks(float* y, const float* x, Py_ssize_t n,
                                  Py_ssize_t stride) noexcept nogil:
    """y[j, :] += x[j * stride, :] for j < n, rows of 16 floats."""
    cdef Py_ssize_t j, lane
    for j in range(n):
        for lane in range(LANES):
            y[j * LANES + lane] += x[j * stride * LANES + lane]


# ---------------------------------------------------------------------------------------
# The row driver: one output row of any windowed pool

cdef struct _PoolArgs:
    Window w
    const float* x
    float* y
    int64_t* indices       # POOL_MAX_INDEX only
    Py_ssize_t rows        # work items: planes * out[0] * out[1]
    Py_ssize_t lanes       # floats per row element: 1 (NDARRAY) or LANES (N16CX)
    Py_ssize_t in_plane    # floats per (n, c) or (n, cb) plane
    Py_ssize_t out_plane
    int kind               # PoolKind
    bint column_major      # storage_order=1 for Indices
    Py_ssize_t chans       # channels C (for the post-op chain)
    ppl_post_chain chain   # len 0: none
    # The same for every row (made once by _window_step, _row_tables): per W tap kw, the
    # outputs [o0, o1) whose tap lands inside the row; AveragePool: per output column, the
    # taps of its window along W inside the counted box.  Computed for each row, their
    # integer divisions cost more than the adds of a narrow row (an NDARRAY 3x3 pool over
    # 320 x 14 x 14 took 10x ONNX Runtime's time).
    const Py_ssize_t* w_ranges   # (kernel[2], 2)
    const float* w_counts        # (out[2],)
    # Per output index along D and H: (first tap inside the input, taps inside it, taps
    # inside the counted box).
    const Py_ssize_t* d_taps     # (out[0], 3)
    const Py_ssize_t* h_taps     # (out[1], 3)


cdef void _chain_pixels(const ppl_post_chain* ch, float* y, Py_ssize_t plane,
                        Py_ssize_t pixels, Py_ssize_t lanes, Py_ssize_t chans) noexcept nogil:
    """The post-op chain over `pixels` output pixels at y, of plane `plane`: (n, c) with one
    float a pixel (NDARRAY), (n, cb) with LANES floats a pixel (N16CX)."""
    cdef Py_ssize_t c0
    if lanes == 1:
        ppl_post_chain_plane(ch, 0, y, pixels, plane % chans)
    else:
        c0 = (plane % ((chans + LANES - 1) // LANES)) * LANES
        ppl_post_chain_tile(ch, 0, y, LANES, LANES, pixels, _imin(LANES, chans - c0), c0)


cdef inline void _update_row(int kind, Py_ssize_t lanes, float* y, const float* x, Py_ssize_t n,
                             Py_ssize_t stride) noexcept nogil:
    if kind == POOL_AVG:
        if lanes == 1:
            _add_into(y, x, n, stride)
        else:
            _add_into_blocks(y, x, n, stride)
    elif lanes == 1:
        _max_into(y, x, n, stride)
    else:
        _max_into_blocks(y, x, n, stride)


cdef void _column_combine(int kind, const float* x, Py_ssize_t W, Py_ssize_t H,
                          Py_ssize_t start_d, Py_ssize_t dil_d, Py_ssize_t kd0, Py_ssize_t nd,
                          Py_ssize_t start_h, Py_ssize_t dil_h, Py_ssize_t kh0, Py_ssize_t nh,
                          float* column) noexcept nogil:
    """column[j] = max (or sum) over the window's valid (kd, kh) input rows of row[j], j < W
    (NDARRAY: the rows are contiguous)."""
    cdef Py_ssize_t kd, kh, j
    cdef const float* xrow
    cdef bint first = True
    for kd in range(kd0, kd0 + nd):
        for kh in range(kh0, kh0 + nh):
            xrow = x + ((start_d + kd * dil_d) * H + start_h + kh * dil_h) * W
            if first:
                memcpy(column, xrow, W * sizeof(float))
                first = False
            elif kind == POOL_AVG:
                for j in range(W):
                    column[j] += xrow[j]
            else:
                for j in range(W):
                    column[j] = _max_nan(xrow[j], column[j])


cdef void _max_index_taps(const float* xrow, float* yrow, int64_t* irow, int64_t row_index,
                          int64_t w_step, const Window* w) noexcept nogil:
    """Fold one input row's taps into a max row and its ONNX Indices (first maximum wins)."""
    cdef Py_ssize_t kw, ow, iw, offset, o0, o1
    cdef float v
    for kw in range(w.kernel[2]):
        offset = kw * w.dilation[2] - w.pad_begin[2]
        _row_range(offset, w.stride[2], w.size[2], w.out[2], &o0, &o1)
        for ow in range(o0, o1):
            iw = ow * w.stride[2] + offset
            v = xrow[iw]
            # Strictly greater keeps the first maximum; the first tap always lands, as in
            # onnx.reference, so an all -inf window gets an index; the first NaN wins and
            # sticks (numpy's argmax).
            if v > yrow[ow] or irow[ow] < 0 or (v != v and yrow[ow] == yrow[ow]):
                yrow[ow] = v
                irow[ow] = row_index + iw * w_step


cdef void _pool_row(const _PoolArgs* a, Py_ssize_t plane, Py_ssize_t od,
                    Py_ssize_t oh) noexcept nogil:
    """Output row (plane, od, oh) of a windowed pool: max, max with Indices, or average."""
    cdef const Window* w = &a.w
    cdef Py_ssize_t D = w.size[0], H = w.size[1], W = w.size[2], OW = w.out[2]
    cdef Py_ssize_t L = a.lanes, sw = w.stride[2], r = od * w.out[1] + oh
    cdef Py_ssize_t start_d = od * w.stride[0] - w.pad_begin[0]
    cdef Py_ssize_t start_h = oh * w.stride[1] - w.pad_begin[1]
    cdef Py_ssize_t kd, kh, kw, id_, ih, offset, o0, o1, j, count_dh
    cdef Py_ssize_t kd0 = a.d_taps[3 * od], nd = a.d_taps[3 * od + 1]
    cdef Py_ssize_t kh0 = a.h_taps[3 * oh], nh = a.h_taps[3 * oh + 1]
    cdef const float* x = a.x + plane * a.in_plane
    cdef float* yrow = a.y + plane * a.out_plane + r * OW * L
    cdef const float* xrow
    cdef int64_t* irow = NULL
    cdef int64_t w_step = 0, base = 0
    cdef float init = 0.0 if a.kind == POOL_AVG else -INFINITY
    cdef float column[COLUMN_ROW_MAX]
    for j in range(OW * L):
        yrow[j] = init
    if a.kind == POOL_MAX_INDEX:
        # ONNX's Indices flatten (n, c, spatial...) row-major, or with storage_order=1 the
        # spatial part column-major: first spatial axis fastest.
        irow = a.indices + plane * a.out_plane + r * OW
        for j in range(OW):
            irow[j] = -1
        w_step = D * H if a.column_major else 1
        base = plane * a.in_plane
    if L == 1 and a.kind != POOL_MAX_INDEX and nd * nh > 1 and W <= COLUMN_ROW_MAX:
        # NDARRAY: combine the window's input rows first (max or sum, along whole contiguous
        # rows), then the W taps once over that row: a call per tap and row on rows of a few
        # dozen outputs cost more than its work (a 3 x 3 / 2 MaxPool of (1, 64, 112, 112)
        # took 0.60 ms, ONNX Runtime's 0.16).  Max and sum are both separable.
        _column_combine(a.kind, x, W, H, start_d, w.dilation[0], kd0, nd, start_h,
                        w.dilation[1], kh0, nh, column)
        for kw in range(w.kernel[2]):
            o0, o1 = a.w_ranges[2 * kw], a.w_ranges[2 * kw + 1]
            if o1 > o0:
                offset = kw * w.dilation[2] - w.pad_begin[2]
                _update_row(a.kind, 1, yrow + o0, column + o0 * sw + offset, o1 - o0, sw)
        nd = 0      # the taps are done
    for kd in range(kd0, kd0 + nd):
        id_ = start_d + kd * w.dilation[0]
        for kh in range(kh0, kh0 + nh):
            ih = start_h + kh * w.dilation[1]
            xrow = x + (id_ * H + ih) * W * L
            if a.kind == POOL_MAX_INDEX:
                _max_index_taps(xrow, yrow, irow,
                                base + (id_ + ih * D if a.column_major else (id_ * H + ih) * W),
                                w_step, w)
                continue
            for kw in range(w.kernel[2]):
                o0, o1 = a.w_ranges[2 * kw], a.w_ranges[2 * kw + 1]
                if o1 > o0:
                    offset = kw * w.dilation[2] - w.pad_begin[2]
                    _update_row(a.kind, L, yrow + o0 * L, xrow + (o0 * sw + offset) * L,
                                o1 - o0, sw)
    if a.kind == POOL_AVG:
        # The counted cells form a box, so the count is a product of per-axis counts.
        count_dh = a.d_taps[3 * od + 2] * a.h_taps[3 * oh + 2]
        _divide_by_counts(yrow, L, <float>count_dh, a.w_counts, OW)
    if a.chain.len > 0:
        _chain_pixels(&a.chain, yrow, plane, OW, L, a.chans)


cdef void _pool_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _PoolArgs* a = <const _PoolArgs*>p
    cdef Py_ssize_t begin, end, row, plane, od, oh, per_plane = a.w.out[0] * a.w.out[1]
    ppl_partition(a.rows, tid, nthreads, &begin, &end)
    if begin >= end:
        return
    plane, od, oh = begin // per_plane, begin % per_plane // a.w.out[1], begin % a.w.out[1]
    for row in range(begin, end):  # rows in order: (plane, od, oh) counted up, no division
        _pool_row(a, plane, od, oh)
        oh += 1
        if oh == a.w.out[1]:
            oh = 0
            od += 1
            if od == a.w.out[0]:
                od = 0
                plane += 1


# ---------------------------------------------------------------------------------------
# Global pooling: one work item per (n, c) row (NDARRAY) or (n, cb) plane (N16CX)

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


cdef extern from *:
    """
    /* The global max kernels in GCC's generic vectors of PPL_VLEN floats (the tier's
     * register width): written as scalar 16-lane loops, gcc unrolls them before its
     * vectoriser can turn the NaN-sticky select into compares and a blend (see the head of
     * _pool_fp32.pxi), and they ran 3-4x slower than a NaN-blind scalar maxss. */
    #include <math.h>
    #include <string.h>
    typedef float ppl_pool_vf __attribute__((vector_size(PPL_VLEN * 4)));
    typedef int ppl_pool_vi __attribute__((vector_size(PPL_VLEN * 4)));
    #define PPL_POOL_NV (16 / PPL_VLEN)

    /* acc = max(acc, v) lane by lane, a NaN on either side sticking. */
    static inline ppl_pool_vf ppl_pool_max_nan(ppl_pool_vf acc, ppl_pool_vf v) {
        ppl_pool_vi take = (v > acc) | (v != v);
        return (ppl_pool_vf)(((ppl_pool_vi)v & take) | ((ppl_pool_vi)acc & ~take));
    }

    /* y[0..16) = max over s < n of x[s * 16 + lane] (an N16CX plane). */
    static inline void ppl_pool_global_max16(const float *x, float *y, ptrdiff_t n) {
        ppl_pool_vf acc[PPL_POOL_NV], v;
        ptrdiff_t s;
        int k, lane;
        for (k = 0; k < PPL_POOL_NV; k++)
            for (lane = 0; lane < PPL_VLEN; lane++) acc[k][lane] = -INFINITY;
        for (s = 0; s < n; s++) {
            for (k = 0; k < PPL_POOL_NV; k++) {
                memcpy(&v, x + s * 16 + k * PPL_VLEN, sizeof v);
                acc[k] = ppl_pool_max_nan(acc[k], v);
            }
        }
        memcpy(y, acc, sizeof acc);
    }

    /* max(x[0..n)), -inf if n == 0, NaN if any is. */
    static inline float ppl_pool_row_max(const float *x, ptrdiff_t n) {
        float lanes[16], best = -INFINITY;
        ptrdiff_t j, blocks = n / 16;
        int lane;
        ppl_pool_global_max16(x, lanes, blocks);
        for (lane = 0; lane < 16; lane++)
            if (lanes[lane] > best || lanes[lane] != lanes[lane]) best = lanes[lane];
        for (j = blocks * 16; j < n && best == best; j++)
            if (x[j] > best || x[j] != x[j]) best = x[j];
        return best;
    }
    """
    void _global_maxpool_n16cx_plane "ppl_pool_global_max16" (const float* x, float* y,
                                                             Py_ssize_t n) noexcept nogil
    float _row_max "ppl_pool_row_max" (const float* x, Py_ssize_t n) noexcept nogil


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


cdef struct _GlobalArgs:
    const float* x
    float* y
    Py_ssize_t items       # rows (NDARRAY) or planes (N16CX)
    Py_ssize_t n           # spatial size
    bint blocked           # N16CX: an item is n pixels of LANES floats
    bint is_max
    Py_ssize_t chans       # channels C (for the post-op chain)
    ppl_post_chain chain   # len 0: none


cdef void _global_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _GlobalArgs* a = <const _GlobalArgs*>p
    cdef Py_ssize_t begin, end, i, n = a.n
    ppl_partition(a.items, tid, nthreads, &begin, &end)
    for i in range(begin, end):
        if a.blocked:
            if a.is_max:
                _global_maxpool_n16cx_plane(a.x + i * n * LANES, a.y + i * LANES, n)
            else:
                _global_avgpool_n16cx_plane(a.x + i * n * LANES, a.y + i * LANES, n)
        elif a.is_max:
            a.y[i] = _row_max(a.x + i * n, n)
        else:
            a.y[i] = _row_sum(a.x + i * n, n) / <float>n
        if a.chain.len > 0:
            _chain_pixels(&a.chain, a.y + i * (LANES if a.blocked else 1), i, 1,
                          LANES if a.blocked else 1, a.chans)


# ---------------------------------------------------------------------------------------
# Making steps: check arguments, fill a Window (the one geometry helper of every pool)

cdef tuple _dims(const Py_ssize_t* shape, int ndim):
    """A memoryview's shape as a tuple (its .shape is a C array)."""
    return tuple([shape[i] for i in range(ndim)])


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


cdef Py_ssize_t _window_step_args(_PoolArgs* a, str op, int kind, Py_ssize_t lanes,
                                  tuple x_shape, tuple y_shape, kernel, strides, pads_begin,
                                  pads_end, dilations, bint count_include_pad) except -1:
    """Check shapes and fill a's geometry; return the work (floats read or taps) of the step.

    x_shape, y_shape: (N, C, *spatial) with lanes 1, (N, Cb, *spatial, 16) with LANES;
    1 to 3 spatial axes, each attribute one value per spatial axis."""
    cdef Py_ssize_t lead = 2, tail = 0 if lanes == 1 else 1, rank, first, axis, taps = 1
    cdef Window* w = &a.w
    rank = len(x_shape) - lead - tail
    if len(y_shape) != len(x_shape) or not 1 <= rank <= AXES:
        raise ValueError(f"{op}: x {list(x_shape)} and y {list(y_shape)} must both be "
                         f"(N, C{'b' if tail else ''}, 1 to 3 spatial dims"
                         f"{', 16' if tail else ''})")
    if x_shape[:lead] != y_shape[:lead]:
        raise ValueError(
            f"{op}: x {list(x_shape)} and y {list(y_shape)} must share their first {lead} dims"
        )
    if tail and (x_shape[len(x_shape) - 1] != LANES or y_shape[len(y_shape) - 1] != LANES):
        raise ValueError(
            f"{op}: x {list(x_shape)} and y {list(y_shape)} must end in a {LANES}-channel block"
        )
    first = AXES - rank
    _set_axes(w.size, "input spatial shape", x_shape[lead:lead + rank], first, 0, 1)
    _set_axes(w.out, "output spatial shape", y_shape[lead:lead + rank], first, 0, 1)
    _set_axes(w.kernel, "kernel", kernel, first, 1, 1)
    _set_axes(w.stride, "strides", strides, first, 1, 1)
    _set_axes(w.pad_begin, "pads_begin", pads_begin, first, 0, 0)
    _set_axes(w.pad_end, "pads_end", pads_end, first, 0, 0)
    _set_axes(w.dilation, "dilations", dilations, first, 1, 1)
    for axis in range(AXES):
        w.count_lo[axis] = -w.pad_begin[axis] if count_include_pad else 0
        w.count_hi[axis] = w.size[axis] + (w.pad_end[axis] if count_include_pad else 0)
        taps *= w.kernel[axis]
    a.kind = kind
    a.lanes = lanes
    a.in_plane = w.size[0] * w.size[1] * w.size[2] * lanes
    a.out_plane = w.out[0] * w.out[1] * w.out[2] * lanes
    cdef Py_ssize_t planes = x_shape[0] * x_shape[1]
    a.rows = 0 if a.out_plane == 0 else planes * w.out[0] * w.out[1]
    if a.rows and a.in_plane == 0:
        raise ValueError(f"{op}: empty input spatial shape {list(x_shape[lead:lead + rank])}")
    return planes * max(a.in_plane, a.out_plane * taps)


cdef int _pool_chain(ppl_post_chain* chain, Py_ssize_t* chans, str op, post_chain,
                     Py_ssize_t channels, size_t y, bint with_indices) except -1:
    """Fill a step's chain (and its channel count) from make_*_step's arguments: post_chain
    the entries of _post_chain_fp32.pxi, channels the output's C; keep (new_step) holds
    what the step reads."""
    entries = [tuple(e) for e in post_chain]
    if entries and (channels < 1 or with_indices):
        raise ValueError(f"{op}: a post-op chain needs channels >= 1 and no Indices output")
    _fill_post_chain(chain, entries, y, channels, op)
    chans[0] = max(channels, 1)
    return 0


cdef Step _window_step(str op, int kind, Py_ssize_t lanes, size_t x, size_t y, size_t indices,
                       x_shape, y_shape, kernel, strides, pads_begin, pads_end, dilations,
                       bint count_include_pad, bint column_major, post_chain=(),
                       Py_ssize_t channels=0, keep=()):
    cdef _PoolArgs args
    _pool_chain(&args.chain, &args.chans, op, post_chain, channels, y, kind == POOL_MAX_INDEX)
    cdef Py_ssize_t work = _window_step_args(
        &args, op, kind, lanes, tuple(x_shape), tuple(y_shape), kernel, strides, pads_begin,
        pads_end, dilations, count_include_pad)
    if args.rows and (x == 0 or y == 0 or (kind == POOL_MAX_INDEX and indices == 0)):
        raise ValueError(f"{op}: null address")
    args.x = <const float*>x
    args.y = <float*>y
    args.indices = <int64_t*>indices
    args.column_major = column_major
    tables = _row_tables(&args.w)
    cdef Py_ssize_t[:, ::1] rv = tables[0]
    cdef float[::1] cv = tables[1]
    cdef Py_ssize_t[:, ::1] dv = tables[2]
    cdef Py_ssize_t[:, ::1] hv = tables[3]
    args.w_ranges, args.w_counts = &rv[0, 0], &cv[0]
    args.d_taps, args.h_taps = &dv[0, 0], &hv[0, 0]
    cdef Step step = new_step(_pool_step, sizeof(_PoolArgs),
                              work >= PARALLEL_MIN and args.rows > 1, (keep, tables))
    (<_PoolArgs*>step.args)[0] = args
    return step


def make_maxpool_ndarray_step(size_t x, size_t y, size_t indices, x_shape, y_shape, kernel,
                              strides, pads_begin, dilations, int storage_order=0,
                              *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[n, c, o] = max over in-bounds taps t of
    x[n, c, o * strides - pads_begin + t * dilations].

    x_shape (N, C, *spatial), y_shape (N, C, *out_spatial), 1 to 3 spatial axes; indices 0
    or the address of int64 shaped like y (ONNX MaxPool's Indices, storage_order 0
    row-major, 1 column-major over the spatial axes)."""
    if storage_order not in (0, 1):
        raise ValueError(f"maxpool_ndarray_fp32: storage_order must be 0 or 1, got "
                         f"{storage_order}")
    rank = len(tuple(x_shape)) - 2
    return _window_step("maxpool_ndarray_fp32", POOL_MAX_INDEX if indices else POOL_MAX, 1, x,
                        y, indices, x_shape, y_shape, kernel, strides, pads_begin,
                        (0,) * max(rank, 0), dilations, False, storage_order == 1,
                        post_chain, channels, keep)


def make_avgpool_ndarray_step(size_t x, size_t y, x_shape, y_shape, kernel, strides,
                              pads_begin, pads_end, dilations, bint count_include_pad,
                              *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[n, c, o] = sum of in-bounds taps / count (taps in x, + pads if count_include_pad).

    Shapes as make_maxpool_ndarray_step; cells beyond pads_end (from ceil_mode) are never
    counted."""
    return _window_step("avgpool_ndarray_fp32", POOL_AVG, 1, x, y, 0, x_shape, y_shape, kernel,
                        strides, pads_begin, pads_end, dilations, count_include_pad, False,
                        post_chain, channels, keep)


def make_maxpool_n16cx_step(size_t x, size_t y, x_shape, y_shape, kernel, strides, pads_begin,
                            dilations,
                            *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: make_maxpool_ndarray_step's max for x_shape (N, Cb, *spatial, 16), y likewise."""
    rank = len(tuple(x_shape)) - 3
    return _window_step("maxpool_n16cx_fp32", POOL_MAX, LANES, x, y, 0, x_shape, y_shape,
                        kernel, strides, pads_begin, (0,) * max(rank, 0), dilations, False,
                        False,
                        post_chain, channels, keep)


def make_avgpool_n16cx_step(size_t x, size_t y, x_shape, y_shape, kernel, strides, pads_begin,
                            pads_end, dilations, bint count_include_pad,
                            *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: make_avgpool_ndarray_step's average for x_shape (N, Cb, *spatial, 16)."""
    return _window_step("avgpool_n16cx_fp32", POOL_AVG, LANES, x, y, 0, x_shape, y_shape,
                        kernel, strides, pads_begin, pads_end, dilations, count_include_pad,
                        False,
                        post_chain, channels, keep)


cdef Step _global_step_of(str op, size_t x, size_t y, Py_ssize_t items, Py_ssize_t n,
                          bint blocked, bint is_max, post_chain, Py_ssize_t channels, keep):
    if items < 0 or n < 0:
        raise ValueError(f"{op}: negative size (items {items}, spatial size {n})")
    if items > 0 and n == 0:
        raise ValueError(f"{op}: empty spatial size")
    cdef Py_ssize_t work = items * n * (LANES if blocked else 1)
    cdef Step step = new_step(_global_step, sizeof(_GlobalArgs),
                              work >= PARALLEL_MIN and items > 1, keep)
    cdef _GlobalArgs* a = <_GlobalArgs*>step.args
    a.x = <const float*>x
    a.y = <float*>y
    a.items = items
    a.n = n
    a.blocked = blocked
    a.is_max = is_max
    _pool_chain(&a.chain, &a.chans, op, post_chain, channels, y, False)
    return step


def make_global_avgpool_ndarray_step(size_t x, size_t y, Py_ssize_t rows, Py_ssize_t n,
                                     *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[r] = sum(x[r, :]) / n for x (rows, n), rows = N * C, n the spatial size."""
    return _global_step_of("global_avgpool_ndarray_fp32", x, y, rows, n, False, False,
                           post_chain, channels, keep)


def make_global_maxpool_ndarray_step(size_t x, size_t y, Py_ssize_t rows, Py_ssize_t n,
                                     *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[r] = max(x[r, :]) for x (rows, n)."""
    return _global_step_of("global_maxpool_ndarray_fp32", x, y, rows, n, False, True,
                           post_chain, channels, keep)


def make_global_avgpool_n16cx_step(size_t x, size_t y, Py_ssize_t planes, Py_ssize_t n,
                                   *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[p, :] = sum(x[p, :, :], axis=0) / n for x (planes, n, 16), y (planes, 16)."""
    return _global_step_of("global_avgpool_n16cx_fp32", x, y, planes, n, True, False,
                           post_chain, channels, keep)


def make_global_maxpool_n16cx_step(size_t x, size_t y, Py_ssize_t planes, Py_ssize_t n,
                                   *, post_chain=(), Py_ssize_t channels=0, keep=()):
    """Step: y[p, :] = max(x[p, :, :], axis=0) for x (planes, n, 16), y (planes, 16)."""
    return _global_step_of("global_maxpool_n16cx_fp32", x, y, planes, n, True, True,
                           post_chain, channels, keep)


# ---------------------------------------------------------------------------------------
# Python-visible wrappers for tests: build the step from memoryviews and run it

cdef inline size_t _addr(const void* p) noexcept:
    return <size_t>p


def maxpool_ndarray_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                         int64_t[:, :, :, :, ::1] indices, kernel, strides, pads_begin,
                         dilations, int storage_order, int num_threads):
    """y[n, c, o] = max over in-bounds taps of x[n, c, o * strides - pads_begin + t * dilations].

    x (N, C, D, H, W), y (N, C, OD, OH, OW), indices None or int64 shaped like y (ONNX
    MaxPool's Indices, storage_order 0 row-major, 1 column-major over the spatial axes).
    """
    y_shape = _dims(y.shape, 5)
    if indices is not None and _dims(indices.shape, 5) != y_shape:
        raise ValueError(
            f"maxpool_ndarray_fp32: indices {list(_dims(indices.shape, 5))} must have y's shape "
            f"{list(y_shape)}"
        )
    step = make_maxpool_ndarray_step(
        _addr(&x[0, 0, 0, 0, 0]) if x.size else 0, _addr(&y[0, 0, 0, 0, 0]) if y.size else 0,
        _addr(&indices[0, 0, 0, 0, 0]) if indices is not None and indices.size else 0,
        _dims(x.shape, 5), y_shape, kernel, strides, pads_begin, dilations, storage_order)
    run_steps([step], num_threads)


def avgpool_ndarray_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                         kernel, strides, pads_begin, pads_end, dilations,
                         bint count_include_pad, int num_threads):
    """y[n, c, o] = sum of in-bounds taps / count (taps in x, + explicit pads if count_include_pad).

    x (N, C, D, H, W), y (N, C, OD, OH, OW); cells beyond pads_end (from ceil_mode) are
    never counted.
    """
    step = make_avgpool_ndarray_step(
        _addr(&x[0, 0, 0, 0, 0]) if x.size else 0, _addr(&y[0, 0, 0, 0, 0]) if y.size else 0,
        _dims(x.shape, 5), _dims(y.shape, 5), kernel, strides, pads_begin, pads_end, dilations,
        count_include_pad)
    run_steps([step], num_threads)


def maxpool_n16cx_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                       kernel_hw, strides_hw, pads_begin_hw, dilations_hw, int num_threads):
    """y[n, cb, o] = max over in-bounds taps of x[n, cb, o * strides - pads_begin + t * dilations].

    x (N, Cb, H, W, 16), y (N, Cb, OH, OW, 16).
    """
    step = make_maxpool_n16cx_step(
        _addr(&x[0, 0, 0, 0, 0]) if x.size else 0, _addr(&y[0, 0, 0, 0, 0]) if y.size else 0,
        _dims(x.shape, 5), _dims(y.shape, 5), kernel_hw, strides_hw, pads_begin_hw,
        dilations_hw)
    run_steps([step], num_threads)


def avgpool_n16cx_fp32(const float[:, :, :, :, ::1] x, float[:, :, :, :, ::1] y,
                       kernel_hw, strides_hw, pads_begin_hw, pads_end_hw, dilations_hw,
                       bint count_include_pad, int num_threads):
    """y[n, cb, o, :] = sum of in-bounds taps / count, as avgpool_ndarray_fp32.

    x (N, Cb, H, W, 16), y (N, Cb, OH, OW, 16).
    """
    step = make_avgpool_n16cx_step(
        _addr(&x[0, 0, 0, 0, 0]) if x.size else 0, _addr(&y[0, 0, 0, 0, 0]) if y.size else 0,
        _dims(x.shape, 5), _dims(y.shape, 5), kernel_hw, strides_hw, pads_begin_hw,
        pads_end_hw, dilations_hw, count_include_pad)
    run_steps([step], num_threads)


cdef _check_global_rows(str op, const float[:, ::1] x, float[::1] y):
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{op}: x {list(_dims(x.shape, 2))} and y {[y.shape[0]]} need one "
                         "output per row")


def global_avgpool_ndarray_fp32(const float[:, ::1] x, float[::1] y, int num_threads):
    """y[r] = sum(x[r, :]) / S for x (R, S), R = N * C and S the spatial size."""
    _check_global_rows("global_avgpool_ndarray_fp32", x, y)
    if x.shape[0] == 0:
        return
    run_steps([make_global_avgpool_ndarray_step(_addr(&x[0, 0]) if x.size else 0,
                                                _addr(&y[0]), x.shape[0], x.shape[1])],
              num_threads)


def global_maxpool_ndarray_fp32(const float[:, ::1] x, float[::1] y, int num_threads):
    """y[r] = max(x[r, :]) for x (R, S), R = N * C and S the spatial size."""
    _check_global_rows("global_maxpool_ndarray_fp32", x, y)
    if x.shape[0] == 0:
        return
    run_steps([make_global_maxpool_ndarray_step(_addr(&x[0, 0]) if x.size else 0,
                                                _addr(&y[0]), x.shape[0], x.shape[1])],
              num_threads)


cdef _check_global_n16cx(str op, const float[:, :, :, ::1] x, float[:, :, ::1] y):
    if _dims(x.shape, 2) != _dims(y.shape, 2) or x.shape[3] != LANES or y.shape[2] != LANES:
        raise ValueError(f"{op}: expected x (N, Cb, S, {LANES}) and y (N, Cb, {LANES}), got x "
                         f"{list(_dims(x.shape, 4))} and y {list(_dims(y.shape, 3))}")


def global_avgpool_n16cx_fp32(const float[:, :, :, ::1] x, float[:, :, ::1] y,
                              int num_threads):
    """y[n, cb, :] = sum(x[n, cb, :, :], axis=spatial) / S for x (N, Cb, S, 16)."""
    _check_global_n16cx("global_avgpool_n16cx_fp32", x, y)
    if y.size == 0:
        return
    run_steps([make_global_avgpool_n16cx_step(_addr(&x[0, 0, 0, 0]) if x.size else 0,
                                              _addr(&y[0, 0, 0]), x.shape[0] * x.shape[1],
                                              x.shape[2])], num_threads)


def global_maxpool_n16cx_fp32(const float[:, :, :, ::1] x, float[:, :, ::1] y,
                              int num_threads):
    """y[n, cb, :] = max(x[n, cb, :, :], axis=spatial) for x (N, Cb, S, 16)."""
    _check_global_n16cx("global_maxpool_n16cx_fp32", x, y)
    if y.size == 0:
        return
    run_steps([make_global_maxpool_n16cx_step(_addr(&x[0, 0, 0, 0]) if x.size else 0,
                                              _addr(&y[0, 0, 0]), x.shape[0] * x.shape[1],
                                              x.shape[2])], num_threads)
