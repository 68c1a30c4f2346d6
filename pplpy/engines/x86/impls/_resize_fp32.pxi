# Resize / Upsample, RoiAlign and NonMaxSuppression for float32, as compiled steps of the run
# plan (see pplpy/runtime/step.pxd).  Written once, included by _resize_fp32_{avx512,fma,sse}.pyx.
#
# Resize is separable: every output element is a tensor product of per-axis taps,
#
#     y[o0, o1, ...] = sum_k0 sum_k1 ... w0[o0, k0] w1[o1, k1] ... x[i0[o0, k0], i1[o1, k1], ...]
#
# so it runs as one 1-D pass per resized axis, each a step (a barrier between passes):
#
#     y[a, o, b] = sum_k w[o, k] * x[a, index[o, k], b]       x viewed as (outer, in, inner)
#
# The caller (ops/onnx/resize.py) computes index and weight for every mode, coordinate
# transformation and antialias filter when the plan is made; the steps only gather and
# multiply-add.  A pass over an inner axis (inner > 1) streams whole rows of `inner` floats and
# vectorises over b; a pass over the last axis gathers along each row.  An output position whose
# source lies outside the crop (tf_crop_and_resize) gets the extrapolation value.  The N16CX
# layout (N, C/16, H, W, 16) is the same computation with the 16 lanes as the innermost axis.
#
# Post-op chains (_post_chain_fp32.h, fused by passes/fuse_post_ops.py: oneDNN Graph's
# "Resize + [Unary|Binary]*"): the last pass, which writes y, applies the chain to each row
# (or row piece) right after storing it, while it is in L1 (ppl_post_chain_range).
#
# RoiAlign samples each bin of each region on a regular grid and averages (or takes the max of)
# bilinear interpolations, as onnx.reference and ONNX Runtime do; the regions are data, so the
# step computes coordinates when it runs.  NonMaxSuppression is a serial greedy selection per
# (batch, class).

from libc.math cimport NAN, ceil, isnan
from libc.stdint cimport int64_t
from libc.stdlib cimport qsort
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as np

from pplpy.runtime.step import run_steps

include "_brgemm_fp32.pxi"  # the post-op chain declarations (_post_chain_fp32.pxi)

cdef enum:
    # Multiply-adds below which a step runs serially: a fork and join cost more than they save.
    PARALLEL_MIN = 65536
    # RoiAlign with sampling_ratio 0: samples per bin along one axis at most (see _grid).
    ADAPTIVE_SAMPLES_MAX = 256


# ---------------------------------------------------------------------------------------
# Resize: one 1-D pass

cdef struct AxisArgs:
    const float* x
    float* y
    Py_ssize_t outer, in_size, out_size, inner, taps
    const int64_t* index        # (out_size, taps), each in [0, in_size)
    const float* weight         # (out_size, taps)
    const unsigned char* outside  # NULL, or (out_size,): 1 where y takes `fill`
    float fill
    RunChain rc                 # the last pass's post-op chain; len 0: none


cdef void _axis_rows_step(const void* a, int tid, int nthreads) noexcept nogil:
    """inner > 1: y[a, o, :] = sum_k w[o, k] * x[a, index[o, k], :], one (a, o) row per item."""
    cdef const AxisArgs* p = <const AxisArgs*>a
    cdef Py_ssize_t begin, end, item, o, row, k, j
    cdef Py_ssize_t inner = p.inner, taps = p.taps, out_size = p.out_size
    cdef float* y
    cdef const float* src
    cdef float w, fill = p.fill
    ppl_partition(p.outer * out_size, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        row = item // out_size
        o = item - row * out_size
        y = p.y + item * inner
        if p.outside != NULL and p.outside[o]:
            for j in range(inner):
                y[j] = fill
            _run_chain(&p.rc, item * inner, inner)
            continue
        src = p.x + (row * p.in_size + p.index[o * taps]) * inner
        w = p.weight[o * taps]
        for j in range(inner):
            y[j] = w * src[j]
        for k in range(1, taps):
            src = p.x + (row * p.in_size + p.index[o * taps + k]) * inner
            w = p.weight[o * taps + k]
            for j in range(inner):
                y[j] = y[j] + w * src[j]
        _run_chain(&p.rc, item * inner, inner)


cdef inline void _last_axis_row(const AxisArgs* p, const float* x, float* y, Py_ssize_t o0,
                                Py_ssize_t o1) noexcept nogil:
    """y[o] = sum_k w[o, k] * x[index[o, k]] for o in [o0, o1) of one row."""
    cdef Py_ssize_t o, k, taps = p.taps
    cdef const int64_t* index = p.index
    cdef const float* weight = p.weight
    cdef float acc
    if taps == 1:
        for o in range(o0, o1):
            y[o] = weight[o] * x[index[o]]
    elif taps == 2:
        for o in range(o0, o1):
            y[o] = weight[2 * o] * x[index[2 * o]] + weight[2 * o + 1] * x[index[2 * o + 1]]
    else:
        for o in range(o0, o1):
            acc = weight[o * taps] * x[index[o * taps]]
            for k in range(1, taps):
                acc = acc + weight[o * taps + k] * x[index[o * taps + k]]
            y[o] = acc
    if p.outside != NULL:
        for o in range(o0, o1):
            if p.outside[o]:
                y[o] = p.fill


cdef void _axis_last_step(const void* a, int tid, int nthreads) noexcept nogil:
    """inner == 1: the flat outputs [begin, end) of (outer, out_size), row piece by row piece."""
    cdef const AxisArgs* p = <const AxisArgs*>a
    cdef Py_ssize_t begin, end, row, o0, o1, out_size = p.out_size
    ppl_partition(p.outer * out_size, tid, nthreads, &begin, &end)
    while begin < end:
        row = begin // out_size
        o0 = begin - row * out_size
        o1 = out_size if end - row * out_size > out_size else end - row * out_size
        _last_axis_row(p, p.x + row * p.in_size, p.y + row * out_size, o0, o1)
        _run_chain(&p.rc, row * out_size + o0, o1 - o0)
        begin = row * out_size + o1


def make_resize_axis_step(size_t x, size_t y, Py_ssize_t outer, Py_ssize_t in_size,
                          Py_ssize_t inner, index, weight, outside=None, float fill=0,
                          keep=None, *, post_chain=(), Py_ssize_t channels=0,
                          Py_ssize_t cstride=0, bint blocked=False):
    """The step y[a, o, b] = sum_k weight[o, k] * x[a, index[o, k], b] (x: (outer, in_size,
    inner), y: (outer, out_size, inner)); where ``outside[o]`` is set, y = ``fill``.
    ``index`` int64 and ``weight`` float32 are (out_size, taps) arrays the step keeps.
    ``post_chain``: post-op entries (_post_chain_fp32.pxi) applied to every output, y laid
    out as ``channels``, ``cstride`` and ``blocked`` say (ppl_post_chain_range)."""
    index = np.ascontiguousarray(index, dtype=np.int64)
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    if index.ndim != 2 or index.shape[1] < 1 or weight.shape != index.shape:
        raise ValueError(f"index {index.shape} and weight {weight.shape}: expected the same "
                         f"(out_size, taps) shape with taps >= 1")
    if outer < 0 or in_size < 0 or inner < 0:
        raise ValueError(f"outer {outer}, in_size {in_size}, inner {inner}: expected sizes")
    out_size = index.shape[0]
    if outside is not None:
        outside = np.ascontiguousarray(outside, dtype=np.uint8).reshape(-1)
        if outside.shape[0] != out_size:
            raise ValueError(f"outside has {outside.shape[0]} flags for {out_size} outputs")
    work = outer * out_size * inner
    if work > 0:
        if in_size == 0:
            raise ValueError("an empty input axis cannot be resized to a non-empty one")
        if index.size and (index.min() < 0 or index.max() >= in_size):
            raise ValueError(f"index out of range [0, {in_size})")
        if x == 0 or y == 0:
            raise ValueError("x and y must be valid addresses")
    cdef int64_t[:, ::1] idx_view = index
    cdef float[:, ::1] w_view = weight
    cdef unsigned char[::1] out_view
    cdef Step step = new_step(_axis_rows_step if inner > 1 else _axis_last_step,
                              sizeof(AxisArgs), work * index.shape[1] >= PARALLEL_MIN,
                              (index, weight, outside, keep))
    cdef AxisArgs* args = <AxisArgs*>step.args
    args.x = <const float*>x
    args.y = <float*>y
    args.outer = outer if work > 0 else 0
    args.in_size = in_size
    args.out_size = out_size
    args.inner = inner
    args.taps = index.shape[1]
    args.index = &idx_view[0, 0] if out_size > 0 else NULL
    args.weight = &w_view[0, 0] if out_size > 0 else NULL
    args.outside = NULL
    if outside is not None and out_size > 0:
        out_view = outside
        args.outside = &out_view[0]
    args.fill = fill
    _fill_run_chain(&args.rc, post_chain, y, channels, cstride, blocked, "resize")
    return step


def make_resize_steps(size_t x, size_t y, dims, passes, keep=None, **chain):
    """The steps of a separable resize of the tensor at x (physical ``dims``) into y.

    ``passes``: [(axis, index, weight, outside, fill)] in order, each resizing ``axis`` of the
    result so far (see make_resize_axis_step).  Intermediate results live in float32 scratch
    arrays that the steps keep.  No pass: y = x (a one-tap identity pass).  ``chain``: the
    post-op chain arguments of make_resize_axis_step, given to the last pass."""
    dims = [int(d) for d in dims]
    if not passes:
        n = dims[0] if dims else 1
        passes = [(0, np.arange(n).reshape(n, 1), np.ones((n, 1), np.float32), None, 0.0)]
    steps = []
    current, src, previous = list(dims), x, None
    for i, (axis, index, weight, outside, fill) in enumerate(passes):
        if not 0 <= axis < len(dims):
            raise ValueError(f"axis {axis} out of range for dims {dims}")
        outer = 1
        for d in current[:axis]:
            outer *= d
        inner = 1
        for d in current[axis + 1:]:
            inner *= d
        in_size = current[axis]
        current[axis] = len(index)
        last = i == len(passes) - 1
        if last:
            dst, scratch = y, None
        else:
            size = 1
            for d in current:
                size *= d
            scratch = np.empty(max(size, 1), np.float32)
            dst = scratch.__array_interface__["data"][0]
        steps.append(make_resize_axis_step(src, dst, outer, in_size, inner, index, weight,
                                           outside, fill, keep=(keep, previous, scratch),
                                           **(chain if last else {})))
        src, previous = dst, scratch
    return steps


def resize(x, passes, out_dims, int num_threads=1):
    """Test wrapper: the separable resize of float32 array ``x`` into a new array."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty(out_dims, np.float32)
    steps = make_resize_steps(x.__array_interface__["data"][0], y.__array_interface__["data"][0],
                              x.shape, passes, keep=x)
    run_steps(steps, num_threads)
    return y


# ---------------------------------------------------------------------------------------
# RoiAlign

cdef struct RoiAlignArgs:
    const float* x          # (N, C, H, W)
    const float* rois       # (R, 4): x1, y1, x2, y2
    const int64_t* batch    # (R,)
    float* y                # (R, C, oh, ow)
    Py_ssize_t n, c, h, w, rois_count, oh, ow
    int sampling_ratio
    double spatial_scale, offset
    bint mode_max, half_pixel


cdef inline Py_ssize_t _grid(double extent, Py_ssize_t bins, int sampling_ratio) noexcept nogil:
    """Samples per bin along one axis: sampling_ratio, or ceil(extent / bins), at most
    ADAPTIVE_SAMPLES_MAX.  A bin takes the product of its two axes' samples, so an uncapped
    region 1e9 wide (garbage, not a feature map) asked for 1e12 samples a bin and the run
    never ended; past the cap the bin's average is taken over that many evenly spaced
    samples instead (a region 256 x 7 = 1792 cells wide is more than any feature map)."""
    cdef double g
    if sampling_ratio > 0:
        return sampling_ratio
    g = ceil(extent / <double>bins)
    if isnan(g) or g < 0:
        return 0
    if g > ADAPTIVE_SAMPLES_MAX:
        return ADAPTIVE_SAMPLES_MAX
    return <Py_ssize_t>g


cdef inline bint _axis_sample(double v, Py_ssize_t size, Py_ssize_t* lo, Py_ssize_t* hi,
                              double* frac) noexcept nogil:
    """Bilinear neighbours of coordinate v along an axis of ``size``: False outside [-1, size]."""
    lo[0] = 0
    hi[0] = 0
    frac[0] = 0
    if v < -1.0 or v > <double>size:
        return False
    if v < 0:
        v = 0
    lo[0] = <Py_ssize_t>v
    if lo[0] >= size - 1:
        lo[0] = size - 1
        hi[0] = size - 1
        v = <double>lo[0]
    else:
        hi[0] = lo[0] + 1
    frac[0] = v - <double>lo[0]
    return True


cdef void _roi_align_step(const void* a, int tid, int nthreads) noexcept nogil:
    """One (region, channel) plane of outputs per item."""
    cdef const RoiAlignArgs* p = <const RoiAlignArgs*>a
    cdef Py_ssize_t begin, end, item, r, ch, ph, pw, iy, ix, gh, gw, b
    cdef Py_ssize_t y0, y1, x0, x1, count
    cdef double sx, sy, ex, ey, rw, rh, bh, bw, yy, xx, ly, lx, hy, hx, acc, v, best
    cdef double v1, v2, v3, v4
    cdef bint y_ok, x_ok, first
    cdef const float* plane
    cdef float* out
    ppl_partition(p.rois_count * p.c, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        r = item // p.c
        ch = item - r * p.c
        out = p.y + item * p.oh * p.ow
        b = p.batch[r]
        if b < 0 or b >= p.n:
            # A batch index outside the input: no data to sample (make_*_step cannot see
            # run-time values); NaN marks the region instead of reading past the input.
            for ph in range(p.oh * p.ow):
                out[ph] = NAN
            continue
        plane = p.x + (b * p.c + ch) * p.h * p.w
        sx = p.rois[4 * r] * p.spatial_scale - p.offset
        sy = p.rois[4 * r + 1] * p.spatial_scale - p.offset
        ex = p.rois[4 * r + 2] * p.spatial_scale - p.offset
        ey = p.rois[4 * r + 3] * p.spatial_scale - p.offset
        rw = ex - sx
        rh = ey - sy
        if not p.half_pixel:
            # Malformed regions become 1x1 (the legacy behaviour).
            rw = rw if rw > 1.0 else 1.0
            rh = rh if rh > 1.0 else 1.0
        bh = rh / <double>p.oh
        bw = rw / <double>p.ow
        gh = _grid(rh, p.oh, p.sampling_ratio)
        gw = _grid(rw, p.ow, p.sampling_ratio)
        count = gh * gw if gh * gw > 1 else 1
        for ph in range(p.oh):
            for pw in range(p.ow):
                acc = 0
                best = 0
                first = True
                for iy in range(gh):
                    yy = sy + ph * bh + (iy + 0.5) * bh / <double>gh
                    y_ok = _axis_sample(yy, p.h, &y0, &y1, &ly)
                    hy = 1.0 - ly
                    for ix in range(gw):
                        xx = sx + pw * bw + (ix + 0.5) * bw / <double>gw
                        x_ok = _axis_sample(xx, p.w, &x0, &x1, &lx)
                        hx = 1.0 - lx
                        if y_ok and x_ok:
                            v1 = hy * hx * plane[y0 * p.w + x0]
                            v2 = hy * lx * plane[y0 * p.w + x1]
                            v3 = ly * hx * plane[y1 * p.w + x0]
                            v4 = ly * lx * plane[y1 * p.w + x1]
                        else:
                            v1 = v2 = v3 = v4 = 0
                        if p.mode_max:
                            # Max of the weighted corners, as onnx.reference and ONNX Runtime.
                            v = v1
                            if v2 > v:
                                v = v2
                            if v3 > v:
                                v = v3
                            if v4 > v:
                                v = v4
                            if first or v > best:
                                best = v
                            first = False
                        else:
                            acc = acc + v1 + v2 + v3 + v4
                out[ph * p.ow + pw] = <float>(best if p.mode_max else acc / <double>count)


def make_roi_align_step(size_t x, size_t rois, size_t batch_indices, size_t y, dims,
                        Py_ssize_t rois_count, Py_ssize_t output_height,
                        Py_ssize_t output_width, int sampling_ratio, double spatial_scale,
                        bint half_pixel, bint mode_max, keep=None):
    """The step y[r, c] = RoiAlign of x[batch_indices[r], c] over region rois[r] (x1, y1, x2,
    y2, scaled by spatial_scale) into output_height x output_width bins; ``dims``: x's (N, C,
    H, W).  A batch index outside [0, N) gives NaN for its region."""
    n, c, h, w = [int(d) for d in dims]
    if min(n, c, h, w) < 0 or rois_count < 0 or output_height < 1 or output_width < 1:
        raise ValueError(f"dims {list(dims)}, {rois_count} regions, output {output_height}x"
                         f"{output_width}: expected sizes (output at least 1x1)")
    if sampling_ratio < 0:
        raise ValueError(f"sampling_ratio {sampling_ratio}: expected >= 0")
    work = rois_count * c * output_height * output_width
    if work > 0 and (h == 0 or w == 0 or x == 0 or rois == 0 or batch_indices == 0 or y == 0):
        raise ValueError("x, rois, batch_indices and y must be valid, and x not empty")
    cdef Step step = new_step(_roi_align_step, sizeof(RoiAlignArgs),
                              work * 16 >= PARALLEL_MIN, keep)
    cdef RoiAlignArgs* args = <RoiAlignArgs*>step.args
    args.x = <const float*>x
    args.rois = <const float*>rois
    args.batch = <const int64_t*>batch_indices
    args.y = <float*>y
    args.n, args.c, args.h, args.w = n, c, h, w
    args.rois_count = rois_count if work > 0 else 0
    args.oh, args.ow = output_height, output_width
    args.sampling_ratio = sampling_ratio
    args.spatial_scale = spatial_scale
    args.half_pixel = half_pixel
    args.offset = 0.5 if half_pixel else 0.0
    args.mode_max = mode_max
    return step


def roi_align(x, rois, batch_indices, Py_ssize_t output_height, Py_ssize_t output_width,
              int sampling_ratio=0, double spatial_scale=1.0, bint half_pixel=True,
              bint mode_max=False, int num_threads=1):
    """Test wrapper: RoiAlign on numpy arrays into a new (R, C, oh, ow) array."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    rois = np.ascontiguousarray(rois, dtype=np.float32).reshape(-1, 4)
    batch_indices = np.ascontiguousarray(batch_indices, dtype=np.int64).reshape(-1)
    count = rois.shape[0]
    if batch_indices.shape[0] != count:
        raise ValueError(f"{count} regions but {batch_indices.shape[0]} batch indices")
    y = np.empty((count, x.shape[1], output_height, output_width), np.float32)
    addr = lambda a: a.__array_interface__["data"][0] if a.size else 1  # noqa: E731
    step = make_roi_align_step(addr(x), addr(rois), addr(batch_indices), addr(y), x.shape,
                               count, output_height, output_width, sampling_ratio,
                               spatial_scale, half_pixel, mode_max,
                               keep=(x, rois, batch_indices, y))
    run_steps([step], num_threads)
    return y


# ---------------------------------------------------------------------------------------
# NonMaxSuppression

cdef struct Candidate:
    float score
    int64_t index


cdef int _by_score(const void* a, const void* b) noexcept nogil:
    """Higher score first, then lower box index; NaN scores last (a total order)."""
    cdef const Candidate* p = <const Candidate*>a
    cdef const Candidate* q = <const Candidate*>b
    cdef bint pn = isnan(p.score), qn = isnan(q.score)
    if pn != qn:
        return 1 if pn else -1
    if not pn and p.score != q.score:
        return -1 if p.score > q.score else 1
    return -1 if p.index < q.index else (1 if p.index > q.index else 0)


cdef inline void _corners(const float* box, bint center, float* x0, float* y0, float* x1,
                          float* y1) noexcept nogil:
    cdef float half = 0.5
    if center:
        x0[0] = box[0] - box[2] * half
        x1[0] = box[0] + box[2] * half
        y0[0] = box[1] - box[3] * half
        y1[0] = box[1] + box[3] * half
    else:
        # [y1, x1, y2, x2], either corner first.
        y0[0] = box[0] if box[0] < box[2] else box[2]
        y1[0] = box[2] if box[0] < box[2] else box[0]
        x0[0] = box[1] if box[1] < box[3] else box[3]
        x1[0] = box[3] if box[1] < box[3] else box[1]


cdef bint _suppresses(const float* a, const float* b, bint center, float threshold) noexcept nogil:
    """IoU(a, b) > threshold (False for boxes without area)."""
    cdef float ax0, ay0, ax1, ay1, bx0, by0, bx1, by1, ix0, iy0, ix1, iy1
    cdef float inter, area_a, area_b, union
    _corners(a, center, &ax0, &ay0, &ax1, &ay1)
    _corners(b, center, &bx0, &by0, &bx1, &by1)
    ix0 = ax0 if ax0 > bx0 else bx0
    ix1 = ax1 if ax1 < bx1 else bx1
    if ix1 <= ix0:
        return False
    iy0 = ay0 if ay0 > by0 else by0
    iy1 = ay1 if ay1 < by1 else by1
    if iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a = (ax1 - ax0) * (ay1 - ay0)
    area_b = (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


cdef struct NmsArgs:
    const float* boxes      # (B, N, 4)
    const float* scores     # (B, C, N)
    int64_t* y              # (capacity, 3)
    Py_ssize_t batches, classes, boxes_count, capacity
    int64_t max_per_class
    float iou_threshold, score_threshold
    bint has_score_threshold, center
    Candidate* candidates   # scratch: N
    int64_t* selected       # scratch: N


cdef Py_ssize_t _nms(const NmsArgs* p) noexcept nogil:
    """Greedy selection per (batch, class), written to y in order; returns the row count."""
    cdef Py_ssize_t bi, ci, i, j, n = p.boxes_count, m, kept, rows = 0
    cdef const float* scores
    cdef const float* boxes
    cdef bint keep
    for bi in range(p.batches):
        boxes = p.boxes + bi * n * 4
        for ci in range(p.classes):
            scores = p.scores + (bi * p.classes + ci) * n
            m = 0
            for i in range(n):
                if p.has_score_threshold and not scores[i] > p.score_threshold:
                    continue
                p.candidates[m].score = scores[i]
                p.candidates[m].index = i
                m += 1
            qsort(p.candidates, m, sizeof(Candidate), _by_score)
            kept = 0
            for i in range(m):
                if kept >= p.max_per_class:
                    break
                keep = True
                for j in range(kept):
                    if _suppresses(boxes + 4 * p.candidates[i].index, boxes + 4 * p.selected[j],
                                   p.center, p.iou_threshold):
                        keep = False
                        break
                if keep:
                    p.selected[kept] = p.candidates[i].index
                    kept += 1
                    if rows < p.capacity:
                        p.y[3 * rows] = bi
                        p.y[3 * rows + 1] = ci
                        p.y[3 * rows + 2] = p.candidates[i].index
                    rows += 1
    return rows


cdef void _nms_step(const void* a, int tid, int nthreads) noexcept nogil:
    _nms(<const NmsArgs*>a)


def make_nms_step(size_t boxes, size_t scores, size_t y, Py_ssize_t batches,
                  Py_ssize_t classes, Py_ssize_t boxes_count, Py_ssize_t capacity,
                  int64_t max_per_class, float iou_threshold, score_threshold, bint center,
                  keep=None):
    """The serial step writing NonMaxSuppression's selected (batch, class, box) rows to y,
    at most ``capacity`` of them (the count planned from the same values).
    ``score_threshold`` None: no score filter."""
    if min(batches, classes, boxes_count, capacity) < 0:
        raise ValueError("sizes must be >= 0")
    work = batches * classes * boxes_count
    if work > 0 and (boxes == 0 or scores == 0):
        raise ValueError("boxes and scores must be valid addresses")
    if capacity > 0 and y == 0:
        raise ValueError("y must be a valid address")
    candidates = np.empty(max(boxes_count, 1) * sizeof(Candidate), np.uint8)
    selected = np.empty(max(boxes_count, 1), np.int64)
    cdef unsigned char[::1] cand_view = candidates
    cdef int64_t[::1] sel_view = selected
    cdef Step step = new_step(_nms_step, sizeof(NmsArgs), False, (candidates, selected, keep))
    cdef NmsArgs* args = <NmsArgs*>step.args
    args.boxes = <const float*>boxes
    args.scores = <const float*>scores
    args.y = <int64_t*>y
    args.batches = batches if work > 0 else 0
    args.classes = classes
    args.boxes_count = boxes_count
    args.capacity = capacity
    args.max_per_class = max_per_class if max_per_class > 0 else 0
    args.iou_threshold = iou_threshold
    args.has_score_threshold = score_threshold is not None
    args.score_threshold = score_threshold if score_threshold is not None else 0
    args.center = center
    args.candidates = <Candidate*>&cand_view[0]
    args.selected = &sel_view[0]
    return step


def non_max_suppression(boxes, scores, int64_t max_per_class, float iou_threshold,
                        score_threshold=None, bint center=False):
    """NonMaxSuppression on numpy arrays: the selected (batch, class, box) rows, (S, 3) int64.
    Also what the op context runs on the host to plan its output size."""
    boxes = np.ascontiguousarray(boxes, dtype=np.float32)
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3:
        raise ValueError(f"boxes {boxes.shape} and scores {scores.shape}: expected (B, N, 4) "
                         f"and (B, C, N)")
    b, n = boxes.shape[0], boxes.shape[1]
    if scores.shape[0] != b or scores.shape[2] != n:
        raise ValueError(f"boxes {boxes.shape} and scores {scores.shape} disagree on B or N")
    c = scores.shape[1]
    capacity = b * c * min(n, max(max_per_class, 0))
    y = np.empty((max(capacity, 1), 3), np.int64)
    addr = lambda a: a.__array_interface__["data"][0]  # noqa: E731
    step = make_nms_step(addr(boxes), addr(scores), addr(y), b, c, n, capacity, max_per_class,
                         iou_threshold, score_threshold, center, keep=(boxes, scores, y))
    cdef Py_ssize_t rows = _nms(<const NmsArgs*>(<Step>step).args)
    return y[:rows].copy()
