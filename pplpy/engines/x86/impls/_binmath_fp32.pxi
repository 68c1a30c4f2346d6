# float32 binary math with numpy broadcasting: Pow, Min, Max, PRelu, and the Add and Div
# that make Mean, as passes of _nary.pxi (one to three inputs, one contiguous output).
#
# Written once and included by _binmath_fp32_{avx512,fma,sse}.pyx, each compiled with its
# tier's flags.  One loop per (op, stride pattern: both contiguous, one a broadcast scalar,
# anything), each free of libm calls (exp/log are _kernel_support.pxi's vectorisable ones)
# and of branches gcc cannot turn into selects, so every common loop vectorises.
#
# N16CX needs no code of its own: the kernel sees a blocked tensor as its physical
# (N, C/16, S, 16) array, a per-channel operand as a zero-padded (C/16, 16) vector, and every
# op here maps padding lanes (0 op 0) to 0.
#
#     make_pass(op, [address], [length], out_shape, [strides]) -> pass
#     make_step(y, size, [pass, ...], keep) -> Step
#
#     pow(a, b)   exp(b * log|a|), the sign of a for odd integer b, NaN for a < 0 and
#                 fractional b, 1 for b == 0 or a == 1; exact x*x for b == 2.  Relative error
#                 about 2e-7 * (1 + |b log|a||).  Denormal bases are read as tiny normals.
#                 A broadcast exponent of 2, 1, 0.5 or -1 takes its own exact loop.
#     min / max   NaN propagates (np.minimum / np.maximum)
#     prelu       x if x > 0 else x * slope

from libc.math cimport floorf, fabsf, copysignf, sqrtf, NAN, INFINITY

from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"
include "_nary.pxi"

cdef enum:
    OP_POW = 0
    OP_MIN = 1
    OP_MAX = 2
    OP_PRELU = 3
    OP_ADD = 4
    OP_DIV = 5
    OP_LAST = 5

# Op codes for Python callers.
POW = OP_POW
MIN = OP_MIN
MAX = OP_MAX
PRELU = OP_PRELU
ADD = OP_ADD
DIV = OP_DIV


cdef inline float _powf(float a, float b) noexcept nogil:
    # Every case is a select on the general result, with no short-circuit: the loop
    # stays one straight-line body that gcc vectorises.
    cdef float zero = 0, one = 1, half = 0.5, two = 2, nan = NAN, inf = INFINITY
    cdef float ax = fabsf(a), r, bh = b * half
    cdef bint is_int = floorf(b) == b
    cdef bint odd = is_int & (floorf(bh) != bh)
    cdef bint negative = copysignf(one, a) < zero   # -0 to an odd power keeps its sign
    r = exp_fp32(b * log_fp32(ax))
    r = (zero if b > zero else inf) if ax == zero else r
    r = (inf if b > zero else zero) if ax == inf else r
    r = -r if (negative & odd) else r
    r = nan if ((a < zero) & (not is_int) & (ax != inf)) else r
    r = a * a if b == two else r
    r = nan if ((a != a) | (b != b)) else r
    r = one if ((a == -one) & (fabsf(b) == inf)) else r
    r = one if ((b == zero) | (a == one)) else r
    return r


cdef inline float _op(const int op, float a, float b) noexcept nogil:
    cdef float zero = 0
    if op == OP_POW:
        return _powf(a, b)
    if op == OP_MIN:
        return a if ((a < b) | (a != a)) else b
    if op == OP_MAX:
        return a if ((a > b) | (a != a)) else b
    if op == OP_PRELU:
        return a if a > zero else a * b
    if op == OP_ADD:
        return a + b
    return a / b


cdef inline void _loops(const int op, const float *a, Py_ssize_t sa, const float *b,
                        Py_ssize_t sb, float *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float av, bv
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = _op(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        bv = b[0]
        for i in range(n):
            y[i] = _op(op, a[i], bv)
    elif sa == 0 and sb == 1:
        av = a[0]
        for i in range(n):
            y[i] = _op(op, av, b[i])
    else:
        for i in range(n):
            y[i] = _op(op, a[i * sa], b[i * sb])


cdef inline float _pow_sqrt(float a) noexcept nogil:
    # pow(a, 0.5): sqrt, but pow(-0, 0.5) = +0 and pow(-inf, 0.5) = +inf
    cdef float zero = 0, inf = INFINITY
    cdef float r = sqrtf(a)
    r = inf if a == -inf else r
    return zero if a == zero else r


cdef bint _pow_by_scalar(const float *a, Py_ssize_t sa, float e, float *y,
                         Py_ssize_t n) noexcept nogil:
    """y = a ** e for the exponents exporters write (2 in a variance, 0.5, 1, -1) with the
    one instruction they need, exactly (pow's exp(e log|a|) costs 1.6 ns a float and is off
    by an ulp or two); False for any other e."""
    cdef Py_ssize_t i
    cdef float one = 1
    if e == 2:
        for i in range(n):
            y[i] = a[i * sa] * a[i * sa]
    elif e == 1:
        for i in range(n):
            y[i] = a[i * sa]
    elif e == 0.5:
        for i in range(n):
            y[i] = _pow_sqrt(a[i * sa])
    elif e == -1:
        for i in range(n):
            y[i] = one / a[i * sa]
    else:
        return False
    return True


cdef void _row(int op, const char **s, const Py_ssize_t *st, char *y,
               Py_ssize_t n) noexcept nogil:
    cdef const float *a = <const float *>s[0]
    cdef const float *b = <const float *>s[1]
    cdef float *o = <float *>y
    if op == OP_POW:
        if st[1] == 0 and _pow_by_scalar(a, st[0], b[0], o, n):
            return
        _loops(OP_POW, a, st[0], b, st[1], o, n)
    elif op == OP_MIN:
        _loops(OP_MIN, a, st[0], b, st[1], o, n)
    elif op == OP_MAX:
        _loops(OP_MAX, a, st[0], b, st[1], o, n)
    elif op == OP_PRELU:
        _loops(OP_PRELU, a, st[0], b, st[1], o, n)
    elif op == OP_ADD:
        _loops(OP_ADD, a, st[0], b, st[1], o, n)
    else:
        _loops(OP_DIV, a, st[0], b, st[1], o, n)


def make_pass(int op, addresses, lengths, out_shape, strides):
    """One pass y = a op b (POW, MIN, MAX, PRELU, ADD, DIV) on float32, numpy broadcasting
    through element strides over ``out_shape`` (0 = broadcast dim)."""
    if op < 0 or op > OP_LAST:
        raise ValueError(f"op {op}: expected POW, MIN, MAX, PRELU, ADD or DIV (0 to 5)")
    if len(addresses) != 2:
        raise ValueError(f"op {op} takes 2 inputs, got {len(addresses)}")
    return nary_pass(_row, op, addresses, lengths, [4, 4], [int(d) for d in out_shape],
                     [[int(s) for s in st] for st in strides])


def make_step(size_t y, Py_ssize_t size, passes, keep=None):
    """A step running ``passes`` in order over the contiguous float32 output y of ``size``
    elements; a pass after the first may read y where it writes it (Mean's running sum)."""
    return nary_step(y, 4, size, passes, keep)


def broadcast(int op, a, b, y, int num_threads=1):
    """Test wrapper: y = a op b with numpy broadcasting on C-contiguous float32 arrays."""
    out = y.shape
    strides = []
    for x in (a, b):
        full = (1,) * (len(out) - x.ndim) + x.shape
        st, step = [], 1
        for d in reversed(full):
            st.append(0 if d == 1 else step)
            step *= d
        strides.append(st[::-1])
    p = make_pass(op, [a.ctypes.data if a.size else 1, b.ctypes.data if b.size else 1],
                  [a.size, b.size], out, strides)
    if y.size == 0:
        return
    run_steps([make_step(y.ctypes.data, y.size, [p], keep=(a, b))], num_threads)
