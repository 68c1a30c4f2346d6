# Normalisation kernels: per-channel affine (BatchNormalization at inference, once its
# kernel class has folded mean, var and epsilon into scale and shift), Softmax, LogSoftmax
# and LRN.
#
# Written once and included by _norm_fp32_{avx512,fma,sse}.pyx.  Reductions keep
# per-column (or 16-lane) partial results so that gcc vectorises them without
# -ffast-math, which it needs to reorder a single running sum.

import numpy as np
from cython.parallel cimport prange, threadid
from libc.math cimport logf, powf

include "_kernel_support.pxi"


cdef enum:
    # Softmax over a strided axis works on this many columns at a time (stack buffers).
    SOFTMAX_TILE = 128
    LANES = 16


# ---------------------------------------------------------------------------------------
# Per-channel affine.

cdef inline void _affine(const float* x, float* y, Py_ssize_t n, float a, float b) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = x[i] * a + b


cdef void _affine_ndarray_task(const float* x, const float* scale, const float* shift,
                               float* y, Py_ssize_t C, const Tasks2D* tasks,
                               Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, r, off
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    for r in range(r0, r1):    # r = n * C + c
        off = r * tasks.cols + c0
        _affine(x + off, y + off, c1 - c0, scale[r % C], shift[r % C])


def channel_affine_ndarray_fp32(const float[:, :, ::1] x, const float[::1] scale,
                                const float[::1] shift, float[:, :, ::1] y, int num_threads):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c]; x, y (N, C, S)."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], S = x.shape[2], t
    cdef Tasks2D tasks
    _check_same_shape3(x, y)
    if scale.shape[0] != C or shift.shape[0] != C:
        raise ValueError(f"scale, shift have {scale.shape[0]}, {shift.shape[0]} values: "
                         f"expected C = {C}")
    tasks = split_2d(N * C, S, GRAIN)
    if tasks.count == 0:
        return
    for t in prange(tasks.count, nogil=True, num_threads=threads_for(num_threads, tasks.count),
                    schedule="static"):
        _affine_ndarray_task(&x[0, 0, 0], &scale[0], &shift[0], &y[0, 0, 0], C, &tasks, t)


cdef void _affine_n16cx_task(const float* x, const float* scale, const float* shift,
                             float* y, Py_ssize_t blocks, const Tasks2D* tasks,
                             Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, r, i, off
    cdef int l
    cdef float a[LANES]
    cdef float b[LANES]
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    for r in range(r0, r1):    # r = n * blocks + cb
        for l in range(LANES):
            a[l] = scale[(r % blocks) * LANES + l]
            b[l] = shift[(r % blocks) * LANES + l]
        off = (r * tasks.cols + c0) * LANES
        for i in range(c1 - c0):
            for l in range(LANES):
                y[off + i * LANES + l] = x[off + i * LANES + l] * a[l] + b[l]


def channel_affine_n16cx_fp32(const float[:, :, :, ::1] x, const float[::1] scale,
                              const float[::1] shift, float[:, :, :, ::1] y, int num_threads):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c]; x, y (N, C/16, S, 16), scale padded."""
    cdef Py_ssize_t N = x.shape[0], blocks = x.shape[1], S = x.shape[2], t
    cdef Tasks2D tasks
    if x.shape[3] != LANES or y.shape[3] != LANES or y.shape[0] != N or y.shape[1] != blocks \
            or y.shape[2] != S:
        raise ValueError(f"x {(N, blocks, S, x.shape[3])}, y "
                         f"{(y.shape[0], y.shape[1], y.shape[2], y.shape[3])}: expected equal "
                         "shapes (N, ceil(C/16), S, 16)")
    if scale.shape[0] != blocks * LANES or shift.shape[0] != blocks * LANES:
        raise ValueError(f"scale, shift have {scale.shape[0]}, {shift.shape[0]} values: "
                         f"expected {blocks * LANES} (C padded to a multiple of 16)")
    tasks = split_2d(N * blocks, S, GRAIN // LANES)
    if tasks.count == 0:
        return
    for t in prange(tasks.count, nogil=True, num_threads=threads_for(num_threads, tasks.count),
                    schedule="static"):
        _affine_n16cx_task(&x[0, 0, 0, 0], &scale[0], &shift[0], &y[0, 0, 0, 0], blocks,
                           &tasks, t)


cdef int _check_same_shape3(const float[:, :, ::1] x, const float[:, :, ::1] y) except -1:
    if x.shape[0] != y.shape[0] or x.shape[1] != y.shape[1] or x.shape[2] != y.shape[2]:
        raise ValueError(f"x {(x.shape[0], x.shape[1], x.shape[2])}, y "
                         f"{(y.shape[0], y.shape[1], y.shape[2])}: expected equal shapes")
    return 0


# ---------------------------------------------------------------------------------------
# Softmax and LogSoftmax along the middle axis of (outer, n, inner).
#
# inner == 1 (softmax over the last axis) works along contiguous rows with 16 partial
# maxima and sums; otherwise a tile of up to SOFTMAX_TILE columns is reduced together,
# the loop over columns being the contiguous, vectorised one.

cdef float _row_max(const float* x, Py_ssize_t n) noexcept nogil:
    cdef float part[LANES]
    cdef float m = x[0], v
    cdef Py_ssize_t i, nb = n // LANES
    cdef int l
    if nb > 0:
        for l in range(LANES):
            part[l] = x[l]
        for i in range(1, nb):
            for l in range(LANES):
                v = x[i * LANES + l]
                part[l] = v if v > part[l] else part[l]
        for l in range(LANES):
            m = part[l] if part[l] > m else m
    for i in range(nb * LANES, n):
        m = x[i] if x[i] > m else m
    return m


cdef float _row_exp_sum(const float* x, float* y, Py_ssize_t n, float m) noexcept nogil:
    """Return sum(exp(x - m)); y = exp(x - m) unless y is NULL."""
    cdef float part[LANES]
    cdef float e
    cdef double total = 0
    cdef Py_ssize_t i, nb = n // LANES
    cdef int l
    for l in range(LANES):
        part[l] = 0
    for i in range(nb):
        for l in range(LANES):
            e = exp_fp32(x[i * LANES + l] - m)
            if y != NULL:
                y[i * LANES + l] = e
            part[l] += e
        if i % 64 == 63:
            # Hand the float partial sums to a double every 1024 terms: a float sum of
            # 70,000 terms was off by 6e-6.
            for l in range(LANES):
                total += part[l]
                part[l] = 0
    for l in range(LANES):
        total += part[l]
    for i in range(nb * LANES, n):
        e = exp_fp32(x[i] - m)
        if y != NULL:
            y[i] = e
        total += e
    return <float>total


cdef void _softmax_row(const float* x, float* y, Py_ssize_t n, bint log) noexcept nogil:
    cdef float m = _row_max(x, n), s, d
    cdef Py_ssize_t i
    if log:
        d = logf(_row_exp_sum(x, NULL, n, m))
        for i in range(n):
            y[i] = (x[i] - m) - d    # x - m first: it is exact near the maximum
    else:
        s = 1 / _row_exp_sum(x, y, n, m)
        for i in range(n):
            y[i] = y[i] * s


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


cdef void _softmax_task(const float* x, float* y, Py_ssize_t n, Py_ssize_t inner, bint log,
                        const Tasks2D* tasks, Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, o, b, j, off
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    for o in range(r0, r1):
        if inner == 1:
            _softmax_row(x + o * n, y + o * n, n, log)
        else:
            for b in range(ceil_div(c1 - c0, SOFTMAX_TILE)):
                j = c0 + b * SOFTMAX_TILE
                off = o * n * inner + j
                _softmax_columns(x + off, y + off, n, inner, min(SOFTMAX_TILE, c1 - j), log)


cdef int _softmax(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads,
                  bint log) except -1:
    cdef Py_ssize_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2], t
    cdef Tasks2D tasks
    _check_same_shape3(x, y)
    if n == 0:
        return 0
    # Cut columns (inner) into tasks; the grain counts elements along n too.
    tasks = split_2d(outer, inner, max(1, GRAIN // n))
    if inner > 1 and tasks.cols_per_task < inner:
        # Keep column chunks whole tiles, so no tile is split between tasks.
        tasks = split_2d(outer, inner, ceil_div(tasks.cols_per_task, SOFTMAX_TILE) * SOFTMAX_TILE)
    if tasks.count == 0:
        return 0
    for t in prange(tasks.count, nogil=True, num_threads=threads_for(num_threads, tasks.count),
                    schedule="static"):
        _softmax_task(&x[0, 0, 0], &y[0, 0, 0], n, inner, log, &tasks, t)
    return 0


def softmax_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads):
    """y = exp(x - max(x)) / sum(exp(x - max(x))) along axis 1 of (outer, n, inner)."""
    _softmax(x, y, num_threads, False)


def log_softmax_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int num_threads):
    """y = x - max(x) - log(sum(exp(x - max(x)))) along axis 1 of (outer, n, inner)."""
    _softmax(x, y, num_threads, True)


# ---------------------------------------------------------------------------------------
# LRN (across channels).  A task handles a range of pixels of one image for all channels;
# the window sums of a tile of pixels go to a per-thread buffer first, so that y may be x.

cdef void _lrn_tile(const float* x, float* y, float* sums, Py_ssize_t C, Py_ssize_t S,
                    Py_ssize_t w, int before, int after, float coef, float beta,
                    float bias) noexcept nogil:
    """LRN of w pixels (columns) of all C channels; x[c * S + j]."""
    cdef Py_ssize_t c, k, j, lo, hi
    cdef float v, d, minus_beta = -beta
    for c in range(C):
        for j in range(w):
            sums[c * w + j] = 0
        lo = max(0, c - before)
        hi = min(C - 1, c + after)
        for k in range(lo, hi + 1):
            for j in range(w):
                v = x[k * S + j]
                sums[c * w + j] += v * v
    if bias > 0:
        for c in range(C):
            for j in range(w):
                # d ** -beta as exp(-beta * log(d)): powf does not vectorise; d >= bias > 0.
                d = bias + coef * sums[c * w + j]
                y[c * S + j] = x[c * S + j] * exp_fp32(minus_beta * log_fp32(d))
    else:
        # d may be 0 or negative: leave those cases to powf.
        for c in range(C):
            for j in range(w):
                d = bias + coef * sums[c * w + j]
                y[c * S + j] = x[c * S + j] / powf(d, beta)


def lrn_fp32(const float[:, :, ::1] x, float[:, :, ::1] y, int size, float alpha, float beta,
             float bias, int num_threads):
    """y = x / (bias + alpha / size * sum(x[c'] ** 2 for c' in the window of c)) ** beta.

    The window of channel c is [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)].
    """
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], S = x.shape[2], t, w
    cdef Tasks2D tasks
    cdef float[:, ::1] sums
    cdef int nt
    _check_same_shape3(x, y)
    if size < 1:
        raise ValueError(f"size {size}: expected a positive window size")
    if N * C * S == 0:
        return
    # Pixel tiles whose sums (C x w floats) stay in L1/L2.
    w = min(S, max(LANES, (8192 // C) // LANES * LANES))
    tasks = split_2d(N, S, w)
    nt = threads_for(num_threads, tasks.count)
    sums = np.empty((nt, C * w), np.float32)
    for t in prange(tasks.count, nogil=True, num_threads=nt, schedule="static"):
        _lrn_task(&x[0, 0, 0], &y[0, 0, 0], &sums[threadid(), 0], C, S, size, alpha / size,
                  beta, bias, &tasks, t)


cdef void _lrn_task(const float* x, float* y, float* sums, Py_ssize_t C, Py_ssize_t S, int size,
                    float coef, float beta, float bias, const Tasks2D* tasks,
                    Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, off
    task_range(tasks, task, &r0, &r1, &c0, &c1)    # rows are images, columns pixels
    off = r0 * C * S + c0
    _lrn_tile(x + off, y + off, sums, C, S, c1 - c0, (size - 1) // 2, size // 2, coef, beta,
              bias)
