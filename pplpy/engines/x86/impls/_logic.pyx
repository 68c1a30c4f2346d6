# Broadcasting comparisons, logic, bitwise logic, Where, BitShift, Mod, Min/Max and integer Pow over any
# pplpy element type (float32/64, int8-64, uint8-64, bool), as passes of _nary.pxi.
#
# Baseline code (no ISA suffix): these ops move bytes or compare, and the float32 math that
# wants wide vectors (Pow, Min, Max, Mean, PRelu) lives in _binmath_fp32_<isa>.pyx.
#
# A pass's op code is (family op) * 32 + (ONNX element type number); the row function of the
# family switches once per row on the element type and calls a fused inline body, which
# switches on the op outside its loops: one loop per (type, op, stride pattern), so that the
# contiguous and scalar-broadcast loops vectorise.
#
#     make_pass(op, elem_type, [address], [length], out_shape, [strides]) -> pass
#     make_step(y, y_itemsize, size, [pass, ...], keep) -> Step
#
# Semantics follow onnx.reference (numpy): comparisons and Min/Max are C's on the element
# type (NaN compares false; Min/Max propagate NaN), Mod with fmod=0 takes the divisor's sign
# (np.mod) and with fmod=1 the dividend's (np.fmod); integer x mod 0 is 0; BitShift by a count
# outside [0, bits) gives 0 (right shift of a negative: -1); integer Pow is exact by
# squaring (negative exponents: 1 / x**-e truncated), with a float exponent through libm's pow.

from libc.math cimport fmod, fmodf, pow, copysign, copysignf, isinf, isnan, floor
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

import numpy as np

from pplpy.runtime.step import run_steps

include "_nary.pxi"

include "_onnx_types.pxi"

cdef enum:
    # Comparison family (output bool).
    EQ = 0
    LT = 1
    LE = 2
    GT = 3
    GE = 4
    # Logic family (bool inputs and output).
    AND = 5
    OR = 6
    XOR = 7
    NOT = 8
    # Where (inputs: bool, T, T by element size).
    WHERE = 9
    # Arithmetic family (output T).
    MIN = 10
    MAX = 11
    MOD = 12
    FMOD = 13
    SHL = 14
    SHR = 15
    POW = 16        # T integer base, float64 exponent
    IS_NAN = 17     # unary, float in, bool out
    IS_POSINF = 18
    IS_NEGINF = 19
    IS_INF = 20
    COPY = 21       # y = x (Max of one input)
    # Bitwise family (integer inputs and output of one type).
    BIT_AND = 22
    BIT_OR = 23
    BIT_XOR = 24
    BIT_NOT = 25
    LAST_OP = 25

# Op codes for Python callers.
OPS = {"EQ": EQ, "LT": LT, "LE": LE, "GT": GT, "GE": GE, "AND": AND, "OR": OR, "XOR": XOR,
       "NOT": NOT, "WHERE": WHERE, "MIN": MIN, "MAX": MAX, "MOD": MOD, "FMOD": FMOD,
       "SHL": SHL, "SHR": SHR, "POW": POW, "IS_NAN": IS_NAN, "IS_POSINF": IS_POSINF,
       "IS_NEGINF": IS_NEGINF, "IS_INF": IS_INF, "COPY": COPY, "BIT_AND": BIT_AND,
       "BIT_OR": BIT_OR, "BIT_XOR": BIT_XOR, "BIT_NOT": BIT_NOT}

_NUMERIC = (T_FLOAT, T_DOUBLE, T_INT8, T_INT16, T_INT32, T_INT64, T_UINT8, T_UINT16, T_UINT32,
            T_UINT64)
_INTS = (T_INT8, T_INT16, T_INT32, T_INT64, T_UINT8, T_UINT16, T_UINT32, T_UINT64)
# Element types each op accepts, by ONNX type number.
TYPES = {EQ: _NUMERIC + (T_BOOL,), LT: _NUMERIC, LE: _NUMERIC, GT: _NUMERIC, GE: _NUMERIC,
         AND: (T_BOOL,), OR: (T_BOOL,), XOR: (T_BOOL,), NOT: (T_BOOL,),
         WHERE: (T_UINT8, T_UINT16, T_UINT32, T_UINT64),
         MIN: _NUMERIC, MAX: _NUMERIC, MOD: _NUMERIC, FMOD: _NUMERIC, SHL: _INTS, SHR: _INTS,
         POW: (T_INT32, T_INT64), IS_NAN: (T_FLOAT, T_DOUBLE), IS_POSINF: (T_FLOAT, T_DOUBLE),
         IS_NEGINF: (T_FLOAT, T_DOUBLE), IS_INF: (T_FLOAT, T_DOUBLE),
         COPY: (T_UINT8, T_UINT16, T_UINT32, T_UINT64),
         BIT_AND: _INTS, BIT_OR: _INTS, BIT_XOR: _INTS, BIT_NOT: _INTS}
_ARITY = {NOT: 1, IS_NAN: 1, IS_POSINF: 1, IS_NEGINF: 1, IS_INF: 1, COPY: 1, WHERE: 3,
          BIT_NOT: 1}

ctypedef fused num_t:
    float
    double
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused word_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused int_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused sint_t:
    int32_t
    int64_t

ctypedef fused real_t:
    float
    double


cdef inline int _word_size(int t) noexcept nogil:
    """Bytes per element of the integer or bool ONNX type ``t``."""
    if t == T_INT8 or t == T_UINT8 or t == T_BOOL:
        return 1
    if t == T_INT16 or t == T_UINT16:
        return 2
    if t == T_INT32 or t == T_UINT32:
        return 4
    return 8


# ---------------------------------------------------------------------------------------
# Comparisons: y = a op b as bool.  An inline body per (type, op) with the op a constant
# after inlining: the branch on it leaves the loops.

cdef inline uint8_t _cmp(const int op, num_t a, num_t b) noexcept nogil:
    if op == EQ:
        return a == b
    if op == LT:
        return a < b
    if op == LE:
        return a <= b
    if op == GT:
        return a > b
    return a >= b


cdef inline void _cmp_loops(const int op, const num_t *a, Py_ssize_t sa, const num_t *b,
                            Py_ssize_t sb, uint8_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef num_t av, bv
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = _cmp(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        bv = b[0]
        for i in range(n):
            y[i] = _cmp(op, a[i], bv)
    elif sa == 0 and sb == 1:
        av = a[0]
        for i in range(n):
            y[i] = _cmp(op, av, b[i])
    else:
        for i in range(n):
            y[i] = _cmp(op, a[i * sa], b[i * sb])


cdef inline void _cmp_typed(int op, const num_t *a, Py_ssize_t sa, const num_t *b,
                            Py_ssize_t sb, uint8_t *y, Py_ssize_t n) noexcept nogil:
    if op == EQ:
        _cmp_loops(EQ, a, sa, b, sb, y, n)
    elif op == LT:
        _cmp_loops(LT, a, sa, b, sb, y, n)
    elif op == LE:
        _cmp_loops(LE, a, sa, b, sb, y, n)
    elif op == GT:
        _cmp_loops(GT, a, sa, b, sb, y, n)
    else:
        _cmp_loops(GE, a, sa, b, sb, y, n)


cdef void _cmp_row(int code, const char **s, const Py_ssize_t *st, char *y,
                   Py_ssize_t n) noexcept nogil:
    cdef int op = code >> 5, t = code & 31
    cdef uint8_t *o = <uint8_t *>y
    if t == T_FLOAT:
        _cmp_typed(op, <const float *>s[0], st[0], <const float *>s[1], st[1], o, n)
    elif t == T_DOUBLE:
        _cmp_typed(op, <const double *>s[0], st[0], <const double *>s[1], st[1], o, n)
    elif t == T_INT8:
        _cmp_typed(op, <const int8_t *>s[0], st[0], <const int8_t *>s[1], st[1], o, n)
    elif t == T_INT16:
        _cmp_typed(op, <const int16_t *>s[0], st[0], <const int16_t *>s[1], st[1], o, n)
    elif t == T_INT32:
        _cmp_typed(op, <const int32_t *>s[0], st[0], <const int32_t *>s[1], st[1], o, n)
    elif t == T_INT64:
        _cmp_typed(op, <const int64_t *>s[0], st[0], <const int64_t *>s[1], st[1], o, n)
    elif t == T_UINT8 or t == T_BOOL:
        _cmp_typed(op, <const uint8_t *>s[0], st[0], <const uint8_t *>s[1], st[1], o, n)
    elif t == T_UINT16:
        _cmp_typed(op, <const uint16_t *>s[0], st[0], <const uint16_t *>s[1], st[1], o, n)
    elif t == T_UINT32:
        _cmp_typed(op, <const uint32_t *>s[0], st[0], <const uint32_t *>s[1], st[1], o, n)
    else:
        _cmp_typed(op, <const uint64_t *>s[0], st[0], <const uint64_t *>s[1], st[1], o, n)


# ---------------------------------------------------------------------------------------
# Logic on bool (bytes 0 / 1) and bitwise logic on integers: both are bit operations on
# words of the element's size (signed integers as their unsigned words).  Not is y = x ^ m
# with m = 1 for bool and all ones for an integer, so it shares the XOR loops.

cdef inline word_t _logic(const int op, word_t a, word_t b) noexcept nogil:
    if op == AND:
        return a & b
    if op == OR:
        return a | b
    return a ^ b


cdef inline void _logic_loops(const int op, const word_t *a, Py_ssize_t sa, const word_t *b,
                              Py_ssize_t sb, word_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef word_t av, bv
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = _logic(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        bv = b[0]
        for i in range(n):
            y[i] = _logic(op, a[i], bv)
    elif sa == 0 and sb == 1:
        av = a[0]
        for i in range(n):
            y[i] = _logic(op, av, b[i])
    else:
        for i in range(n):
            y[i] = _logic(op, a[i * sa], b[i * sb])


cdef inline void _logic_typed(int op, const word_t *a, Py_ssize_t sa, const word_t *b,
                              Py_ssize_t sb, word_t *y, Py_ssize_t n) noexcept nogil:
    cdef word_t mask
    if op == AND or op == BIT_AND:
        _logic_loops(AND, a, sa, b, sb, y, n)
    elif op == OR or op == BIT_OR:
        _logic_loops(OR, a, sa, b, sb, y, n)
    elif op == XOR or op == BIT_XOR:
        _logic_loops(XOR, a, sa, b, sb, y, n)
    else:
        mask = 1 if op == NOT else ~(<word_t>0)
        _logic_loops(XOR, a, sa, &mask, 0, y, n)


cdef void _logic_row(int code, const char **s, const Py_ssize_t *st, char *y,
                     Py_ssize_t n) noexcept nogil:
    cdef int op = code >> 5, size = _word_size(code & 31)
    cdef const char *b = NULL   # unary Not reads no second input
    cdef Py_ssize_t sb = 0
    if op != NOT and op != BIT_NOT:
        b = s[1]
        sb = st[1]
    if size == 1:
        _logic_typed(op, <const uint8_t *>s[0], st[0], <const uint8_t *>b, sb,
                     <uint8_t *>y, n)
    elif size == 2:
        _logic_typed(op, <const uint16_t *>s[0], st[0], <const uint16_t *>b, sb,
                     <uint16_t *>y, n)
    elif size == 4:
        _logic_typed(op, <const uint32_t *>s[0], st[0], <const uint32_t *>b, sb,
                     <uint32_t *>y, n)
    else:
        _logic_typed(op, <const uint64_t *>s[0], st[0], <const uint64_t *>b, sb,
                     <uint64_t *>y, n)


# ---------------------------------------------------------------------------------------
# Where: y = x if cond else z, on element words of 1, 2, 4 or 8 bytes; and COPY.

cdef inline word_t _select(uint8_t c, word_t x, word_t z) noexcept nogil:
    # A bit mask instead of a branch: gcc vectorises this across the mixed element sizes.
    cdef word_t m = <word_t>0 - <word_t>(c != 0)
    return (x & m) | (z & ~m)


cdef inline void _where_typed(const uint8_t *c, Py_ssize_t sc, const word_t *x, Py_ssize_t sx,
                              const word_t *z, Py_ssize_t sz, word_t *y,
                              Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef word_t xv, zv
    if sc == 1 and sx == 1 and sz == 1:
        for i in range(n):
            y[i] = _select(c[i], x[i], z[i])
    elif sc == 1 and sx == 0 and sz == 1:
        xv = x[0]
        for i in range(n):
            y[i] = _select(c[i], xv, z[i])
    elif sc == 1 and sx == 1 and sz == 0:
        zv = z[0]
        for i in range(n):
            y[i] = _select(c[i], x[i], zv)
    elif sc == 1 and sx == 0 and sz == 0:
        xv = x[0]
        zv = z[0]
        for i in range(n):
            y[i] = _select(c[i], xv, zv)
    else:
        for i in range(n):
            y[i] = _select(c[i * sc], x[i * sx], z[i * sz])


cdef inline void _copy_typed(const word_t *x, Py_ssize_t sx, word_t *y,
                             Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = x[i * sx]


cdef void _where_row(int code, const char **s, const Py_ssize_t *st, char *y,
                     Py_ssize_t n) noexcept nogil:
    cdef int t = code & 31
    cdef const uint8_t *c = <const uint8_t *>s[0]
    if t == T_UINT8:
        _where_typed(c, st[0], <const uint8_t *>s[1], st[1], <const uint8_t *>s[2], st[2],
                     <uint8_t *>y, n)
    elif t == T_UINT16:
        _where_typed(c, st[0], <const uint16_t *>s[1], st[1], <const uint16_t *>s[2], st[2],
                     <uint16_t *>y, n)
    elif t == T_UINT32:
        _where_typed(c, st[0], <const uint32_t *>s[1], st[1], <const uint32_t *>s[2], st[2],
                     <uint32_t *>y, n)
    else:
        _where_typed(c, st[0], <const uint64_t *>s[1], st[1], <const uint64_t *>s[2], st[2],
                     <uint64_t *>y, n)


cdef void _copy_row(int code, const char **s, const Py_ssize_t *st, char *y,
                    Py_ssize_t n) noexcept nogil:
    cdef int t = code & 31
    if t == T_UINT8:
        _copy_typed(<const uint8_t *>s[0], st[0], <uint8_t *>y, n)
    elif t == T_UINT16:
        _copy_typed(<const uint16_t *>s[0], st[0], <uint16_t *>y, n)
    elif t == T_UINT32:
        _copy_typed(<const uint32_t *>s[0], st[0], <uint32_t *>y, n)
    else:
        _copy_typed(<const uint64_t *>s[0], st[0], <uint64_t *>y, n)


# ---------------------------------------------------------------------------------------
# Arithmetic with the output type of the inputs: Min, Max, Mod, BitShift.

cdef inline num_t _arith(const int op, num_t a, num_t b) noexcept nogil:
    cdef num_t r
    if op == MIN:
        if num_t is float or num_t is double:
            return a if ((a < b) | (a != a)) else b    # NaN propagates, as np.minimum
        return a if a < b else b
    if op == MAX:
        if num_t is float or num_t is double:
            return a if ((a > b) | (a != a)) else b
        return a if a > b else b
    if op == FMOD:
        if num_t is float:
            return fmodf(a, b)
        elif num_t is double:
            return fmod(a, b)
        else:
            if b == 0:
                return 0
            if num_t is int8_t or num_t is int16_t or num_t is int32_t or num_t is int64_t:
                if b == -1:
                    return 0    # MIN % -1 traps in C
            return a % b
    if op == MOD:
        if num_t is float:
            r = fmodf(a, b)
            if r != 0 and ((r < 0) != (b < 0)):
                r = r + b
            elif r == 0:
                r = copysignf(0, b)
            return r
        elif num_t is double:
            r = fmod(a, b)
            if r != 0 and ((r < 0) != (b < 0)):
                r = r + b
            elif r == 0:
                r = copysign(0, b)
            return r
        else:
            if b == 0:
                return 0
            if num_t is int8_t or num_t is int16_t or num_t is int32_t or num_t is int64_t:
                if b == -1:
                    return 0
                r = a % b
                if r != 0 and ((r < 0) != (b < 0)):
                    r = r + b
                return r
            else:
                return a % b
    return a


cdef inline num_t _shift(const int op, num_t a, num_t b) noexcept nogil:
    cdef int bits = sizeof(num_t) * 8
    if num_t is float or num_t is double:
        return 0
    else:
        if b < 0 or b >= bits:
            if op == SHR and a < 0:
                return <num_t>-1
            return 0
        if op == SHR:
            return a >> b
        # Left shift through unsigned: a negative value's shift is defined there.
        if num_t is int8_t or num_t is uint8_t:
            return <num_t>(<uint8_t>a << b)
        elif num_t is int16_t or num_t is uint16_t:
            return <num_t>(<uint16_t>a << b)
        elif num_t is int32_t or num_t is uint32_t:
            return <num_t>(<uint32_t>a << b)
        else:
            return <num_t>(<uint64_t>a << b)


cdef inline void _arith_loops(const int op, const num_t *a, Py_ssize_t sa, const num_t *b,
                              Py_ssize_t sb, num_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef num_t av, bv
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = _arith(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        bv = b[0]
        for i in range(n):
            y[i] = _arith(op, a[i], bv)
    elif sa == 0 and sb == 1:
        av = a[0]
        for i in range(n):
            y[i] = _arith(op, av, b[i])
    else:
        for i in range(n):
            y[i] = _arith(op, a[i * sa], b[i * sb])


cdef inline void _shift_loops(const int op, const num_t *a, Py_ssize_t sa, const num_t *b,
                              Py_ssize_t sb, num_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef num_t bv
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = _shift(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        bv = b[0]
        for i in range(n):
            y[i] = _shift(op, a[i], bv)
    else:
        for i in range(n):
            y[i] = _shift(op, a[i * sa], b[i * sb])


cdef inline void _arith_typed(int op, const num_t *a, Py_ssize_t sa, const num_t *b,
                              Py_ssize_t sb, num_t *y, Py_ssize_t n) noexcept nogil:
    if op == MIN:
        _arith_loops(MIN, a, sa, b, sb, y, n)
    elif op == MAX:
        _arith_loops(MAX, a, sa, b, sb, y, n)
    elif op == MOD:
        _arith_loops(MOD, a, sa, b, sb, y, n)
    elif op == FMOD:
        _arith_loops(FMOD, a, sa, b, sb, y, n)
    elif op == SHL:
        _shift_loops(SHL, a, sa, b, sb, y, n)
    else:
        _shift_loops(SHR, a, sa, b, sb, y, n)


cdef void _arith_row(int code, const char **s, const Py_ssize_t *st, char *y,
                     Py_ssize_t n) noexcept nogil:
    cdef int op = code >> 5, t = code & 31
    if t == T_FLOAT:
        _arith_typed(op, <const float *>s[0], st[0], <const float *>s[1], st[1],
                     <float *>y, n)
    elif t == T_DOUBLE:
        _arith_typed(op, <const double *>s[0], st[0], <const double *>s[1], st[1],
                     <double *>y, n)
    elif t == T_INT8:
        _arith_typed(op, <const int8_t *>s[0], st[0], <const int8_t *>s[1], st[1],
                     <int8_t *>y, n)
    elif t == T_INT16:
        _arith_typed(op, <const int16_t *>s[0], st[0], <const int16_t *>s[1], st[1],
                     <int16_t *>y, n)
    elif t == T_INT32:
        _arith_typed(op, <const int32_t *>s[0], st[0], <const int32_t *>s[1], st[1],
                     <int32_t *>y, n)
    elif t == T_INT64:
        _arith_typed(op, <const int64_t *>s[0], st[0], <const int64_t *>s[1], st[1],
                     <int64_t *>y, n)
    elif t == T_UINT8:
        _arith_typed(op, <const uint8_t *>s[0], st[0], <const uint8_t *>s[1], st[1],
                     <uint8_t *>y, n)
    elif t == T_UINT16:
        _arith_typed(op, <const uint16_t *>s[0], st[0], <const uint16_t *>s[1], st[1],
                     <uint16_t *>y, n)
    elif t == T_UINT32:
        _arith_typed(op, <const uint32_t *>s[0], st[0], <const uint32_t *>s[1], st[1],
                     <uint32_t *>y, n)
    else:
        _arith_typed(op, <const uint64_t *>s[0], st[0], <const uint64_t *>s[1], st[1],
                     <uint64_t *>y, n)


# ---------------------------------------------------------------------------------------
# Integer Pow: base of int32/int64, exponent as float64 (the kernel casts it first).

cdef inline sint_t _ipow(sint_t a, double e) noexcept nogil:
    cdef sint_t r = 1, base = a
    cdef int64_t k
    cdef double f
    if e != e or isinf(e):
        return 0
    if floor(e) != e or e > 9.2e18 or e < -9.2e18:
        f = pow(<double>a, e)
        if f != f or isinf(f) or f >= 9.2e18 or f <= -9.2e18:
            return 0
        return <sint_t>f
    k = <int64_t>e
    if k < 0:
        if a == 1:
            return 1
        if a == -1:
            return -1 if (k & 1) else 1
        return 0
    while k > 0:    # by squaring, wrapping as numpy's integer power does
        if k & 1:
            r = <sint_t>(<uint64_t>r * <uint64_t>base)
        base = <sint_t>(<uint64_t>base * <uint64_t>base)
        k >>= 1
    return r


cdef inline void _ipow_typed(const sint_t *a, Py_ssize_t sa, const double *b, Py_ssize_t sb,
                             sint_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = _ipow(a[i * sa], b[i * sb])


cdef void _pow_row(int code, const char **s, const Py_ssize_t *st, char *y,
                   Py_ssize_t n) noexcept nogil:
    if (code & 31) == T_INT32:
        _ipow_typed(<const int32_t *>s[0], st[0], <const double *>s[1], st[1], <int32_t *>y, n)
    else:
        _ipow_typed(<const int64_t *>s[0], st[0], <const double *>s[1], st[1], <int64_t *>y, n)


# ---------------------------------------------------------------------------------------
# IsNaN / IsInf on float32 / float64.

cdef inline uint8_t _fclass(const int op, real_t x) noexcept nogil:
    cdef real_t inf = <real_t>1e308 * <real_t>1e308
    if op == IS_NAN:
        return x != x
    if op == IS_POSINF:
        return x == inf
    if op == IS_NEGINF:
        return x == -inf
    return (x == inf) | (x == -inf)


cdef inline void _fclass_loops(const int op, const real_t *x, Py_ssize_t sx, uint8_t *y,
                               Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if sx == 1:
        for i in range(n):
            y[i] = _fclass(op, x[i])
    else:
        for i in range(n):
            y[i] = _fclass(op, x[i * sx])


cdef inline void _fclass_typed(int op, const real_t *x, Py_ssize_t sx, uint8_t *y,
                               Py_ssize_t n) noexcept nogil:
    if op == IS_NAN:
        _fclass_loops(IS_NAN, x, sx, y, n)
    elif op == IS_POSINF:
        _fclass_loops(IS_POSINF, x, sx, y, n)
    elif op == IS_NEGINF:
        _fclass_loops(IS_NEGINF, x, sx, y, n)
    else:
        _fclass_loops(IS_INF, x, sx, y, n)


cdef void _fclass_row(int code, const char **s, const Py_ssize_t *st, char *y,
                      Py_ssize_t n) noexcept nogil:
    cdef int op = code >> 5
    if (code & 31) == T_FLOAT:
        _fclass_typed(op, <const float *>s[0], st[0], <uint8_t *>y, n)
    else:
        _fclass_typed(op, <const double *>s[0], st[0], <uint8_t *>y, n)


# ---------------------------------------------------------------------------------------
# Python-visible builders.

cdef nary_row_t _row_of(int op):
    if op >= BIT_AND:
        return _logic_row
    if op <= GE:
        return _cmp_row
    if op <= NOT:
        return _logic_row
    if op == WHERE:
        return _where_row
    if op == POW:
        return _pow_row
    if op == COPY:
        return _copy_row
    if op >= IS_NAN:
        return _fclass_row
    return _arith_row


_SIZES = {T_FLOAT: 4, T_DOUBLE: 8, T_INT8: 1, T_INT16: 2, T_INT32: 4, T_INT64: 8, T_UINT8: 1,
          T_UINT16: 2, T_UINT32: 4, T_UINT64: 8, T_BOOL: 1}


def make_pass(int op, int elem_type, addresses, lengths, out_shape, strides):
    """One pass of ``op`` (a value of OPS) on inputs of ONNX element type ``elem_type`` (for
    WHERE and COPY: the unsigned type of the value's size; WHERE's input 0 is bool, POW's
    input 1 float64), numpy broadcasting through element strides over ``out_shape``."""
    if op < 0 or op > LAST_OP:
        raise ValueError(f"op {op}: expected a value of OPS")
    if elem_type not in TYPES[op]:
        raise ValueError(f"op {op}: element type {elem_type} is not one of {TYPES[op]}")
    nin = _ARITY.get(op, 2)
    if len(addresses) != nin:
        raise ValueError(f"op {op} takes {nin} inputs, got {len(addresses)}")
    size = _SIZES[elem_type]
    itemsizes = [size] * nin
    if op == WHERE:
        itemsizes[0] = 1
    elif op == POW:
        itemsizes[1] = 8
    return nary_pass(_row_of(op), op * 32 + elem_type, addresses, lengths, itemsizes,
                     [int(d) for d in out_shape], [[int(s) for s in st] for st in strides])


def make_step(size_t y, Py_ssize_t y_itemsize, Py_ssize_t size, passes, keep=None):
    """A step running ``passes`` in order over the contiguous output y of ``size`` elements
    of ``y_itemsize`` bytes."""
    return nary_step(y, y_itemsize, size, passes, keep)


def contiguous_strides(shape):
    strides, step = [], 1
    for dim in reversed(tuple(shape)):
        strides.append(step)
        step *= dim
    return strides[::-1]


def broadcast(int op, int elem_type, inputs, y, int num_threads=1):
    """Test wrapper: y = op(inputs) with numpy broadcasting; ``inputs`` C-contiguous arrays
    already of the types make_pass wants, y a C-contiguous output of the broadcast shape."""
    out = y.shape
    strides = []
    for x in inputs:
        full = (1,) * (len(out) - x.ndim) + x.shape
        cs = contiguous_strides(full)
        strides.append([0 if d == 1 else s for d, s in zip(full, cs)])
    p = make_pass(op, elem_type, [x.ctypes.data if x.size else 1 for x in inputs],
                  [x.size for x in inputs], out, strides)
    if y.size == 0:
        return
    run_steps([make_step(y.ctypes.data, y.itemsize, y.size, [p], keep=inputs)], num_threads)
