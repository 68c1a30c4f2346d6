# Einsum's direct strided contraction, as a compiled step of the run plan:
#
#     y[o] = sum over c of  prod_k x_k[off_k(o) + off_k(c)]
#
# The planner (ops/onnx/einsum.py) numbers the equation's labels: the output's first (in
# the output's order, y contiguous over them), the summed ones after.  Each operand k reads
# label l with element stride strides[k, l]: 0 where the label is not its own or its dim is
# broadcast (size 1 against a larger ellipsis dim), the sum of its strides where the label
# repeats in it (a diagonal).  So transposes, diagonals, sums, broadcasting and products of
# any number of operands are one loop nest, with no copy.  Output elements are split over
# the team.  Float sums are accumulated in double.
#
# Matmul-shaped float32 contractions (two operands, one batch/m/n/k label group each) take
# the planner's other route, the batched GEMM of _gemm_fp32; this step is for everything
# else and for small cases.  Baseline flags: the loop is index arithmetic, not vector math.

from libc.stdint cimport int32_t, int64_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps


cdef enum:
    MAX_OPS = 8
    MAX_LABELS = 24
    GRAIN = 65536
    T_FLOAT = 0
    T_DOUBLE = 1
    T_INT32 = 2
    T_INT64 = 3


cdef struct EinsumArgs:
    int n_ops, n_out, n_sum, dtype
    const void *x[MAX_OPS]
    void *y
    Py_ssize_t dims[MAX_LABELS]                 # output labels, then summed labels
    Py_ssize_t strides[MAX_OPS][MAX_LABELS]
    Py_ssize_t n_y, n_c                         # output elements, summed combinations


cdef inline double _prod_d(const EinsumArgs *a, const Py_ssize_t *off) noexcept nogil:
    cdef double p = 1
    cdef int k
    for k in range(a.n_ops):
        if a.dtype == T_FLOAT:
            p *= (<const float *>a.x[k])[off[k]]
        else:
            p *= (<const double *>a.x[k])[off[k]]
    return p


cdef inline int64_t _prod_i(const EinsumArgs *a, const Py_ssize_t *off) noexcept nogil:
    cdef int64_t p = 1
    cdef int k
    for k in range(a.n_ops):
        if a.dtype == T_INT32:
            p *= (<const int32_t *>a.x[k])[off[k]]
        else:
            p *= (<const int64_t *>a.x[k])[off[k]]
    return p


cdef void _einsum_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const EinsumArgs *a = <const EinsumArgs *>p
    cdef Py_ssize_t o0, o1, o, rem, c, idx
    cdef Py_ssize_t base[MAX_OPS]
    cdef Py_ssize_t off[MAX_OPS]
    cdef Py_ssize_t cidx[MAX_LABELS]
    cdef int k, l, n_out = a.n_out, n_sum = a.n_sum
    cdef double fsum
    cdef int64_t isum
    cdef bint is_float = a.dtype == T_FLOAT or a.dtype == T_DOUBLE
    ppl_partition(a.n_y, tid, nthreads, &o0, &o1)
    for o in range(o0, o1):
        # The operands' offsets at output element o (digits of o, last label fastest).
        for k in range(a.n_ops):
            base[k] = 0
        rem = o
        for l in range(n_out - 1, -1, -1):
            idx = rem % a.dims[l]
            rem = rem // a.dims[l]
            for k in range(a.n_ops):
                base[k] += idx * a.strides[k][l]
        for k in range(a.n_ops):
            off[k] = base[k]
        for l in range(n_sum):
            cidx[l] = 0
        fsum = 0
        isum = 0
        for c in range(a.n_c):
            if is_float:
                fsum += _prod_d(a, off)
            else:
                isum += _prod_i(a, off)
            # Next summed combination: odometer over the summed labels, last fastest.
            l = n_sum - 1
            while l >= 0:
                cidx[l] += 1
                for k in range(a.n_ops):
                    off[k] += a.strides[k][n_out + l]
                if cidx[l] < a.dims[n_out + l]:
                    break
                for k in range(a.n_ops):
                    off[k] -= cidx[l] * a.strides[k][n_out + l]
                cidx[l] = 0
                l -= 1
        if a.dtype == T_FLOAT:
            (<float *>a.y)[o] = <float>fsum
        elif a.dtype == T_DOUBLE:
            (<double *>a.y)[o] = fsum
        elif a.dtype == T_INT32:
            (<int32_t *>a.y)[o] = <int32_t>isum
        else:
            (<int64_t *>a.y)[o] = isum


_DTYPES = {np.dtype(np.float32): T_FLOAT, np.dtype(np.float64): T_DOUBLE,
           np.dtype(np.int32): T_INT32, np.dtype(np.int64): T_INT64}


def make_einsum_step(dtype, xs, size_t y, out_dims, sum_dims, strides, keep=None):
    """Step of y[o] = sum_c prod_k x_k[...] (see above).

    dtype: float32, float64, int32 or int64; xs: the operands' addresses; out_dims, sum_dims:
    sizes of the output labels (y's row-major dims) and of the summed labels; strides[k]: the
    element strides of operand k along out_dims + sum_dims."""
    cdef Step step
    cdef EinsumArgs *a
    cdef int k, l
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise ValueError(f"einsum of {dt}: expected float32, float64, int32 or int64")
    dims = list(out_dims) + list(sum_dims)
    if not 1 <= len(xs) <= MAX_OPS or len(dims) > MAX_LABELS or len(strides) != len(xs):
        raise ValueError(f"einsum of {len(xs)} operands over {len(dims)} labels: at most "
                         f"{MAX_OPS} operands and {MAX_LABELS} labels")
    if any(len(s) != len(dims) for s in strides) or any(d < 0 for d in dims):
        raise ValueError("one stride per label and operand, and dims >= 0, are expected")
    if y == 0 or any(x == 0 for x in xs):
        raise ValueError("einsum addresses must be given")
    n_y = int(np.prod(out_dims)) if len(out_dims) else 1
    n_c = int(np.prod(sum_dims)) if len(sum_dims) else 1
    step = new_step(_einsum_step, sizeof(EinsumArgs),
                    n_y > 1 and n_y * n_c * len(xs) > GRAIN, keep)
    a = <EinsumArgs *>step.args
    a.n_ops, a.n_out, a.n_sum, a.dtype = len(xs), len(out_dims), len(sum_dims), _DTYPES[dt]
    a.y = <void *>y
    a.n_y, a.n_c = n_y, n_c
    for k in range(a.n_ops):
        a.x[k] = <const void *><size_t>xs[k]
        for l in range(len(dims)):
            a.strides[k][l] = strides[k][l]
    for l in range(len(dims)):
        a.dims[l] = dims[l]
    return step


def einsum_direct(xs, out_dims, sum_dims, strides, int num_threads=1):
    """Test wrapper: the step on numpy operands (strides in elements of each operand's
    memory, as make_einsum_step takes them); returns y of shape out_dims."""
    dt = xs[0].dtype
    y = np.empty(tuple(out_dims), dt)
    if y.size == 0:
        return y
    addresses = [x.__array_interface__["data"][0] for x in xs]
    run_steps([make_einsum_step(dt, addresses, y.ctypes.data, out_dims, sum_dims, strides,
                                (xs, y))], num_threads)
    return y
