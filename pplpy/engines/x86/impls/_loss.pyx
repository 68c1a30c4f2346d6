# NegativeLogLikelihoodLoss as steps of the run plan (SoftmaxCrossEntropyLoss is a
# LogSoftmax step followed by these).  Float32 scores, int32 or int64 targets.
#
#   make_nll_step         per sample s = (n, d) of x viewed as (N, C, D):
#                             w = weight[t] (1 without weights), t = target[n, d]
#                             loss = -x[n, t, d] * w, or 0 with w = 0 where t == ignore_index
#                         "none" writes loss to y (N, D); "sum"/"mean" add loss and w into
#                         one (sum, weight sum) pair per chunk of samples
#   make_nll_finish_step  y = sum over chunks (sum), or that sum / the weight sum (mean:
#                         0/0 = NaN when every sample is ignored, as the ONNX reference)
#
# The samples are cut into chunks of CHUNK; threads take contiguous runs of chunks and the
# finish step adds the chunks' pairs in order, so the result does not depend on the thread
# count.  Sums are kept in double.
#
# A target read at run time is never trusted: a class outside [0, C) that is not
# ignore_index gives a loss of 0 and records the sample's position in ``bad`` (one slot per
# chunk, -1 when its chunk had none), so the step never reads outside x or weight.  The op
# reads ``bad`` after the step and raises a pplpy error naming the sample.  One module with
# baseline flags: the step gathers one value per sample, there is no vector math to tier.

from libc.stdint cimport int32_t, int64_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps


cdef enum:
    CHUNK = 4096               # samples per chunk
    PARALLEL_MIN = 65536       # samples from which the step runs on every thread
    R_NONE = 0
    R_SUM = 1
    R_MEAN = 2

REDUCTIONS = {"none": R_NONE, "sum": R_SUM, "mean": R_MEAN}


cdef struct NllArgs:
    const float *x             # (N, C, D)
    const void *target         # (N, D)
    int target_is64
    const float *weight        # (C,) or NULL
    float *y                   # (N, D) for none, else unused
    Py_ssize_t N, C, D
    int64_t ignore_index
    int has_ignore
    int reduction
    Py_ssize_t chunks
    double *partial            # (chunks, 2): loss sum, weight sum
    int64_t *bad               # (chunks,): first bad sample of the chunk or -1


cdef void _nll_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const NllArgs *a = <const NllArgs *>p
    cdef Py_ssize_t b, e, c, s, s_end, n, d, total = a.N * a.D
    cdef int64_t t
    cdef float w, loss
    cdef double acc, wacc
    cdef const int64_t *t64 = <const int64_t *>a.target
    cdef const int32_t *t32 = <const int32_t *>a.target
    ppl_partition(a.chunks, tid, nthreads, &b, &e)
    for c in range(b, e):
        a.bad[c] = -1
        acc = 0
        wacc = 0
        s_end = min(total, (c + 1) * <Py_ssize_t>CHUNK)
        for s in range(c * <Py_ssize_t>CHUNK, s_end):
            t = t64[s] if a.target_is64 else t32[s]
            n = s // a.D
            d = s - n * a.D
            if a.has_ignore and t == a.ignore_index:
                w = 0
                loss = 0
            elif t < 0 or t >= a.C:
                if a.bad[c] < 0:
                    a.bad[c] = s
                w = 0
                loss = 0
            else:
                w = a.weight[t] if a.weight != NULL else 1
                loss = -a.x[(n * a.C + t) * a.D + d] * w
            if a.reduction == R_NONE:
                a.y[s] = loss
            else:
                acc += loss
                wacc += w
        if a.reduction != R_NONE:
            a.partial[2 * c] = acc
            a.partial[2 * c + 1] = wacc


cdef struct FinishArgs:
    const double *partial
    Py_ssize_t chunks
    int reduction
    float *y


cdef void _nll_finish_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const FinishArgs *a = <const FinishArgs *>p
    cdef double total = 0, weights = 0
    cdef Py_ssize_t c
    for c in range(a.chunks):
        total += a.partial[2 * c]
        weights += a.partial[2 * c + 1]
    if a.reduction == R_MEAN:
        total = total / weights
    a.y[0] = <float>total


def chunks_of(Py_ssize_t samples):
    """The number of chunks ``samples`` samples are cut into (the sizes of the scratch
    arrays the caller provides: ``bad`` (chunks,) int64, ``partial`` (chunks, 2) float64)."""
    return max(1, (samples + CHUNK - 1) // CHUNK)


def make_nll_step(size_t x, size_t target, bint target_is64, size_t weight, size_t y,
                  Py_ssize_t N, Py_ssize_t C, Py_ssize_t D, int reduction, ignore_index,
                  partial, bad, keep=None):
    """The per-sample step of NegativeLogLikelihoodLoss over x (N, C, D) float32 and target
    (N, D) (int64 when ``target_is64``, else int32); ``weight`` (C,) float32 or 0;
    ``ignore_index`` an int or None.  ``partial`` (chunks, 2) float64 and ``bad`` (chunks,)
    int64 are contiguous scratch arrays (``chunks_of(N * D)``) that must outlive the step;
    ``y`` is written only for reduction "none"."""
    if reduction not in (R_NONE, R_SUM, R_MEAN):
        raise ValueError(f"reduction code {reduction}: expected one of {REDUCTIONS}")
    if N < 0 or C < 0 or D < 0:
        raise ValueError(f"(N, C, D) = {(N, C, D)}: expected sizes >= 0")
    cdef Py_ssize_t samples = N * D
    cdef Py_ssize_t chunks = chunks_of(samples)
    partial = np.asarray(partial)
    bad = np.asarray(bad)
    if partial.dtype != np.float64 or partial.shape != (chunks, 2) \
            or not partial.flags.c_contiguous or not partial.flags.writeable:
        raise ValueError(f"partial must be a writable contiguous float64 ({chunks}, 2) array")
    if bad.dtype != np.int64 or bad.shape != (chunks,) or not bad.flags.c_contiguous \
            or not bad.flags.writeable:
        raise ValueError(f"bad must be a writable contiguous int64 ({chunks},) array")
    if samples > 0 and (target == 0 or (C > 0 and x == 0)):
        raise ValueError("x and target must be valid addresses")
    if reduction == R_NONE and samples > 0 and y == 0:
        raise ValueError("y must be a valid address")
    cdef Step step = new_step(_nll_step, sizeof(NllArgs), samples >= PARALLEL_MIN,
                              (keep, partial, bad))
    cdef NllArgs *a = <NllArgs *>step.args
    a.x = <const float *>x
    a.target = <const void *>target
    a.target_is64 = target_is64
    a.weight = <const float *>weight
    a.y = <float *>y
    a.N = N
    a.C = C
    a.D = D
    a.has_ignore = ignore_index is not None
    a.ignore_index = int(ignore_index) if ignore_index is not None else 0
    a.reduction = reduction
    a.chunks = chunks
    a.partial = <double *><size_t>partial.ctypes.data
    a.bad = <int64_t *><size_t>bad.ctypes.data
    step.label = "nll_loss"
    return step


def make_nll_finish_step(partial, int reduction, size_t y, keep=None):
    """y (a float32 scalar) = the sum of ``partial``'s loss sums (reduction "sum"), or that
    sum over the sum of its weight sums ("mean")."""
    if reduction not in (R_SUM, R_MEAN):
        raise ValueError(f"reduction code {reduction}: the finish step is for sum and mean")
    partial = np.asarray(partial)
    if partial.dtype != np.float64 or partial.ndim != 2 or partial.shape[1] != 2 \
            or not partial.flags.c_contiguous:
        raise ValueError("partial must be a contiguous float64 (chunks, 2) array")
    if y == 0:
        raise ValueError("y must be a valid address")
    cdef Step step = new_step(_nll_finish_step, sizeof(FinishArgs), False, (keep, partial))
    cdef FinishArgs *a = <FinishArgs *>step.args
    a.partial = <const double *><size_t>partial.ctypes.data
    a.chunks = partial.shape[0]
    a.reduction = reduction
    a.y = <float *>y
    step.label = "nll_loss_total"
    return step


def nll_loss(x, target, weight=None, str reduction="mean", ignore_index=None,
             int num_threads=1):
    """Test wrapper: NegativeLogLikelihoodLoss of x (N, C, d...) float32 and target (N, d...)
    int32/int64; returns (loss, positions of the bad targets found, one per chunk at most)."""
    x = np.ascontiguousarray(x, np.float32)
    target = np.ascontiguousarray(target)
    if target.dtype not in (np.int32, np.int64):
        raise ValueError(f"target must be int32 or int64, got {target.dtype}")
    N, C = x.shape[0], x.shape[1]
    D = int(np.prod(x.shape[2:], dtype=np.int64))
    if target.shape != (N,) + x.shape[2:]:
        raise ValueError(f"target shape {target.shape} does not match x {x.shape}")
    if weight is not None:
        weight = np.ascontiguousarray(weight, np.float32)
    code = REDUCTIONS[reduction]
    chunks = chunks_of(N * D)
    partial = np.zeros((chunks, 2), np.float64)
    bad = np.full(chunks, -1, np.int64)
    y = np.zeros(target.shape if code == R_NONE else (), np.float32)
    steps = [make_nll_step(x.ctypes.data, target.ctypes.data, target.dtype == np.int64,
                           weight.ctypes.data if weight is not None else 0, y.ctypes.data,
                           N, C, D, code, ignore_index, partial, bad,
                           keep=(x, target, weight, y))]
    if code != R_NONE:
        steps.append(make_nll_finish_step(partial, code, y.ctypes.data, keep=y))
    run_steps(steps, num_threads)
    return y, bad[bad >= 0]
