# Row-wise normalisations as compiled steps: LayerNormalization and RMSNormalization
# (statistics over the trailing dims, one row each), pplpy's AddLayerNormalization (the
# same on a residual sum formed row by row), InstanceNormalization and
# GroupNormalization (one row per (n, c) plane or (n, group); on N16CX, 16 channels'
# statistics at once), MeanVarianceNormalization (any set of axes),
# and the single-axis ops LogSoftmax, Hardmax and LpNormalization.
#
# Written once and included by _layernorm_fp32_{avx512,fma,sse}.pyx.  Statistics take two
# passes over a row (mean, then the sum of squared deviations: no cancellation as in
# E[x^2] - E[x]^2), a third pass writes the output; each pass is vectorised along the row.
# Sums keep 16 float partial sums that are handed to a double every 1024 terms, so gcc
# vectorises them without -ffast-math and long rows keep their precision.
#
# Every step splits independent items (rows, planes, column tiles) across the team with
# ppl_partition; none has a barrier.

import numpy as np
from libc.math cimport logf, sqrtf
from libc.stdint cimport int64_t
from libc.string cimport memset

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"

cdef extern from "_rows_fp32.h" nogil:
    void ppl_row_softmax(const float *x, float *y, Py_ssize_t n, int log)


cdef enum:
    LANES = 16
    # Single-axis ops over a strided axis work on this many columns at a time (stack buffers).
    TILE = 128
    MAX_DIMS = 8
    # Flush the float partial sums into a double after this many blocks of LANES terms.
    FLUSH = 64

cdef enum:  # what _lane_sums adds up
    LANE_SUM = 0
    LANE_SQ_DEV = 1
    LANE_ABS = 2

cdef enum:
    AXIS_LOG_SOFTMAX = 0
    AXIS_HARDMAX = 1
    AXIS_L1 = 2
    AXIS_L2 = 3


# ---------------------------------------------------------------------------------------
# Sums along a contiguous row.

cdef void _lane_sums(const float *x, Py_ssize_t rows, int kind, const float *shift,
                     double *out) noexcept nogil:
    """out[l] = the sum over ``rows`` rows of 16 lanes of f(x[r, l]): x (LANE_SUM), |x|
    (LANE_ABS) or (x - shift[l]) ** 2 (LANE_SQ_DEV).  Float partial sums, flushed into
    doubles every FLUSH rows, in loops with no branch inside, so gcc keeps the 16 partial
    sums in one vector."""
    cdef float part[LANES]
    cdef float m[LANES]
    cdef float d
    cdef Py_ssize_t i, i0 = 0, i1
    cdef int l
    for l in range(LANES):
        out[l] = 0
        m[l] = shift[l] if shift != NULL else 0
    while i0 < rows:
        i1 = min(i0 + FLUSH, rows)
        for l in range(LANES):
            part[l] = 0
        if kind == LANE_SUM:
            for i in range(i0, i1):
                for l in range(LANES):
                    part[l] += x[i * LANES + l]
        elif kind == LANE_SQ_DEV:
            for i in range(i0, i1):
                for l in range(LANES):
                    d = x[i * LANES + l] - m[l]
                    part[l] += d * d
        else:
            for i in range(i0, i1):
                for l in range(LANES):
                    d = x[i * LANES + l]
                    part[l] += d if d >= 0 else -d
        for l in range(LANES):
            out[l] += part[l]
        i0 = i1


cdef double _row_sum(const float *x, Py_ssize_t n, int kind, float m) noexcept nogil:
    """The sum over a row of n floats of _lane_sums' f, with m the shift of every lane."""
    cdef double lanes[LANES]
    cdef float shift[LANES]
    cdef double total = 0
    cdef float d
    cdef Py_ssize_t i, nb = n // LANES
    cdef int l
    for l in range(LANES):
        shift[l] = m
    _lane_sums(x, nb, kind, shift, lanes)
    for l in range(LANES):
        total += lanes[l]
    for i in range(nb * LANES, n):
        d = x[i]
        if kind == LANE_SUM:
            total += d
        elif kind == LANE_SQ_DEV:
            total += (d - m) * (d - m)
        else:
            total += d if d >= 0 else -d
    return total


cdef inline double _sum(const float *x, Py_ssize_t n) noexcept nogil:
    """sum(x)"""
    return _row_sum(x, n, LANE_SUM, 0)


cdef inline double _sum_sq_dev(const float *x, Py_ssize_t n, float m) noexcept nogil:
    """sum((x - m) ** 2)"""
    return _row_sum(x, n, LANE_SQ_DEV, m)


cdef inline double _sum_abs(const float *x, Py_ssize_t n) noexcept nogil:
    """sum(|x|)"""
    return _row_sum(x, n, LANE_ABS, 0)


cdef void _expand(const float *src, const Py_ssize_t *dims, const Py_ssize_t *strides, int ndim,
                  float *dst) noexcept nogil:
    """dst (contiguous, shape dims) = src read with element strides (0 on broadcast dims)."""
    cdef Py_ssize_t idx[MAX_DIMS]
    cdef Py_ssize_t total = 1, i, off = 0
    cdef int d
    for d in range(ndim):
        idx[d] = 0
        total *= dims[d]
    for i in range(total):
        dst[i] = src[off]
        d = ndim - 1
        while d >= 0:
            idx[d] += 1
            off += strides[d]
            if idx[d] < dims[d]:
                break
            off -= idx[d] * strides[d]
            idx[d] = 0
            d -= 1


cdef int _check_expand(dims, strides) except -1:
    if len(dims) > MAX_DIMS or len(strides) != len(dims):
        raise ValueError(f"expand dims {dims}, strides {strides}: expected equal lengths "
                         f"<= {MAX_DIMS}")
    return 0


# ---------------------------------------------------------------------------------------
# Row normalisation: LayerNormalization, RMSNormalization, InstanceNormalization and
# GroupNormalization on NDARRAY.  x is (rows, n); row r, element i has
#     y = (x - mean_r) * invstd_r * scale[k] + bias[k],  k = (r % scale_rows) * segs + i // seg
# with n = segs * seg.  LayerNorm: scale_rows 1, seg 1 (scale per element); InstanceNorm:
# scale_rows C, segs 1 (one value per plane); GroupNorm-21: scale_rows G, segs C/G, seg S.

cdef struct RowNormArgs:
    const float *x
    float *y
    float *mean                 # per row, or NULL
    float *invstd               # per row, or NULL
    const float *scale
    const float *bias           # NULL: no bias
    Py_ssize_t rows
    Py_ssize_t n
    Py_ssize_t scale_rows
    Py_ssize_t segs
    Py_ssize_t seg
    float epsilon
    bint rms                    # RMSNormalization: no mean is subtracted
    # Scale and bias given with broadcast strides: each thread expands them to n values in
    # its scratch (2 * n floats at scratch + tid * 2 * n) before its rows.
    float *scratch
    int ndim
    Py_ssize_t dims[MAX_DIMS]
    Py_ssize_t scale_strides[MAX_DIMS]
    Py_ssize_t bias_strides[MAX_DIMS]


cdef inline float _row_stats(const float *x, Py_ssize_t n, bint rms, float epsilon,
                             float *mean) noexcept nogil:
    """1 / sqrt(var + epsilon) of a row, its mean into mean[0] (0 for RMS: no centring)."""
    cdef float m = 0, one = 1
    cdef double var
    if not rms:
        m = <float>(_sum(x, n) / n)
    var = _sum_sq_dev(x, n, m) / n
    mean[0] = m
    return one / sqrtf(<float>var + epsilon)


cdef inline void _affine_row(const float *x, float *y, Py_ssize_t n, float m, float inv,
                             const float *scale, const float *bias) noexcept nogil:
    """y = (x - m) * inv * scale + bias element by element (bias NULL: none)."""
    cdef Py_ssize_t i
    if bias != NULL:
        for i in range(n):
            y[i] = (x[i] - m) * inv * scale[i] + bias[i]
    else:
        for i in range(n):
            y[i] = (x[i] - m) * inv * scale[i]


cdef void _row_norm(const RowNormArgs *a, Py_ssize_t r, const float *scale,
                    const float *bias) noexcept nogil:
    cdef const float *x = a.x + r * a.n
    cdef float *y = a.y + r * a.n
    cdef Py_ssize_t n = a.n, seg = a.seg, i, k, base
    cdef float m, inv, s, b
    inv = _row_stats(x, n, a.rms, a.epsilon, &m)
    if a.mean != NULL:
        a.mean[r] = m
    if a.invstd != NULL:
        a.invstd[r] = inv
    base = (r % a.scale_rows) * a.segs
    if seg == 1:
        _affine_row(x, y, n, m, inv, scale + base, bias + base if bias != NULL else NULL)
    else:
        for k in range(a.segs):
            s = scale[base + k] * inv
            b = bias[base + k] if bias != NULL else 0
            for i in range(k * seg, (k + 1) * seg):
                y[i] = (x[i] - m) * s + b


cdef void _row_norm_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RowNormArgs *a = <const RowNormArgs *>p
    cdef const float *scale = a.scale
    cdef const float *bias = a.bias
    cdef float *buf
    cdef Py_ssize_t r0, r1, r
    ppl_partition(a.rows, tid, nthreads, &r0, &r1)
    if r0 >= r1:
        return
    if a.scratch != NULL:
        buf = a.scratch + tid * 2 * a.n
        _expand(a.scale, a.dims, a.scale_strides, a.ndim, buf)
        scale = buf
        if a.bias != NULL:
            _expand(a.bias, a.dims, a.bias_strides, a.ndim, buf + a.n)
            bias = buf + a.n
    for r in range(r0, r1):
        _row_norm(a, r, scale, bias)


def make_row_norm_step(size_t x, size_t y, size_t mean, size_t invstd, size_t scale,
                       size_t bias, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t scale_rows,
                       Py_ssize_t segs, Py_ssize_t seg, float epsilon, bint rms,
                       int num_threads, expand=None, keep=None):
    """Step of y = (x - mean) * invstd * scale + bias over rows of n elements (see above).

    ``mean``, ``invstd``, ``bias``: 0 when absent.  ``expand``: None, or (dims, scale strides,
    bias strides) in elements when scale and bias are read broadcast to the n values of a
    row (scale_rows 1, seg 1); ``keep``: objects the addresses point into."""
    cdef Step step
    cdef RowNormArgs *a
    cdef float[:, ::1] scratch
    cdef int d
    if x == 0 or y == 0 or scale == 0:
        raise ValueError("x, y and scale must be given")
    if rows < 0 or n < 1 or scale_rows < 1 or segs < 1 or seg < 1 or segs * seg != n:
        raise ValueError(f"rows {rows}, n {n}, scale_rows {scale_rows}, segs {segs}, seg {seg}: "
                         "expected rows >= 0 and n = segs * seg >= 1")
    if expand is not None:
        _check_expand(expand[0], expand[1])
        _check_expand(expand[0], expand[2])
        if seg != 1 or scale_rows != 1 or int(np.prod(expand[0])) != n:
            raise ValueError(f"expand {expand}: only for scale per element of a row of {n}")
        scratch_array = np.empty((max(1, num_threads), 2 * n), np.float32)
        scratch = scratch_array
        keep = (keep, scratch_array)
    step = new_step(_row_norm_step, sizeof(RowNormArgs), rows > 1 and rows * n > GRAIN, keep)
    a = <RowNormArgs *>step.args
    a.x = <const float *>x
    a.y = <float *>y
    a.mean = <float *>mean
    a.invstd = <float *>invstd
    a.scale = <const float *>scale
    a.bias = <const float *>bias
    a.rows = rows
    a.n = n
    a.scale_rows = scale_rows
    a.segs = segs
    a.seg = seg
    a.epsilon = epsilon
    a.rms = rms
    a.scratch = NULL
    if expand is not None:
        a.scratch = &scratch[0, 0]
        a.ndim = len(expand[0])
        for d in range(a.ndim):
            a.dims[d] = expand[0][d]
            a.scale_strides[d] = expand[1][d]
            a.bias_strides[d] = expand[2][d]
    return step


# ---------------------------------------------------------------------------------------
# AddLayerNormalization (pplpy domain): LayerNorm over rows of n of the residual sum
#     s = a + b;   y = (s - mean) * invstd * scale + bias
# The sum of a row is formed once, into the optional sum output (a pre-LN transformer reads
# the residual stream again) or into the thread's scratch row, and its statistics and the
# output are read from it while it is in L1: a and b are read once, where Add then
# LayerNormalization write the sum to memory and read it back (twice: statistics, output).

cdef struct AddNormArgs:
    const float *a
    const float *b
    float *y
    float *sum                  # (rows, n), or NULL: the thread's scratch row holds it
    const float *scale          # n values
    const float *bias           # n values, or NULL
    Py_ssize_t rows
    Py_ssize_t n
    float epsilon
    float *scratch              # max_threads rows of n
    int max_threads


cdef void _add_norm_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const AddNormArgs *a = <const AddNormArgs *>p
    cdef Py_ssize_t r0, r1, r, i, n = a.n
    cdef const float *xa
    cdef const float *xb
    cdef float *s
    cdef float m, inv
    if nthreads > a.max_threads:  # a larger team than the scratch was made for
        if tid >= a.max_threads:
            return
        nthreads = a.max_threads
    ppl_partition(a.rows, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        xa = a.a + r * n
        xb = a.b + r * n
        s = a.sum + r * n if a.sum != NULL else a.scratch + tid * n
        for i in range(n):
            s[i] = xa[i] + xb[i]
        inv = _row_stats(s, n, False, a.epsilon, &m)
        _affine_row(s, a.y + r * n, n, m, inv, a.scale, a.bias)


def make_add_layer_norm_step(size_t a, size_t b, size_t y, size_t sum, size_t scale,
                             size_t bias, Py_ssize_t rows, Py_ssize_t n, float epsilon,
                             int num_threads, keep=None):
    """Step of s = a + b, y = LayerNorm(s) * scale + bias over rows of n contiguous values
    (see above); ``sum``: 0, or where s is written too; ``bias``: 0 when absent; scale and
    bias hold n values each; ``keep``: objects the addresses point into."""
    cdef Step step
    cdef AddNormArgs *args
    cdef float[:, ::1] scratch
    if a == 0 or b == 0 or y == 0 or scale == 0:
        raise ValueError("a, b, y and scale must be given")
    if rows < 0 or n < 1:
        raise ValueError(f"rows {rows}, n {n}: expected rows >= 0 and n >= 1")
    num_threads = max(1, num_threads)
    scratch_array = np.empty((num_threads, n), np.float32)
    scratch = scratch_array
    step = new_step(_add_norm_step, sizeof(AddNormArgs), rows > 1 and rows * n > GRAIN,
                    (keep, scratch_array))
    args = <AddNormArgs *>step.args
    args.a, args.b = <const float *>a, <const float *>b
    args.y, args.sum = <float *>y, <float *>sum
    args.scale, args.bias = <const float *>scale, <const float *>bias
    args.rows, args.n, args.epsilon = rows, n, epsilon
    args.scratch = &scratch[0, 0]
    args.max_threads = num_threads
    return step


def _address(array):
    return 0 if array is None else array.__array_interface__["data"][0]


def row_norm_fp32(x, y, mean, invstd, scale, bias, Py_ssize_t scale_rows, Py_ssize_t segs,
                  Py_ssize_t seg, float epsilon, bint rms, int num_threads, expand=None):
    """Test wrapper: run make_row_norm_step on contiguous float32 arrays x, y (rows, n)."""
    arrays = [a for a in (x, y, mean, invstd, scale, bias) if a is not None]
    for a in arrays:
        if a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError("expected C-contiguous float32 arrays")
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"x {x.shape}, y {y.shape}: expected equal 2-D shapes")
    if x.size == 0:
        return
    run_steps([make_row_norm_step(_address(x), _address(y), _address(mean), _address(invstd),
                                  _address(scale), _address(bias), x.shape[0], x.shape[1],
                                  scale_rows, segs, seg, epsilon, rms, num_threads, expand,
                                  arrays)], num_threads)


# ---------------------------------------------------------------------------------------
# InstanceNormalization and GroupNormalization on N16CX: x is (N, blocks, S, 16).  Three
# steps; the first and last over the same items, an (image, channel block, chunk of
# CHUNK_ROWS pixels) each, so a large plane with few channel blocks still splits across the
# team:
#   moments: per lane of the item, the mean of its rows and their sum of squared deviations
#            from it (two passes over 32 KB);
#   combine: (serial, O(N C chunks)) each group's mean and variance from its channels' chunks
#            (Chan's formula, M2 = sum(M2_k + n_k (m_k - m)^2): no cancellation), as each
#            lane's mean, scale / sqrt(var + epsilon) and bias;
#   apply:   y = (x - mean) * s + bias per lane.
# Instance normalisation is the case of one channel per group.  Padding lanes come out 0.

cdef enum:
    CHUNK_ROWS = 512


cdef struct BlockedNormArgs:
    const float *x
    float *y
    const float *scale          # per channel, padded to blocks * 16
    const float *bias
    double *moments             # (N, blocks, chunks, 2, 16): per lane mean, then M2
    double *coef                # (N, blocks, 3, 16): per lane mean, s, bias
    Py_ssize_t N
    Py_ssize_t blocks
    Py_ssize_t chunks
    Py_ssize_t S
    Py_ssize_t C
    Py_ssize_t per_group        # channels per group (1: instance normalisation)
    float epsilon


cdef inline Py_ssize_t _chunk_rows(const BlockedNormArgs *a, Py_ssize_t k) noexcept nogil:
    return CHUNK_ROWS if (k + 1) * CHUNK_ROWS <= a.S else a.S - k * CHUNK_ROWS


cdef inline Py_ssize_t _item_rows(const BlockedNormArgs *a, Py_ssize_t it,
                                  Py_ssize_t *offset) noexcept nogil:
    """The rows of item ``it`` (image, block, chunk); ``offset``: the float offset of its
    first row in x and y."""
    cdef Py_ssize_t k = it % a.chunks
    offset[0] = ((it // a.chunks) * a.S + k * CHUNK_ROWS) * LANES
    return _chunk_rows(a, k)


cdef void _blocked_moments_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const BlockedNormArgs *a = <const BlockedNormArgs *>p
    cdef Py_ssize_t i0, i1, it, rows, offset
    cdef const float *x
    cdef double *mom
    cdef float m[LANES]
    cdef int l
    ppl_partition(a.N * a.blocks * a.chunks, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        rows = _item_rows(a, it, &offset)
        x = a.x + offset
        mom = a.moments + it * 2 * LANES
        _lane_sums(x, rows, LANE_SUM, NULL, mom)
        for l in range(LANES):
            mom[l] /= rows
            m[l] = <float>mom[l]
        _lane_sums(x, rows, LANE_SQ_DEV, m, mom + LANES)


cdef void _group_moments(const BlockedNormArgs *a, Py_ssize_t n, Py_ssize_t g,
                         double *mean, double *var) noexcept nogil:
    """Mean and variance of group ``g`` of image ``n`` from its channels' chunk moments."""
    cdef Py_ssize_t c, k, c0 = g * a.per_group, c1 = c0 + a.per_group
    cdef const double *mom
    cdef double total = 0, m2 = 0, d
    for c in range(c0, c1):
        mom = a.moments + (n * a.blocks + c // LANES) * a.chunks * 2 * LANES + c % LANES
        for k in range(a.chunks):
            total += _chunk_rows(a, k) * mom[k * 2 * LANES]
    mean[0] = total / (a.S * a.per_group)
    for c in range(c0, c1):
        mom = a.moments + (n * a.blocks + c // LANES) * a.chunks * 2 * LANES + c % LANES
        for k in range(a.chunks):
            d = mom[k * 2 * LANES] - mean[0]
            m2 += mom[k * 2 * LANES + LANES] + _chunk_rows(a, k) * d * d
    var[0] = m2 / (a.S * a.per_group)


cdef void _blocked_combine_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const BlockedNormArgs *a = <const BlockedNormArgs *>p
    cdef Py_ssize_t n, g, c, c0
    cdef double mean = 0, var = 0, inv
    cdef double *coef
    for n in range(a.N):
        for c in range(a.C, a.blocks * LANES):  # padding lanes: y = (x - 0) * 0 + 0
            coef = a.coef + (n * a.blocks + c // LANES) * 3 * LANES + c % LANES
            coef[0] = 0
            coef[LANES] = 0
            coef[2 * LANES] = 0
        for g in range(a.C // a.per_group):
            _group_moments(a, n, g, &mean, &var)
            inv = 1.0 / sqrtf(<float>var + a.epsilon)
            c0 = g * a.per_group
            for c in range(c0, c0 + a.per_group):
                coef = a.coef + (n * a.blocks + c // LANES) * 3 * LANES + c % LANES
                coef[0] = mean
                coef[LANES] = a.scale[c] * inv
                coef[2 * LANES] = a.bias[c]


cdef void _blocked_apply_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const BlockedNormArgs *a = <const BlockedNormArgs *>p
    cdef Py_ssize_t i0, i1, it, i, rows, offset
    cdef const float *x
    cdef float *y
    cdef const double *coef
    cdef float m[LANES]
    cdef float s[LANES]
    cdef float b[LANES]
    cdef float t[LANES]
    cdef int l
    ppl_partition(a.N * a.blocks * a.chunks, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        rows = _item_rows(a, it, &offset)
        coef = a.coef + (it // a.chunks) * 3 * LANES
        for l in range(LANES):
            m[l] = <float>coef[l]
            s[l] = <float>coef[LANES + l]
            b[l] = <float>coef[2 * LANES + l]
        x = a.x + offset
        y = a.y + offset
        for i in range(rows):
            for l in range(LANES):  # through a local copy: y may be x (in place)
                t[l] = x[i * LANES + l]
            for l in range(LANES):
                y[i * LANES + l] = (t[l] - m[l]) * s[l] + b[l]


def blocked_norm_scratch(Py_ssize_t N, Py_ssize_t blocks, Py_ssize_t S):
    """Doubles of scratch the blocked normalisation steps need for these dims."""
    return N * blocks * (((S + CHUNK_ROWS - 1) // CHUNK_ROWS) * 2 + 3) * LANES


def make_blocked_norm_steps(size_t x, size_t y, size_t scale, size_t bias, size_t scratch,
                            Py_ssize_t N, Py_ssize_t blocks, Py_ssize_t S, Py_ssize_t C,
                            Py_ssize_t groups, float epsilon, keep=None):
    """The three steps of GroupNormalization (InstanceNormalization: ``groups`` = C) on N16CX
    x, y (N, blocks, S, 16): scale and bias per channel, padded with zeros to blocks * 16;
    ``scratch``: blocked_norm_scratch(N, blocks, S) doubles."""
    cdef BlockedNormArgs a
    cdef Step moments_step, combine_step, apply_step
    if x == 0 or y == 0 or scale == 0 or bias == 0 or scratch == 0:
        raise ValueError("x, y, scale, bias and scratch must be given")
    if N < 0 or blocks < 1 or S < 1 or not (blocks - 1) * LANES < C <= blocks * LANES:
        raise ValueError(f"N {N}, blocks {blocks}, S {S}, C {C}: expected N >= 0, S >= 1 "
                         f"and C channels in the blocks")
    if groups < 1 or C % groups:
        raise ValueError(f"groups {groups} must divide C {C}")
    a.x = <const float *>x
    a.y = <float *>y
    a.scale = <const float *>scale
    a.bias = <const float *>bias
    a.chunks = (S + CHUNK_ROWS - 1) // CHUNK_ROWS
    a.moments = <double *>scratch
    a.coef = a.moments + N * blocks * a.chunks * 2 * LANES
    a.N = N
    a.blocks = blocks
    a.S = S
    a.C = C
    a.per_group = C // groups
    a.epsilon = epsilon
    parallel = N * blocks * a.chunks > 1 and N * blocks * S * LANES > GRAIN
    moments_step = new_step(_blocked_moments_step, sizeof(BlockedNormArgs), parallel, keep)
    (<BlockedNormArgs *>moments_step.args)[0] = a
    combine_step = new_step(_blocked_combine_step, sizeof(BlockedNormArgs), False, keep)
    (<BlockedNormArgs *>combine_step.args)[0] = a
    apply_step = new_step(_blocked_apply_step, sizeof(BlockedNormArgs), parallel, keep)
    (<BlockedNormArgs *>apply_step.args)[0] = a
    return [moments_step, combine_step, apply_step]


def blocked_norm_fp32(x, y, scale, bias, Py_ssize_t C, Py_ssize_t groups, float epsilon,
                      int num_threads):
    """Test wrapper: GroupNormalization (``groups`` = C: InstanceNormalization) of N16CX
    arrays x, y (N, blocks, S, 16) with C channels; scale, bias per channel, padded."""
    for a in (x, y, scale, bias):
        if a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError("expected C-contiguous float32 arrays")
    if x.shape != y.shape or x.ndim != 4 or x.shape[3] != LANES:
        raise ValueError(f"x {x.shape}, y {y.shape}: expected equal (N, C/16, S, 16)")
    if scale.size != x.shape[1] * LANES or bias.size != scale.size:
        raise ValueError(f"scale {scale.shape}, bias {bias.shape}: expected {x.shape[1] * 16}")
    if x.size == 0:
        return
    scratch = np.empty(blocked_norm_scratch(x.shape[0], x.shape[1], x.shape[2]), np.float64)
    run_steps(make_blocked_norm_steps(_address(x), _address(y), _address(scale),
                                      _address(bias), _address(scratch), x.shape[0],
                                      x.shape[1], x.shape[2], C, groups, epsilon,
                                      (x, y, scale, bias, scratch)), num_threads)


# ---------------------------------------------------------------------------------------
# MeanVarianceNormalization over any set of axes: y = (x - mean) / (std + 1e-9), statistics
# over the reduced axes for each index of the kept ones.  kept[k] is the offset of kept
# index k; the reduced elements of it are the runs x[kept[k] + red[j] : ... + run].

cdef struct MvnArgs:
    const float *x
    float *y
    const int64_t *kept
    Py_ssize_t nkept
    const int64_t *red
    Py_ssize_t nred
    Py_ssize_t run


cdef void _mvn_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const MvnArgs *a = <const MvnArgs *>p
    cdef Py_ssize_t k0, k1, k, j, i, run = a.run
    cdef Py_ssize_t count = a.nred * a.run
    cdef const float *x
    cdef float *y
    cdef double total
    cdef float m, d, eps = 1e-9
    ppl_partition(a.nkept, tid, nthreads, &k0, &k1)
    for k in range(k0, k1):
        total = 0
        for j in range(a.nred):
            total += _sum(a.x + a.kept[k] + a.red[j], run)
        m = <float>(total / count)
        total = 0
        for j in range(a.nred):
            total += _sum_sq_dev(a.x + a.kept[k] + a.red[j], run, m)
        d = sqrtf(<float>(total / count)) + eps
        for j in range(a.nred):
            x = a.x + a.kept[k] + a.red[j]
            y = a.y + a.kept[k] + a.red[j]
            for i in range(run):
                y[i] = (x[i] - m) / d


def make_mvn_step(size_t x, size_t y, const int64_t[::1] kept, const int64_t[::1] red,
                  Py_ssize_t run, Py_ssize_t size, keep=None):
    """Step of MeanVarianceNormalization; offsets in elements, ``size`` the element count of
    x (every offset + run is checked against it)."""
    cdef Step step
    cdef MvnArgs *a
    if x == 0 or y == 0:
        raise ValueError("x and y must be given")
    if kept.shape[0] < 1 or red.shape[0] < 1 or run < 1:
        raise ValueError("kept, red must not be empty and run >= 1")
    kept_array, red_array = np.asarray(kept), np.asarray(red)
    if (kept_array.min() < 0 or red_array.min() < 0
            or kept_array.max() + red_array.max() + run > size):
        raise ValueError(f"offsets reach past the {size} elements of x")
    step = new_step(_mvn_step, sizeof(MvnArgs),
                    kept.shape[0] > 1 and kept.shape[0] * red.shape[0] * run > GRAIN,
                    (keep, kept, red))
    a = <MvnArgs *>step.args
    a.x = <const float *>x
    a.y = <float *>y
    a.kept = &kept[0]
    a.nkept = kept.shape[0]
    a.red = &red[0]
    a.nred = red.shape[0]
    a.run = run
    return step


def mvn_offsets(shape, axes):
    """(kept offsets, reduced offsets, run) of MeanVarianceNormalization over ``axes``
    (non-negative, sorted, distinct) of a C-contiguous array of ``shape``."""
    shape = tuple(int(d) for d in shape)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    axes = set(axes)
    run = 1
    inner = len(shape)
    # The trailing reduced axes form contiguous runs.
    while inner > 0 and (inner - 1) in axes:
        inner -= 1
        run *= shape[inner]

    def offsets(dims):
        out = np.zeros(1, np.int64)
        for i in dims:
            out = (out[:, None] + np.arange(shape[i], dtype=np.int64) * strides[i]).reshape(-1)
        return out

    kept = offsets([i for i in range(len(shape)) if i not in axes])
    red = offsets([i for i in range(inner) if i in axes])
    return kept, red, run


def mvn_fp32(x, y, axes, int num_threads):
    """Test wrapper: MeanVarianceNormalization of contiguous float32 x into y."""
    if x.dtype != np.float32 or y.dtype != np.float32 or x.shape != y.shape \
            or not x.flags.c_contiguous or not y.flags.c_contiguous:
        raise ValueError("expected equal C-contiguous float32 arrays")
    if x.size == 0:
        return
    kept, red, run = mvn_offsets(x.shape, axes)
    run_steps([make_mvn_step(_address(x), _address(y), kept, red, run, x.size, (x, y))],
              num_threads)


# ---------------------------------------------------------------------------------------
# LogSoftmax, Hardmax and LpNormalization along the middle axis of (outer, n, inner).
# inner == 1 works along contiguous rows; otherwise a tile of up to TILE columns is reduced
# together, the loop over columns being the contiguous, vectorised one.  Items are
# (outer index, column tile) pairs.

cdef struct AxisArgs:
    const float *x
    float *y
    Py_ssize_t outer
    Py_ssize_t n
    Py_ssize_t inner
    Py_ssize_t tiles            # column tiles per outer index
    int kind


cdef void _axis_row(const float *x, float *y, Py_ssize_t n, int kind) noexcept nogil:
    cdef float s, zero = 0, one = 1
    cdef Py_ssize_t i, best
    if kind == AXIS_LOG_SOFTMAX:
        ppl_row_softmax(x, y, n, 1)
    elif kind == AXIS_HARDMAX:
        best = 0
        for i in range(1, n):
            if x[i] > x[best]:
                best = i
        memset(y, 0, n * sizeof(float))
        y[best] = one
    else:
        if kind == AXIS_L1:
            s = <float>_sum_abs(x, n)
        else:
            s = sqrtf(<float>_sum_sq_dev(x, n, zero))
        if s == 0:
            memset(y, 0, n * sizeof(float))
        else:
            for i in range(n):
                y[i] = x[i] / s


cdef void _axis_columns(const float *x, float *y, Py_ssize_t n, Py_ssize_t inner,
                        Py_ssize_t w, int kind) noexcept nogil:
    """The op of w <= TILE columns, x[k * inner + j] for k < n, j < w."""
    cdef float m[TILE]
    cdef float s[TILE]
    cdef float best[TILE]
    cdef float v, zero = 0, one = 1
    cdef Py_ssize_t k, j
    if kind == AXIS_LOG_SOFTMAX or kind == AXIS_HARDMAX:
        for j in range(w):
            m[j] = x[j]
            s[j] = 0
            best[j] = 0
        for k in range(1, n):
            for j in range(w):
                v = x[k * inner + j]
                best[j] = <float>k if v > m[j] else best[j]
                m[j] = v if v > m[j] else m[j]
        if kind == AXIS_HARDMAX:
            for k in range(n):
                for j in range(w):
                    y[k * inner + j] = one if best[j] == <float>k else zero
            return
        for k in range(n):
            for j in range(w):
                s[j] += exp_fp32(x[k * inner + j] - m[j])
        for j in range(w):
            s[j] = logf(s[j])
        for k in range(n):
            for j in range(w):
                y[k * inner + j] = (x[k * inner + j] - m[j]) - s[j]
        return
    for j in range(w):
        s[j] = 0
    for k in range(n):
        for j in range(w):
            v = x[k * inner + j]
            s[j] += (v if v >= 0 else -v) if kind == AXIS_L1 else v * v
    if kind == AXIS_L2:
        for j in range(w):
            s[j] = sqrtf(s[j])
    for k in range(n):
        for j in range(w):
            # 0 / 0 is 0 here, as in onnx's reference.
            y[k * inner + j] = x[k * inner + j] / s[j] if s[j] != 0 else zero


cdef void _axis_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const AxisArgs *a = <const AxisArgs *>p
    cdef Py_ssize_t i0, i1, it, o, j, off, n = a.n, inner = a.inner
    ppl_partition(a.outer * a.tiles, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        o = it // a.tiles
        if inner == 1:
            _axis_row(a.x + o * n, a.y + o * n, n, a.kind)
        else:
            j = (it % a.tiles) * TILE
            off = o * n * inner + j
            _axis_columns(a.x + off, a.y + off, n, inner, min(<Py_ssize_t>TILE, inner - j),
                          a.kind)


_AXIS_KINDS = {"log_softmax": AXIS_LOG_SOFTMAX, "hardmax": AXIS_HARDMAX, "l1": AXIS_L1,
               "l2": AXIS_L2}


def make_axis_step(size_t x, size_t y, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
                   str kind, keep=None):
    """Step of ``kind`` (log_softmax, hardmax, l1, l2) along axis 1 of (outer, n, inner):
    log_softmax y = x - max - log(sum(exp(x - max))); hardmax y = onehot(first argmax);
    l1 / l2 y = x / ||x||_p (0 where the norm is 0)."""
    cdef Step step
    cdef AxisArgs *a
    if kind not in _AXIS_KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {sorted(_AXIS_KINDS)}")
    if x == 0 or y == 0:
        raise ValueError("x and y must be given")
    if outer < 0 or n < 1 or inner < 1:
        raise ValueError(f"(outer, n, inner) = {(outer, n, inner)}: expected n, inner >= 1")
    step = new_step(_axis_step, sizeof(AxisArgs), outer * n * inner > GRAIN, keep)
    a = <AxisArgs *>step.args
    a.x = <const float *>x
    a.y = <float *>y
    a.outer = outer
    a.n = n
    a.inner = inner
    a.tiles = 1 if inner == 1 else ceil_div(inner, TILE)
    a.kind = _AXIS_KINDS[kind]
    return step


def axis_fp32(x, y, str kind, int num_threads):
    """Test wrapper: ``kind`` along axis 1 of contiguous float32 x, y (outer, n, inner)."""
    if x.dtype != np.float32 or y.dtype != np.float32 or x.shape != y.shape or x.ndim != 3 \
            or not x.flags.c_contiguous or not y.flags.c_contiguous:
        raise ValueError("expected equal C-contiguous float32 arrays (outer, n, inner)")
    if x.size == 0:
        return
    run_steps([make_axis_step(_address(x), _address(y), x.shape[0], x.shape[1], x.shape[2],
                              kind, (x, y))], num_threads)
