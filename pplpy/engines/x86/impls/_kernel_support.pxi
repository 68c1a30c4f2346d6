# Helpers included by the eltwise, norm and reorder families (included, not cimported, so
# each ISA module compiles its own copy with its own flags):
#
# - exp_fp32 / log_fp32: libm's expf and logf are not vectorised by gcc without
#   -ffast-math (glibc declares their SIMD variants only under __FAST_MATH__), so a loop
#   calling them stays scalar.  These are Cephes' expf and logf: plain arithmetic, floorf
#   and bit casts, all of which gcc vectorises.
# - Tasks2D: how a rows x cols piece of work is cut into parallel tasks of about GRAIN
#   elements, grouping short rows and cutting long ones.
#
# Float constants live in typed locals: Cython writes a literal in float arithmetic, even
# 1, as a C double, which promotes the arithmetic to double (measured: 2x slower sigmoid).

from libc.math cimport floorf, INFINITY
from libc.stdint cimport int32_t, uint32_t


cdef enum:
    # Elements per parallel task: below this a thread costs more than it saves.
    GRAIN = 65536


cdef union _FloatBits:
    float f
    uint32_t u


cdef inline float exp_fp32(float x) noexcept nogil:
    """y = exp(x), relative error < 2e-7 on [-87.33, 88.37]; 0 below, inf above."""
    cdef float lo = -87.336544, hi = 88.376259
    cdef float log2e = 1.44269504088896341, half = 0.5, one = 1
    cdef float ln2_hi = 0.693359375, ln2_lo = -2.12194440e-4
    cdef float c5 = 1.9875691500e-4, c4 = 1.3981999507e-3, c3 = 8.3334519073e-3
    cdef float c2 = 4.1665795894e-2, c1 = 1.6666665459e-1, c0 = 5.0000001201e-1
    cdef float xc = x, fn, r, p
    cdef _FloatBits scale
    # Clamp so that 2**n below stays a normal float (n in [-126, 127]).
    if xc < lo:
        xc = lo
    if xc > hi:
        xc = hi
    # x = n*ln2 + r with |r| <= ln2/2; ln2 is split in two so that n*ln2_hi is exact.
    fn = floorf(xc * log2e + half)
    r = xc - fn * ln2_hi - fn * ln2_lo
    p = ((((c5 * r + c4) * r + c3) * r + c2) * r + c1) * r + c0
    p = p * r * r + r + one
    # 2**n from its exponent bits (unsigned, so the garbage n of a NaN is no UB).
    scale.u = <uint32_t>(<int32_t>fn + 127) << 23
    p = p * scale.f
    if x < lo:
        p = 0
    if x > hi:
        p = INFINITY
    return p


cdef inline float log_fp32(float x) noexcept nogil:
    """y = log(x) for normal x > 0, relative error < 2e-7 (no denormal, 0, inf or NaN)."""
    cdef float sqrt_half = 0.707106781186547524, one = 1
    cdef float ln2_hi = 0.693359375, ln2_lo = -2.12194440e-4, minus_half = -0.5
    cdef float c8 = 7.0376836292e-2, c7 = -1.1514610310e-1, c6 = 1.1676998740e-1
    cdef float c5 = -1.2420140846e-1, c4 = 1.4249322787e-1, c3 = -1.6668057665e-1
    cdef float c2 = 2.0000714765e-1, c1 = -2.4999993993e-1, c0 = 3.3333331174e-1
    cdef _FloatBits bits
    cdef float m, e, z, p
    # x = m * 2**e with m in [0.5, 1), read from the float's bits (frexpf does not vectorise).
    bits.f = x
    e = <float>(<int32_t>((bits.u >> 23) & 0xff) - 126)
    bits.u = (bits.u & 0x807fffffU) | 0x3f000000U
    m = bits.f
    # Shift m into [sqrt(1/2), sqrt(2)) so that log(m) is near 0 and the series short.
    if m < sqrt_half:
        e = e - one
        m = m + m - one
    else:
        m = m - one
    z = m * m
    p = (((((((c8 * m + c7) * m + c6) * m + c5) * m + c4) * m + c3) * m + c2) * m + c1) * m + c0
    p = p * m * z + e * ln2_lo + minus_half * z
    return m + p + e * ln2_hi


cdef struct Tasks2D:
    Py_ssize_t rows, cols
    Py_ssize_t rows_per_task    # > 1 only when a row is shorter than the grain
    Py_ssize_t cols_per_task    # < cols only when a row is longer than the grain
    Py_ssize_t col_chunks       # tasks per row band
    Py_ssize_t count            # number of tasks


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline Tasks2D split_2d(Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t grain) noexcept nogil:
    """Cut rows x cols elements into tasks of about ``grain`` elements."""
    cdef Tasks2D t
    t.rows = rows
    t.cols = cols
    if grain < 1:
        grain = 1
    if cols >= grain:
        t.rows_per_task = 1
        t.col_chunks = ceil_div(cols, grain)
        t.cols_per_task = ceil_div(cols, t.col_chunks)   # balanced chunks
    else:
        t.rows_per_task = grain // cols if cols > 0 else rows
        t.cols_per_task = cols
        t.col_chunks = 1
    if rows <= 0 or cols <= 0:
        t.count = 0
    else:
        t.count = ceil_div(rows, t.rows_per_task) * t.col_chunks
    return t


cdef inline void task_range(const Tasks2D* t, Py_ssize_t i, Py_ssize_t* r0, Py_ssize_t* r1,
                            Py_ssize_t* c0, Py_ssize_t* c1) noexcept nogil:
    """The rows [r0, r1) and columns [c0, c1) of task i."""
    cdef Py_ssize_t band = i // t.col_chunks, chunk = i % t.col_chunks
    r0[0] = band * t.rows_per_task
    r1[0] = min(r0[0] + t.rows_per_task, t.rows)
    c0[0] = chunk * t.cols_per_task
    c1[0] = min(c0[0] + t.cols_per_task, t.cols)


cdef inline int threads_for(int num_threads, Py_ssize_t ntasks) noexcept nogil:
    """No more threads than tasks, and at least one."""
    return <int>max(1, min(<Py_ssize_t>num_threads, ntasks))
