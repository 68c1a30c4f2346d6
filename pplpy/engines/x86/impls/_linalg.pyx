# Batched determinants of square float32 / float64 matrices, for Det.
#
#     make_det_step(y, x, elem_type, batch, m, num_threads) -> Step
#
# Each matrix is copied into a per-thread float64 buffer and factored in place by Gaussian
# elimination with partial pivoting (LU, the row of the largest |value| in the column taken
# as pivot): det = (-1)^swaps * the product of the pivots.  A zero pivot column makes the
# determinant 0 without dividing; a matrix holding a NaN has determinant NaN.  A 0 x 0
# matrix has determinant 1.  Matrices are split between threads.

from libc.math cimport NAN, fabs

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_onnx_types.pxi"

cdef enum:
    # Below this much work (m^3 per matrix) a step is serial: a fork and join cost more.
    PARALLEL_WORK = 65536

ctypedef fused real_t:
    float
    double


cdef struct DetArgs:
    const char *x
    char *y
    double *scratch          # per thread: m * m doubles
    int is_double
    Py_ssize_t batch
    Py_ssize_t m


cdef double _lu_det(double *a, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t col, row, k, pivot
    cdef double det = 1.0, best, value, factor, tmp
    for col in range(m):
        pivot = col
        best = fabs(a[col * m + col])
        for row in range(col + 1, m):
            value = fabs(a[row * m + col])
            if value > best:
                best = value
                pivot = row
        if a[pivot * m + col] == 0.0:
            return 0.0
        if pivot != col:
            det = -det
            for k in range(col, m):
                tmp = a[col * m + k]
                a[col * m + k] = a[pivot * m + k]
                a[pivot * m + k] = tmp
        det = det * a[col * m + col]
        for row in range(col + 1, m):
            factor = a[row * m + col] / a[col * m + col]
            for k in range(col + 1, m):
                a[row * m + k] = a[row * m + k] - factor * a[col * m + k]
    return det


cdef inline double _nan_or_det(double *a, Py_ssize_t m, bint nan) noexcept nogil:
    if nan:
        return NAN
    return _lu_det(a, m)


cdef void _det_typed(const DetArgs *args, const real_t *x, real_t *y, double *a,
                     Py_ssize_t begin, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t b, i, mm = args.m * args.m
    cdef bint nan
    for b in range(begin, end):
        nan = False
        for i in range(mm):
            a[i] = x[b * mm + i]
            nan = nan | (a[i] != a[i])
        # A NaN gives NaN even where a zero pivot column would stop the elimination first.
        y[b] = <real_t>_nan_or_det(a, args.m, nan)


cdef void _det_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const DetArgs *args = <const DetArgs *>p
    cdef Py_ssize_t b, e
    cdef double *a = args.scratch + tid * args.m * args.m
    ppl_partition(args.batch, tid, nthreads, &b, &e)
    if args.is_double:
        _det_typed(args, <const double *>args.x, <double *>args.y, a, b, e)
    else:
        _det_typed(args, <const float *>args.x, <float *>args.y, a, b, e)


def make_det_step(size_t y, size_t x, int elem_type, Py_ssize_t batch, Py_ssize_t m,
                  int num_threads=1, keep=None):
    """Step: y[b] = det(x[b]) for ``batch`` row-major m x m matrices of ONNX type
    ``elem_type`` (float32 or float64); y holds ``batch`` values of that type."""
    if elem_type not in (T_FLOAT, T_DOUBLE):
        raise ValueError(f"Det needs float32 or float64, got ONNX type {elem_type}")
    if batch < 0 or m < 0 or num_threads < 1:
        raise ValueError(f"bad sizes: batch {batch}, m {m}, threads {num_threads}")
    scratch = np.zeros(max(num_threads * m * m, 1), np.float64)
    cdef double[::1] sv = scratch
    cdef Step step = new_step(_det_step, sizeof(DetArgs),
                              <double>batch * m * m * m > PARALLEL_WORK, (scratch, keep))
    cdef DetArgs *args = <DetArgs *>step.args
    args.x = <const char *>x
    args.y = <char *>y
    args.scratch = &sv[0]
    args.is_double = elem_type == T_DOUBLE
    args.batch = batch
    args.m = m
    return step


def det(x, y, int num_threads=1):
    """Test wrapper: y (batch,) = det of each x[b] (batch, m, m), C-contiguous."""
    code = T_DOUBLE if x.dtype == np.float64 else T_FLOAT
    run_steps([make_det_step(y.ctypes.data, x.ctypes.data, code, x.shape[0], x.shape[x.ndim - 1],
                             num_threads, (x, y))], num_threads)
