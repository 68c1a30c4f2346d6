# Normalisation kernels as compiled steps of the run plan (see pplpy/runtime/step.pxd):
# per-channel affine (BatchNormalization at inference: y = x * scale[c] + shift[c], with
# scale and shift folded from the BN parameters once when they are constants, or per
# channel inside the step when they arrive at run time), Softmax, LogSoftmax and LRN.
#
# Where the fold is not finite (var + epsilon == 0, an inf or NaN statistic) a channel is
# computed as y = (x - mean[c]) * scale[c] + B[c] instead, the spec's arithmetic: +/-inf
# for x != mean, NaN for x == mean, where x * inf + (B - mean * inf) would give NaN.
#
#     make_channel_affine_{ndarray,n16cx}_step   folded scale and shift
#     make_batchnorm_{ndarray,n16cx}_step        scale, B, mean, var and epsilon
#     make_softmax_step                          Softmax / LogSoftmax along (outer, n, inner)
#     make_lrn_step                              LRN across channels of (N, C, S)
#
# Every step splits independent work items (rows of pixels, softmax rows or column tiles,
# LRN pixel tiles) by ppl_partition.  The items depend on the shape only, never on the
# team size, so every thread count gives the same bytes.  The Python-visible wrappers
# below build the same steps and run them with run_steps: tests and runtime take one path.
#
# Written once and included by _norm_fp32_{avx512,fma,sse}.pyx.  Reductions keep
# per-column (or 16-lane) partial results so that gcc vectorises them without
# -ffast-math, which it needs to reorder a single running sum.

import numpy as np
from libc.float cimport FLT_MAX, FLT_MIN
from libc.math cimport logf, pow, sqrtf
from pplpy.runtime.step cimport Step, new_step, ppl_partition

from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"

cdef extern from "_rows_fp32.h" nogil:
    void ppl_row_softmax(const float *x, float *y, Py_ssize_t n, int log)


cdef enum:
    # Softmax over a strided axis works on up to this many columns at a time (stack buffers).
    SOFTMAX_TILE = 128
    LANES = 16
    # Below this many elements a step is serial: a fork and join cost more than they save.
    PARALLEL_MIN = 65536


cdef inline size_t _addr(const void* p) noexcept:
    return <size_t>p


cdef int _check_same_shape3(const float[:, :, ::1] x, const float[:, :, ::1] y) except -1:
    if x.shape[0] != y.shape[0] or x.shape[1] != y.shape[1] or x.shape[2] != y.shape[2]:
        raise ValueError(f"x {(x.shape[0], x.shape[1], x.shape[2])}, y "
                         f"{(y.shape[0], y.shape[1], y.shape[2])}: expected equal shapes")
    return 0


cdef int _check_sizes(str op, sizes) except -1:
    if any(s < 0 for s in sizes):
        raise ValueError(f"{op}: negative size in {list(sizes)}")
    return 0


# ---------------------------------------------------------------------------------------
# Per-channel affine.  Work items are pixels of (rows, S), a row being one (n, c) channel
# (NDARRAY, a pixel one float) or one (n, cb) channel block (N16CX, a pixel 16 floats).

cdef struct _AffineArgs:
    const float* x
    float* y
    const float* scale      # folded: y = (x - center[c]) * scale[c] + shift[c]
    const float* shift      # (BN: B; with `fold`, scale is BN's scale and shift its B)
    const float* center     # NULL: 0 (not fold)
    const float* mean       # fold only: scale[c] / sqrt(var[c] + epsilon), and so on
    const float* var
    float epsilon
    bint fold
    Py_ssize_t rows         # N * C, or N * blocks
    Py_ssize_t groups       # C, or blocks: row r is channel (block) r % groups
    Py_ssize_t channels     # C: N16CX lanes of channels >= C are padding (fold only)
    Py_ssize_t S            # pixels per row
    Py_ssize_t lanes        # 1 or LANES


cdef inline void _affine_coefficients(const _AffineArgs* a, Py_ssize_t c, float* k,
                                      float* b, float* m) noexcept nogil:
    """k, b, m of channel c: y = (x - m) * k + b (m = 0 where the fold is finite)."""
    m[0] = 0
    if not a.fold:
        k[0] = a.scale[c]
        b[0] = a.shift[c]
        if a.center != NULL:
            m[0] = a.center[c]
    elif c >= a.channels:
        k[0] = 0
        b[0] = 0
    else:
        k[0] = a.scale[c] / sqrtf(a.var[c] + a.epsilon)
        b[0] = a.shift[c] - a.mean[c] * k[0]
        # v - v is 0 for finite v, NaN for inf and NaN (no -ffinite-math-only here).
        if not (k[0] - k[0] == 0 and b[0] - b[0] == 0):
            m[0] = a.mean[c]
            b[0] = a.shift[c]


cdef void _affine_rows_of_channels(const _AffineArgs* a, Py_ssize_t begin,
                                   Py_ssize_t end) noexcept nogil:
    """Elements [begin, end) of an NDARRAY (N, C) input (one pixel per channel: BatchNorm1d
    over rows, LeViT's and tabular MLPs'), along each row's channels with the folded
    coefficients, a loop gcc vectorises.  Channel by channel, as the general loop goes, each
    element cost a call for its coefficients: 10x ONNX Runtime's time on (196, 256)."""
    cdef Py_ssize_t e = begin, c0, count, i
    cdef const float* k
    cdef const float* b
    cdef const float* m
    cdef const float* x
    cdef float* y
    while e < end:
        c0 = e % a.groups
        count = min(end - e, a.groups - c0)
        k, b, x, y = a.scale + c0, a.shift + c0, a.x + e, a.y + e
        if a.center == NULL:
            for i in range(count):
                y[i] = x[i] * k[i] + b[i]
        else:
            m = a.center + c0
            for i in range(count):
                y[i] = (x[i] - m[i]) * k[i] + b[i]
        e += count


cdef void _affine_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _AffineArgs* a = <const _AffineArgs*>p
    cdef Py_ssize_t begin, end, r, s0, s1, i, off
    cdef int l
    cdef float k1, b1, m1
    cdef bint centered
    cdef float k[LANES]
    cdef float b[LANES]
    cdef float m[LANES]
    ppl_partition(a.rows * a.S, tid, nthreads, &begin, &end)
    if begin >= end:
        return
    if a.lanes == 1 and a.S == 1 and not a.fold:
        _affine_rows_of_channels(a, begin, end)
        return
    for r in range(begin // a.S, (end - 1) // a.S + 1):
        s0 = begin - r * a.S if begin > r * a.S else 0
        s1 = end - r * a.S if end < (r + 1) * a.S else a.S
        off = (r * a.S + s0) * a.lanes
        if a.lanes == 1:
            _affine_coefficients(a, r % a.groups, &k1, &b1, &m1)
            if m1 == 0:
                for i in range(s1 - s0):
                    a.y[off + i] = a.x[off + i] * k1 + b1
            else:
                for i in range(s1 - s0):
                    a.y[off + i] = (a.x[off + i] - m1) * k1 + b1
        else:
            centered = False
            for l in range(LANES):
                _affine_coefficients(a, (r % a.groups) * LANES + l, &k[l], &b[l], &m[l])
                centered = centered or m[l] != 0
            if not centered:
                for i in range(s1 - s0):
                    for l in range(LANES):
                        a.y[off + i * LANES + l] = a.x[off + i * LANES + l] * k[l] + b[l]
            else:
                for i in range(s1 - s0):
                    for l in range(LANES):
                        a.y[off + i * LANES + l] = (a.x[off + i * LANES + l] - m[l]) * k[l] \
                            + b[l]


cdef Step _affine_step_of(size_t x, size_t y, size_t scale, size_t shift, size_t mean,
                          size_t var, float epsilon, bint fold, Py_ssize_t N, Py_ssize_t groups,
                          Py_ssize_t channels, Py_ssize_t S, Py_ssize_t lanes, keep,
                          size_t center=0):
    cdef Py_ssize_t total = N * groups * S * lanes
    cdef Step step = new_step(_affine_step, sizeof(_AffineArgs),
                              total >= PARALLEL_MIN and N * groups * S > 1, keep)
    cdef _AffineArgs* a = <_AffineArgs*>step.args
    a.x = <const float*>x
    a.y = <float*>y
    a.scale = <const float*>scale
    a.shift = <const float*>shift
    a.center = <const float*>center
    a.mean = <const float*>mean
    a.var = <const float*>var
    a.epsilon = epsilon
    a.fold = fold
    a.rows = N * groups
    a.groups = groups
    a.channels = channels
    a.S = S
    a.lanes = lanes
    return step


def make_channel_affine_ndarray_step(size_t x, size_t scale, size_t shift, size_t y,
                                     Py_ssize_t N, Py_ssize_t C, Py_ssize_t S, keep=None,
                                     size_t center=0):
    """Step: y[n, c, s] = (x[n, c, s] - center[c]) * scale[c] + shift[c]; x, y (N, C, S),
    y may be x; center 0 (no array): 0."""
    _check_sizes("channel_affine_ndarray", (N, C, S))
    return _affine_step_of(x, y, scale, shift, 0, 0, 0, False, N, C, C, S, 1, keep, center)


def make_channel_affine_n16cx_step(size_t x, size_t scale, size_t shift, size_t y,
                                   Py_ssize_t N, Py_ssize_t blocks, Py_ssize_t S, keep=None,
                                   size_t center=0):
    """Step: as make_channel_affine_ndarray_step for x, y (N, blocks, S, 16); scale, shift
    (and center) hold blocks * 16 values (C padded)."""
    _check_sizes("channel_affine_n16cx", (N, blocks, S))
    return _affine_step_of(x, y, scale, shift, 0, 0, 0, False, N, blocks, blocks * LANES, S,
                           LANES, keep, center)


def make_batchnorm_ndarray_step(size_t x, size_t scale, size_t bias, size_t mean, size_t var,
                                float epsilon, size_t y, Py_ssize_t N, Py_ssize_t C,
                                Py_ssize_t S, keep=None):
    """Step: y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c], x, y (N, C, S).

    For BN parameters known only at run time: the step folds each channel's coefficients
    itself (C values each; cheap beside the C * S pixels)."""
    _check_sizes("batchnorm_ndarray", (N, C, S))
    return _affine_step_of(x, y, scale, bias, mean, var, epsilon, True, N, C, C, S, 1, keep)


def make_batchnorm_n16cx_step(size_t x, size_t scale, size_t bias, size_t mean, size_t var,
                              float epsilon, size_t y, Py_ssize_t N, Py_ssize_t C,
                              Py_ssize_t S, keep=None):
    """Step: make_batchnorm_ndarray_step for x, y (N, ceil(C/16), S, 16); the parameters
    hold C values, padding lanes get 0."""
    _check_sizes("batchnorm_n16cx", (N, C, S))
    return _affine_step_of(x, y, scale, bias, mean, var, epsilon, True, N,
                           (C + LANES - 1) // LANES, C, S, LANES, keep)


cdef size_t _center_addr(const float[::1] center, Py_ssize_t n) except? 0:
    if center is None:
        return 0
    if center.shape[0] != n:
        raise ValueError(f"center has {center.shape[0]} values: expected {n}")
    return _addr(&center[0]) if n > 0 else 0


def channel_affine_ndarray_fp32(const float[:, :, ::1] x, const float[::1] scale,
                                const float[::1] shift, float[:, :, ::1] y, int num_threads,
                                const float[::1] center=None):
    """y[n, c, s] = (x[n, c, s] - center[c]) * scale[c] + shift[c]; x, y (N, C, S)."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], S = x.shape[2]
    _check_same_shape3(x, y)
    if scale.shape[0] != C or shift.shape[0] != C:
        raise ValueError(f"scale, shift have {scale.shape[0]}, {shift.shape[0]} values: "
                         f"expected C = {C}")
    cdef size_t c_addr = _center_addr(center, C)
    if N * C * S == 0:
        return
    run_steps([make_channel_affine_ndarray_step(_addr(&x[0, 0, 0]), _addr(&scale[0]),
                                                _addr(&shift[0]), _addr(&y[0, 0, 0]), N, C, S,
                                                None, c_addr)],
              num_threads)


cdef int _check_blocked(const float[:, :, :, ::1] x, const float[:, :, :, ::1] y) except -1:
    if x.shape[3] != LANES or y.shape[3] != LANES or y.shape[0] != x.shape[0] \
            or y.shape[1] != x.shape[1] or y.shape[2] != x.shape[2]:
        raise ValueError(f"x {(x.shape[0], x.shape[1], x.shape[2], x.shape[3])}, y "
                         f"{(y.shape[0], y.shape[1], y.shape[2], y.shape[3])}: expected equal "
                         "shapes (N, ceil(C/16), S, 16)")
    return 0


def channel_affine_n16cx_fp32(const float[:, :, :, ::1] x, const float[::1] scale,
                              const float[::1] shift, float[:, :, :, ::1] y, int num_threads,
                              const float[::1] center=None):
    """y[n, c, s] = (x[n, c, s] - center[c]) * scale[c] + shift[c]; x, y (N, C/16, S, 16),
    scale, shift (and center) padded."""
    cdef Py_ssize_t N = x.shape[0], blocks = x.shape[1], S = x.shape[2]
    _check_blocked(x, y)
    if scale.shape[0] != blocks * LANES or shift.shape[0] != blocks * LANES:
        raise ValueError(f"scale, shift have {scale.shape[0]}, {shift.shape[0]} values: "
                         f"expected {blocks * LANES} (C padded to a multiple of 16)")
    cdef size_t c_addr = _center_addr(center, blocks * LANES)
    if N * blocks * S == 0:
        return
    run_steps([make_channel_affine_n16cx_step(_addr(&x[0, 0, 0, 0]), _addr(&scale[0]),
                                              _addr(&shift[0]), _addr(&y[0, 0, 0, 0]), N,
                                              blocks, S, None, c_addr)], num_threads)


cdef int _check_bn_params(Py_ssize_t C, const float[::1] scale, const float[::1] bias,
                          const float[::1] mean, const float[::1] var) except -1:
    got = [scale.shape[0], bias.shape[0], mean.shape[0], var.shape[0]]
    if any(n != C for n in got):
        raise ValueError(f"scale, B, mean, var have {got} values: expected C = {C} each")
    return 0


def batchnorm_ndarray_fp32(const float[:, :, ::1] x, const float[::1] scale,
                           const float[::1] bias, const float[::1] mean, const float[::1] var,
                           float epsilon, float[:, :, ::1] y, int num_threads):
    """y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]; x, y (N, C, S)."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], S = x.shape[2]
    _check_same_shape3(x, y)
    _check_bn_params(C, scale, bias, mean, var)
    if N * C * S == 0:
        return
    run_steps([make_batchnorm_ndarray_step(_addr(&x[0, 0, 0]), _addr(&scale[0]),
                                           _addr(&bias[0]), _addr(&mean[0]), _addr(&var[0]),
                                           epsilon, _addr(&y[0, 0, 0]), N, C, S)], num_threads)


def batchnorm_n16cx_fp32(const float[:, :, :, ::1] x, const float[::1] scale,
                         const float[::1] bias, const float[::1] mean, const float[::1] var,
                         float epsilon, float[:, :, :, ::1] y, int num_threads):
    """batchnorm_ndarray_fp32 for x, y (N, ceil(C/16), S, 16), C = len(scale)."""
    cdef Py_ssize_t N = x.shape[0], C = scale.shape[0], S = x.shape[2]
    _check_blocked(x, y)
    if (C + LANES - 1) // LANES != x.shape[1]:
        raise ValueError(f"x has {x.shape[1]} channel blocks: expected ceil({C} / 16)")
    _check_bn_params(C, scale, bias, mean, var)
    if N * C * S == 0:
        return
    run_steps([make_batchnorm_n16cx_step(_addr(&x[0, 0, 0, 0]), _addr(&scale[0]),
                                         _addr(&bias[0]), _addr(&mean[0]), _addr(&var[0]),
                                         epsilon, _addr(&y[0, 0, 0, 0]), N, C, S)],
              num_threads)


# ---------------------------------------------------------------------------------------
# Softmax and LogSoftmax along the middle axis of (outer, n, inner).
#
# inner == 1 (softmax over the last axis): a work item is one contiguous row, reduced by the
# vector row operations of _rows_fp32.h.  Otherwise an item is a tile of up to `tile` columns of one
# outer index, reduced together, the loop over columns being the contiguous, vectorised
# one.  (A single long row is one item: splitting it needs two steps.)

cdef void _softmax_row(const float* x, float* y, Py_ssize_t n, bint log) noexcept nogil:
    ppl_row_softmax(x, y, n, log)


cdef void _softmax_columns(const float* x, float* y, Py_ssize_t n, Py_ssize_t inner,
                           Py_ssize_t w, bint log) noexcept nogil:
    """Softmax of w <= SOFTMAX_TILE columns, x[k * inner + j] for k < n, j < w."""
    cdef float m[SOFTMAX_TILE]
    cdef float s[SOFTMAX_TILE]
    cdef float d[SOFTMAX_TILE]
    cdef float v, e, one = 1
    cdef Py_ssize_t k, j
    for j in range(w):
        m[j] = x[j]
        s[j] = 0
    for k in range(1, n):
        for j in range(w):
            v = x[k * inner + j]
            m[j] = v if v > m[j] else m[j]
    if log:
        for k in range(n):
            for j in range(w):
                s[j] += exp_fp32(x[k * inner + j] - m[j])
        for j in range(w):
            d[j] = logf(s[j])
        for k in range(n):
            for j in range(w):
                y[k * inner + j] = (x[k * inner + j] - m[j]) - d[j]
    else:
        for k in range(n):
            for j in range(w):
                e = exp_fp32(x[k * inner + j] - m[j])
                y[k * inner + j] = e
                s[j] += e
        for j in range(w):
            s[j] = one / s[j]
        for k in range(n):
            for j in range(w):
                y[k * inner + j] = y[k * inner + j] * s[j]


cdef struct _SoftmaxArgs:
    const float* x
    float* y
    Py_ssize_t outer, n, inner
    Py_ssize_t tile         # columns per item when inner > 1
    Py_ssize_t tiles        # items per outer index
    bint log


cdef void _softmax_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _SoftmaxArgs* a = <const _SoftmaxArgs*>p
    cdef Py_ssize_t begin, end, item, o, j, off
    ppl_partition(a.outer * a.tiles, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        o = item // a.tiles
        if a.inner == 1:
            _softmax_row(a.x + o * a.n, a.y + o * a.n, a.n, a.log)
        else:
            j = (item % a.tiles) * a.tile
            off = o * a.n * a.inner + j
            _softmax_columns(a.x + off, a.y + off, a.n, a.inner, min(a.tile, a.inner - j),
                             a.log)


def make_softmax_step(size_t x, size_t y, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
                      bint log=False):
    """Step: softmax (log: log-softmax) along axis 1 of x, y (outer, n, inner); y may be x."""
    _check_sizes("softmax", (outer, n, inner))
    cdef Step step = new_step(_softmax_step, sizeof(_SoftmaxArgs), False)
    cdef _SoftmaxArgs* a = <_SoftmaxArgs*>step.args
    cdef Py_ssize_t tile = SOFTMAX_TILE
    if inner > 1:
        # Narrower tiles when there are few: enough items for a team, from the shape alone.
        while tile > LANES and outer * ((inner + tile - 1) // tile) < 8:
            tile //= 2
    a.x = <const float*>x
    a.y = <float*>y
    a.outer = outer if n > 0 else 0
    a.n = n
    a.inner = inner
    a.tile = tile
    a.tiles = 1 if inner == 1 else (inner + tile - 1) // tile
    a.log = log
    step.parallel = outer * n * inner >= PARALLEL_MIN and a.outer * a.tiles > 1
    return step


cdef int _softmax(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads,
                  bint log) except -1:
    cdef Py_ssize_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2]
    _check_same_shape3(x, y)
    if outer * n * inner == 0:
        return 0
    run_steps([make_softmax_step(_addr(&x[0, 0, 0]), _addr(&y[0, 0, 0]), outer, n, inner,
                                 log)], num_threads)
    return 0


def softmax_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads):
    """y = exp(x - max(x)) / sum(exp(x - max(x))) along axis 1 of (outer, n, inner)."""
    _softmax(x, y, num_threads, False)


def log_softmax_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads):
    """y = x - max(x) - log(sum(exp(x - max(x)))) along axis 1 of (outer, n, inner)."""
    _softmax(x, y, num_threads, True)


# ---------------------------------------------------------------------------------------
# LRN (across channels).  A work item is a tile of pixels of one image, all channels; the
# window sums of the tile go to the thread's own scratch rows first, so that y may be x.
#
# The fast path sums squares in float and raises d = bias + alpha / size * sum to -beta with
# the vectorised exp and log, which hold for normal d only.  A tile where some d is not a
# normal float (a square or sum that overflowed: |x| > ~1.8e19; an inf or NaN input; bias
# <= 0, where d may be 0 or negative; a denormal d) is computed instead in double with
# libm's pow, the spec's formula as written: huge inputs give their true finite result, an
# inf input NaN at its own channel and 0 at its neighbours, a NaN input NaN in its window.

cdef void _lrn_tile_double(const float* x, float* y, double* sums, Py_ssize_t C,
                           Py_ssize_t S, Py_ssize_t w, int before, int after, double coef,
                           double beta, double bias) noexcept nogil:
    """_lrn_tile in double: every sum first (y may be x), then y."""
    cdef Py_ssize_t c, k, j, lo, hi
    cdef double v
    for c in range(C):
        for j in range(w):
            sums[c * w + j] = 0
        lo = max(0, c - before)
        hi = min(C - 1, c + after)
        for k in range(lo, hi + 1):
            for j in range(w):
                v = x[k * S + j]
                sums[c * w + j] += v * v
    for c in range(C):
        for j in range(w):
            y[c * S + j] = <float>(x[c * S + j] / pow(bias + coef * sums[c * w + j], beta))


cdef void _lrn_tile(const float* x, float* y, double* scratch, Py_ssize_t C, Py_ssize_t S,
                    Py_ssize_t w, int before, int after, float coef, float beta,
                    float bias, double coef_d) noexcept nogil:
    """LRN of w pixels (columns) of all C channels; x[c * S + j].  scratch: C * w doubles
    (the fast path uses its first C * w floats)."""
    cdef float* sums = <float*>scratch
    cdef Py_ssize_t c, k, j, lo, hi
    cdef float v, d, minus_beta = -beta, lowest = FLT_MIN, highest = FLT_MAX
    cdef int bad = 0
    if bias <= 0:
        _lrn_tile_double(x, y, scratch, C, S, w, before, after, coef_d, beta, bias)
        return
    for c in range(C):
        for j in range(w):
            sums[c * w + j] = 0
        lo = max(0, c - before)
        hi = min(C - 1, c + after)
        for k in range(lo, hi + 1):
            for j in range(w):
                v = x[k * S + j]
                sums[c * w + j] += v * v
    for c in range(C * w):
        d = bias + coef * sums[c]
        bad |= not (d >= lowest and d <= highest)  # false for NaN too
    if bad:
        _lrn_tile_double(x, y, scratch, C, S, w, before, after, coef_d, beta, bias)
        return
    for c in range(C):
        for j in range(w):
            # d ** -beta as exp(-beta * log(d)): powf does not vectorise; d is normal.
            d = bias + coef * sums[c * w + j]
            y[c * S + j] = x[c * S + j] * exp_fp32(minus_beta * log_fp32(d))


cdef struct _LrnArgs:
    const float* x
    float* y
    double* sums            # max_threads blocks of C * tile doubles, one per thread
    Py_ssize_t N, C, S
    Py_ssize_t tile         # pixels per item
    Py_ssize_t tiles        # items per image
    int max_threads         # team size the scratch was sized for
    int before, after
    float coef, beta, bias
    double coef_d           # alpha / size in double, for the double path


cdef void _lrn_step(const void* p, int tid, int nthreads) noexcept nogil:
    cdef const _LrnArgs* a = <const _LrnArgs*>p
    cdef Py_ssize_t begin, end, item, image, j0, off
    # Scratch exists for max_threads threads: a larger team leaves the extra threads idle.
    cdef int team = nthreads if nthreads < a.max_threads else a.max_threads
    if tid >= team:
        return
    ppl_partition(a.N * a.tiles, tid, team, &begin, &end)
    for item in range(begin, end):
        image = item // a.tiles
        j0 = (item % a.tiles) * a.tile
        off = image * a.C * a.S + j0
        _lrn_tile(a.x + off, a.y + off, a.sums + tid * a.C * a.tile, a.C, a.S,
                  min(a.tile, a.S - j0), a.before, a.after, a.coef, a.beta, a.bias, a.coef_d)


def make_lrn_step(size_t x, size_t y, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S, int size,
                  float alpha, float beta, float bias, int num_threads):
    """Step: y = x / (bias + alpha / size * sum(x[c'] ** 2 for c' in the window of c)) ** beta.

    x, y (N, C, S), y may be x; the window of channel c is [c - floor((size - 1) / 2),
    c + ceil((size - 1) / 2)].  num_threads: the team size (sizes the scratch)."""
    _check_sizes("lrn", (N, C, S))
    if size < 1:
        raise ValueError(f"size {size}: expected a positive window size")
    cdef int team = max(1, num_threads)
    # Pixel tiles whose sums (C x tile floats) stay in L1/L2.
    cdef Py_ssize_t tile = min(S, max(LANES, (8192 // max(C, 1)) // LANES * LANES))
    tile = max(tile, 1)
    sums = np.empty((team, C * tile), np.float64)
    cdef double[:, ::1] sums_view = sums
    cdef Step step = new_step(_lrn_step, sizeof(_LrnArgs),
                              N * C * S >= PARALLEL_MIN and N * ((S + tile - 1) // tile) > 1,
                              sums)
    cdef _LrnArgs* a = <_LrnArgs*>step.args
    a.x = <const float*>x
    a.y = <float*>y
    a.sums = &sums_view[0, 0] if C * tile > 0 else NULL
    a.N = N if C * S > 0 else 0
    a.C = C
    a.S = S
    a.tile = tile
    a.tiles = (S + tile - 1) // tile
    a.max_threads = team
    a.before = (size - 1) // 2
    a.after = size // 2
    a.coef = alpha / size
    a.coef_d = <double>alpha / size
    a.beta = beta
    a.bias = bias
    return step


def lrn_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int size, float alpha, float beta,
             float bias, int num_threads):
    """y = x / (bias + alpha / size * sum(x[c'] ** 2 for c' in the window of c)) ** beta.

    The window of channel c is [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)].
    """
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], S = x.shape[2]
    _check_same_shape3(x, y)
    if size < 1:
        raise ValueError(f"size {size}: expected a positive window size")
    if N * C * S == 0:
        return
    run_steps([make_lrn_step(_addr(&x[0, 0, 0]), _addr(&y[0, 0, 0]), N, C, S, size, alpha,
                             beta, bias, num_threads)], num_threads)
