# The random generators (RandomUniform, RandomNormal, their *Like forms, Bernoulli) as
# compiled steps of the run plan.
#
# Counter-based: element i gets the bits hash(seed, i) (splitmix64's finaliser over the
# 64-bit counter seed * golden + i), so every element is independent of how the output is
# split over the team and a given seed gives the same tensor for every thread count.
#
#     uniform     y = low + (high - low) * u,                u in [0, 1) from 24/53 bits
#     normal      y = mean + scale * sqrt(-2 log u1) cos(2 pi u2)    (Box-Muller)
#     bernoulli   y = 1 if u < p[i] else 0                   (p the input, float32/64)
#
# Without a seed attribute every run draws new values: a serial step before the fill
# (make_draw_seed_step) takes the next number of a counter the kernel owns (an atomic
# fetch-add, so runtimes sharing the kernel never take the same one) and writes
# hash(base seed, number) into the fill step's seed.
#
# ONNX does not specify the generator: values match no other engine's, only their
# distribution.  Baseline flags (logf/cosf from libm; not a hot path).

from libc.math cimport INFINITY, cos, log, nextafterf, sqrt
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

cdef extern from *:
    """
    static inline unsigned long long ppl_next_draw(unsigned long long *counter) {
        return __atomic_fetch_add(counter, 1ULL, __ATOMIC_RELAXED);
    }
    """
    unsigned long long ppl_next_draw(unsigned long long *counter) noexcept nogil


cdef enum:
    GRAIN = 65536
    UNIFORM = 0
    NORMAL = 1
    BERNOULLI = 2

_OUT = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.bool_): 2,
        np.dtype(np.uint8): 2, np.dtype(np.int8): 2, np.dtype(np.int32): 3,
        np.dtype(np.int64): 4}


cdef struct RandomArgs:
    int kind, out_type
    bint p_double
    void *y
    const void *p               # Bernoulli's probabilities
    Py_ssize_t n
    uint64_t seed
    double a, b                 # low, high - low / mean, scale


cdef inline uint64_t _bits(uint64_t seed, uint64_t i) noexcept nogil:
    cdef uint64_t z = seed * <uint64_t>0x9E3779B97F4A7C15ULL + i * <uint64_t>0xD1B54A32D192ED03ULL
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline double _unit(uint64_t bits) noexcept nogil:
    """A double in [0, 1) from the top 53 bits."""
    return <double>(bits >> 11) * (1.0 / 9007199254740992.0)


cdef void _random_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RandomArgs *a = <const RandomArgs *>p
    cdef Py_ssize_t i0, i1, i
    cdef double v, u1, u2, prob
    cdef float f
    ppl_partition(a.n, tid, nthreads, &i0, &i1)
    for i in range(i0, i1):
        if a.kind == UNIFORM:
            v = a.a + a.b * _unit(_bits(a.seed, i))
        elif a.kind == NORMAL:
            u1 = 1.0 - _unit(_bits(a.seed, 2 * i))          # (0, 1]: log is finite
            u2 = _unit(_bits(a.seed, 2 * i + 1))
            v = a.a + a.b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)
        else:
            prob = (<const double *>a.p)[i] if a.p_double else (<const float *>a.p)[i]
            v = 1.0 if _unit(_bits(a.seed, i)) < prob else 0.0
        if a.out_type == 0:
            f = <float>v
            # Rounding to float32 can land a value just below high on high itself: keep the
            # uniform range half-open, [low, high), as the spec says.
            if a.kind == UNIFORM and a.b > 0 and f >= <float>(a.a + a.b):
                f = nextafterf(<float>(a.a + a.b), -INFINITY)
            (<float *>a.y)[i] = f
        elif a.out_type == 1:
            (<double *>a.y)[i] = v
        elif a.out_type == 2:
            (<uint8_t *>a.y)[i] = <uint8_t>v
        elif a.out_type == 3:
            (<int32_t *>a.y)[i] = <int32_t>v
        else:
            (<int64_t *>a.y)[i] = <int64_t>v


def make_random_step(str kind, out_dtype, size_t y, Py_ssize_t n, uint64_t seed,
                     double a=0, double b=1, size_t p=0, bint p_double=False, keep=None):
    """Step filling n elements of y: kind "uniform" (a = low, b = high - low), "normal"
    (a = mean, b = scale) or "bernoulli" (p: n float32/float64 probabilities)."""
    cdef Step step
    cdef RandomArgs *r
    dt = np.dtype(out_dtype)
    kinds = {"uniform": UNIFORM, "normal": NORMAL, "bernoulli": BERNOULLI}
    if kind not in kinds or dt not in _OUT or y == 0 or n < 0:
        raise ValueError(f"random step {kind!r} of {n} {dt}")
    if kind == "bernoulli" and p == 0:
        raise ValueError("bernoulli needs its probabilities")
    if kind != "bernoulli" and _OUT[dt] > 1:
        raise ValueError(f"{kind} values of type {dt}: expected float32 or float64")
    step = new_step(_random_step, sizeof(RandomArgs), n > GRAIN, keep)
    r = <RandomArgs *>step.args
    r.kind, r.out_type, r.p_double = kinds[kind], _OUT[dt], p_double
    r.y, r.p, r.n, r.seed, r.a, r.b = <void *>y, <const void *>p, n, seed, a, b
    return step


cdef struct DrawArgs:
    RandomArgs *fill
    unsigned long long *counter
    uint64_t base


cdef void _draw_seed_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const DrawArgs *d = <const DrawArgs *>p
    d.fill.seed = _bits(d.base, ppl_next_draw(d.counter))


def make_draw_seed_step(Step fill, size_t counter, uint64_t base):
    """Serial step: the next seed of ``fill`` (a step from make_random_step) is
    hash(base, n), n the next number of the uint64 counter at ``counter``.  Run it before
    ``fill``: each run then draws new values."""
    if fill.fn != _random_step or counter == 0:
        raise ValueError("make_draw_seed_step needs a random step and a counter")
    cdef Step step = new_step(_draw_seed_step, sizeof(DrawArgs), False, fill)
    cdef DrawArgs *d = <DrawArgs *>step.args
    d.fill = <RandomArgs *>fill.args
    d.counter = <unsigned long long *>counter
    d.base = base
    return step


def random_fill(str kind, shape, dtype, uint64_t seed, double a=0, double b=1, p=None,
                int num_threads=1):
    """Test wrapper: a fresh array from make_random_step."""
    y = np.empty(tuple(shape), dtype)
    if p is not None:
        p = np.ascontiguousarray(p)
    if y.size:
        run_steps([make_random_step(kind, y.dtype, y.ctypes.data, y.size, seed, a, b,
                                    0 if p is None else p.ctypes.data,
                                    p is not None and p.dtype == np.float64, (y, p))],
                  num_threads)
    return y
