# Element-wise kernels as steps of the compiled run plan: activations on flat float32
# buffers, and broadcasting binary arithmetic (Add, Mul, Sub, Div) for float32 and every
# integer type (8 to 64 bits, signed and unsigned), including Sum's chain of Adds, and on
# N16CX the per-channel op and the op with a plane broadcast over the channels.
#
# Written once and included by _eltwise_fp32_{avx512,fma,sse}.pyx, which define PPL_VLEN, so
# each tier gets its own vector code.  Activations are the vector functions of
# _activation_fp32.h (shared with the brgemm epilogue); the binary loops are plain loops kept
# in forms gcc vectorises under -fno-trapping-math: one loop per (op, stride pattern), no
# branch left inside a loop.
#
#     make_activation_step(x, y, n, code, p0, p1)                  y = f(x), flat
#     make_gated_activation_step(a, b, y, n, code, p0, p1)         y = f(a) * b, flat
#     make_int_unary_step(dtype, x, y, n, code)                     Abs/Neg/Sign of ints
#     make_binary_step(op, dtype, a, a_len, b, b_len, y, shape, a_strides, b_strides)
#     make_channel_binary_n16cx_step(op, x, vec, ...)               y = x op vec[c], N16CX
#     make_eltwise_step(dtype, y, size, [binary_pass | channel_pass | plane_pass], keep)
#
# The last is the general form (Sum is a chain of passes): passes run in order over one
# output, each thread over the same share of it, so a later pass may read the output an
# earlier one wrote (at the same positions) with no barrier between them.  Every thread's
# share is a range of whole 16-element groups: no two threads write one cache line, and an
# N16CX pixel is never cut.
#
# The Python-visible wrappers below (relu_fp32, binary, ...) build the same steps and run
# them with run_steps, so tests and the runtime take one code path.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.math cimport NAN
from libc.string cimport memcpy, memset
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as np

from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"


cdef extern from "_activation_fp32.h" nogil:
    enum:
        PPL_VLEN     # floats per vector register of this tier
        PPL_ACT_NONE
        PPL_ACT_RELU
        PPL_ACT_LEAKY_RELU
        PPL_ACT_CLIP
        PPL_ACT_SIGMOID
        PPL_ACT_TANH
        PPL_ACT_HARD_SWISH
        PPL_ACT_ABS
        PPL_ACT_NEG
        PPL_ACT_SIGN
        PPL_ACT_SHRINK
        PPL_ACT_SWISH
    void ppl_activation(const float *x, float *y, Py_ssize_t n, int code, float p0, float p1)


cdef enum:
    OP_ADD = 0
    OP_MUL = 1
    OP_SUB = 2
    OP_DIV = 3
    # Internal codes for "vec op x" in channel passes (reversed Sub and Div).
    OP_RSUB = 4
    OP_RDIV = 5
    MAX_DIMS = 8
    # Below this many elements of work a step is serial: a fork and join cost more.
    PARALLEL_MIN = 65536
    # Threads split an output at multiples of this many elements (64 bytes of float32).
    SPLIT = 16

    DT_FLOAT32 = 0
    DT_INT32 = 1
    DT_INT64 = 2
    DT_INT8 = 3
    DT_UINT8 = 4
    DT_INT16 = 5
    DT_UINT16 = 6
    DT_UINT32 = 7
    DT_UINT64 = 8

    PASS_BROADCAST = 0
    PASS_CHANNEL = 1
    PASS_PLANE = 2

# The op codes of binary() and the pass builders, for Python callers.
ADD = OP_ADD
MUL = OP_MUL
SUB = OP_SUB
DIV = OP_DIV
# Floats per vector register of this module's tier.
VLEN = PPL_VLEN

# Activation codes this module knows: post_ops.PostOp, every one a case of the header's
# ppl_activation (a test checks the header's enum against PostOp).
_ACTIVATIONS = frozenset(range(PPL_ACT_NONE, PPL_ACT_SWISH + 1))
# The integer unary ops of make_int_unary_step.
INT_UNARY = frozenset((PPL_ACT_ABS, PPL_ACT_NEG, PPL_ACT_SIGN))


ctypedef fused num_t:
    float
    int32_t
    int64_t
    int8_t
    uint8_t
    int16_t
    uint16_t
    uint32_t
    uint64_t


ctypedef fused int_t:
    int32_t
    int64_t


cdef inline void _share(Py_ssize_t n, int tid, int nthreads, Py_ssize_t *b,
                        Py_ssize_t *e) noexcept nogil:
    """Thread tid's share [b, e) of n elements, cut at multiples of SPLIT."""
    ppl_partition(ceil_div(n, SPLIT), tid, nthreads, b, e)
    b[0] = min(b[0] * SPLIT, n)
    e[0] = min(e[0] * SPLIT, n)


# ---------------------------------------------------------------------------------------
# Activations.

cdef struct _ActivationArgs:
    const float *x
    float *y
    Py_ssize_t n
    int code
    float p0, p1
    const float *p0_at      # NULL, or where p0 is read when the step runs
    const float *p1_at


cdef void _activation_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _ActivationArgs *args = <const _ActivationArgs *>a
    cdef Py_ssize_t b, e, i
    cdef float p0 = args.p0_at[0] if args.p0_at != NULL else args.p0
    cdef float p1 = args.p1_at[0] if args.p1_at != NULL else args.p1
    cdef float nan = NAN
    _share(args.n, tid, nthreads, &b, &e)
    if b >= e:
        return
    if args.code == PPL_ACT_CLIP and (p0 != p0 or p1 != p1):
        # A NaN bound makes every output NaN, as np.clip (onnx.reference) does.
        for i in range(b, e):
            args.y[i] = nan
        return
    ppl_activation(args.x + b, args.y + b, e - b, args.code, p0, p1)


def make_activation_step(size_t x, size_t y, Py_ssize_t n, int code, float p0=0, float p1=0,
                         size_t p0_at=0, size_t p1_at=0):
    """y[i] = f(x[i]) for i < n, f the activation ``code`` (post_ops.PostOp) with params p0, p1.

    p0_at / p1_at, when not 0, are addresses of float32 scalars that the step reads each time
    it runs instead of p0 / p1 (Clip's min and max fed or computed at run time).  A NaN Clip
    bound gives NaN everywhere, as np.clip.  Layout-agnostic: an N16CX tensor is one flat
    buffer of its padded size, since every activation maps the zero padding lanes to finite
    values (see _activation_fp32.h).  x == y is allowed.
    """
    if code not in _ACTIVATIONS:
        raise ValueError(f"activation code {code}: expected one of {sorted(_ACTIVATIONS)} "
                         "(pplpy.engines.x86.impls.post_ops.PostOp)")
    if n < 0:
        raise ValueError(f"n = {n}: expected a non-negative element count")
    if n > 0 and (x == 0 or y == 0):
        raise ValueError("x and y must be valid addresses")
    cdef Step step = new_step(_activation_step, sizeof(_ActivationArgs), n >= PARALLEL_MIN)
    cdef _ActivationArgs *args = <_ActivationArgs *>step.args
    args.x = <const float *>x
    args.y = <float *>y
    args.n = n
    args.code = code
    args.p0 = p0
    args.p1 = p1
    args.p0_at = <const float *>p0_at
    args.p1_at = <const float *>p1_at
    step.label = "activation"
    return step


# Gated activations (SwiGLU: y = swish(a) * b): the gate goes through the activation table
# a chunk at a time into a buffer on the stack, then is multiplied by the value input.  Each
# position reads a[i], b[i] before writing y[i], so y may alias a or b.

cdef enum:
    GATE_CHUNK = 256


cdef struct _GatedArgs:
    const float *a
    const float *b
    float *y
    Py_ssize_t n
    int code
    float p0, p1


cdef void _gated_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const _GatedArgs *args = <const _GatedArgs *>p
    cdef Py_ssize_t b, e, i, j, m
    cdef float gate[GATE_CHUNK]
    _share(args.n, tid, nthreads, &b, &e)
    i = b
    while i < e:
        m = min(<Py_ssize_t>GATE_CHUNK, e - i)
        ppl_activation(args.a + i, gate, m, args.code, args.p0, args.p1)
        for j in range(m):
            args.y[i + j] = gate[j] * args.b[i + j]
        i += m


def make_gated_activation_step(size_t a, size_t b, size_t y, Py_ssize_t n, int code,
                               float p0=0, float p1=0):
    """y[i] = f(a[i]) * b[i] for i < n, f the activation ``code`` with params p0, p1."""
    if code not in _ACTIVATIONS:
        raise ValueError(f"activation code {code}: expected one of {sorted(_ACTIVATIONS)}")
    if n < 0:
        raise ValueError(f"n = {n}: expected a non-negative element count")
    if n > 0 and (a == 0 or b == 0 or y == 0):
        raise ValueError("a, b and y must be valid addresses")
    cdef Step step = new_step(_gated_step, sizeof(_GatedArgs), n >= PARALLEL_MIN)
    cdef _GatedArgs *args = <_GatedArgs *>step.args
    args.a, args.b, args.y = <const float *>a, <const float *>b, <float *>y
    args.n = n
    args.code = code
    args.p0, args.p1 = p0, p1
    step.label = "gated activation"
    return step


# Abs, Neg and Sign of int32 / int64 (NDARRAY).  As numpy, -MIN and |MIN| wrap to MIN:
# negation goes through unsigned arithmetic, where wrapping is defined.

cdef struct _IntUnaryArgs:
    const void *x
    void *y
    Py_ssize_t n
    int code


cdef void _int_unary_range(int code, const int_t *x, int_t *y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if code == PPL_ACT_ABS:
        for i in range(n):
            y[i] = <int_t>(<uint64_t>0 - <uint64_t>x[i]) if x[i] < 0 else x[i]
    elif code == PPL_ACT_NEG:
        for i in range(n):
            y[i] = <int_t>(<uint64_t>0 - <uint64_t>x[i])
    else:
        for i in range(n):
            y[i] = (x[i] > 0) - (x[i] < 0)


cdef void _int32_unary_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _IntUnaryArgs *args = <const _IntUnaryArgs *>a
    cdef Py_ssize_t b, e
    _share(args.n, tid, nthreads, &b, &e)
    if b < e:
        _int_unary_range(args.code, <const int32_t *>args.x + b, <int32_t *>args.y + b, e - b)


cdef void _int64_unary_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _IntUnaryArgs *args = <const _IntUnaryArgs *>a
    cdef Py_ssize_t b, e
    _share(args.n, tid, nthreads, &b, &e)
    if b < e:
        _int_unary_range(args.code, <const int64_t *>args.x + b, <int64_t *>args.y + b, e - b)


def make_int_unary_step(dtype, size_t x, size_t y, Py_ssize_t n, int code):
    """y[i] = |x[i]|, -x[i] or sign(x[i]) (code ABS, NEG or SIGN of post_ops.PostOp) for
    i < n, int32 or int64 elements; x == y is allowed."""
    cdef int dt = _dtype_code(dtype)
    if dt != DT_INT32 and dt != DT_INT64:
        raise ValueError("make_int_unary_step: int32 or int64 only (float32: "
                         "make_activation_step)")
    if code not in INT_UNARY:
        raise ValueError(f"make_int_unary_step: code {code} is not ABS, NEG or SIGN")
    if n < 0:
        raise ValueError(f"n = {n}: expected a non-negative element count")
    if n > 0 and (x == 0 or y == 0):
        raise ValueError("x and y must be valid addresses")
    cdef Step step = new_step(_int32_unary_step if dt == DT_INT32 else _int64_unary_step,
                              sizeof(_IntUnaryArgs), n >= PARALLEL_MIN)
    cdef _IntUnaryArgs *args = <_IntUnaryArgs *>step.args
    args.x = <const void *>x
    args.y = <void *>y
    args.n = n
    args.code = code
    step.label = "int_unary"
    return step


def int_unary(const int_t[::1] x, int_t[::1] y, int code, int num_threads):
    """y = |x|, -x or sign(x) (code ABS, NEG or SIGN) on int32 or int64."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} elements but y has {y.shape[0]}: pass equal sizes")
    if x.shape[0] == 0:
        return
    dtype = np.int32 if int_t is int32_t else np.int64
    run_steps([make_int_unary_step(dtype, <size_t>&x[0], <size_t>&y[0], x.shape[0], code)],
              num_threads)


cdef Py_ssize_t _same_length(const float[::1] x, float[::1] y) except -1:
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} elements but y has {y.shape[0]}: pass equal sizes")
    return x.shape[0]


def activation_fp32(const float[::1] x, float[::1] y, int code, float p0, float p1,
                    int num_threads):
    """y = f(x) for the activation ``code`` (post_ops.PostOp) with params p0, p1."""
    cdef Py_ssize_t n = _same_length(x, y)
    if n == 0:
        return
    run_steps([make_activation_step(<size_t>&x[0], <size_t>&y[0], n, code, p0, p1)],
              num_threads)


def gated_activation_fp32(const float[::1] a, const float[::1] b, float[::1] y, int code,
                          float p0, float p1, int num_threads):
    """y = f(a) * b for the activation ``code`` with params p0, p1."""
    cdef Py_ssize_t n = _same_length(a, y)
    _same_length(b, y)
    if n == 0:
        return
    run_steps([make_gated_activation_step(<size_t>&a[0], <size_t>&b[0], <size_t>&y[0], n,
                                          code, p0, p1)], num_threads)


def relu_fp32(const float[::1] x, float[::1] y, int num_threads):
    """y = max(x, 0)"""
    activation_fp32(x, y, PPL_ACT_RELU, 0, 0, num_threads)


def leaky_relu_fp32(const float[::1] x, float[::1] y, float alpha, int num_threads):
    """y = x if x >= 0 else alpha * x"""
    activation_fp32(x, y, PPL_ACT_LEAKY_RELU, alpha, 0, num_threads)


def clip_fp32(const float[::1] x, float[::1] y, float lo, float hi, int num_threads):
    """y = min(max(x, lo), hi)"""
    activation_fp32(x, y, PPL_ACT_CLIP, lo, hi, num_threads)


def sigmoid_fp32(const float[::1] x, float[::1] y, int num_threads):
    """y = 1 / (1 + exp(-x))"""
    activation_fp32(x, y, PPL_ACT_SIGMOID, 0, 0, num_threads)


# ---------------------------------------------------------------------------------------
# Binary arithmetic.  One loop per op and per stride pattern of the innermost dimension:
# both contiguous, one of them a scalar, or anything else (strided).

cdef inline num_t _div(num_t a, num_t b) noexcept nogil:
    if num_t is float:
        return a / b
    else:
        # ONNX Div truncates integers toward zero, as C does (cdivision).  C leaves two
        # cases undefined (they trap on x86); follow onnx.reference: x / 0 = 0, and
        # MIN / -1 wraps to MIN (negated through unsigned, where wrapping is defined).
        if b == 0:
            return 0
        if <num_t>-1 < 0 and b == <num_t>-1:  # signed types only
            return <num_t>(<uint64_t>0 - <uint64_t>a)
        return a / b


cdef inline num_t _mul(num_t a, num_t b) noexcept nogil:
    if num_t is uint16_t:
        # uint16 operands promote to int, whose product may overflow (undefined): multiply
        # as unsigned, which wraps as numpy does.
        return <num_t>(<uint32_t>a * <uint32_t>b)
    else:
        return a * b


cdef void _binary_vv(int op, const num_t* a, const num_t* b, num_t* y,
                     Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = _mul(a[i], b[i])
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a[i] - b[i]
    else:
        for i in range(n):
            y[i] = _div(a[i], b[i])


cdef void _binary_vs(int op, const num_t* a, num_t b, num_t* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i] + b
    elif op == OP_MUL:
        for i in range(n):
            y[i] = _mul(a[i], b)
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a[i] - b
    else:
        for i in range(n):
            y[i] = _div(a[i], b)


cdef void _binary_sv(int op, num_t a, const num_t* b, num_t* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            y[i] = a + b[i]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = _mul(a, b[i])
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a - b[i]
    else:
        for i in range(n):
            y[i] = _div(a, b[i])


cdef void _binary_strided(int op, const num_t* a, Py_ssize_t sa, const num_t* b,
                          Py_ssize_t sb, num_t* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i * sa] + b[i * sb]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = _mul(a[i * sa], b[i * sb])
    elif op == OP_SUB:
        for i in range(n):
            y[i] = a[i * sa] - b[i * sb]
    else:
        for i in range(n):
            y[i] = _div(a[i * sa], b[i * sb])


cdef inline void _binary_row(int op, const num_t* a, Py_ssize_t sa, const num_t* b,
                             Py_ssize_t sb, num_t* y, Py_ssize_t n) noexcept nogil:
    if sa == 1 and sb == 1:
        _binary_vv(op, a, b, y, n)
    elif sa == 1 and sb == 0:
        _binary_vs(op, a, b[0], y, n)
    elif sa == 0 and sb == 1:
        _binary_sv(op, a[0], b, y, n)
    else:
        _binary_strided(op, a, sa, b, sb, y, n)


cdef struct _Layout:
    # The output as rows x inner, after dropping size-1 dimensions and merging dimensions
    # that are contiguous in both inputs; outer dims are shape[:ndim-1].
    int ndim
    Py_ssize_t shape[MAX_DIMS]
    Py_ssize_t sa[MAX_DIMS]
    Py_ssize_t sb[MAX_DIMS]



cdef Py_ssize_t _collapse(const int64_t[::1] shape, const int64_t[::1] sa,
                          const int64_t[::1] sb, Py_ssize_t a_len, Py_ssize_t b_len,
                          _Layout* L) except -1:
    """Fill L from the arguments of binary() and return the output size, after checks."""
    cdef Py_ssize_t ndim = shape.shape[0], d, size = 1, a_end = 0, b_end = 0
    if sa.shape[0] != ndim or sb.shape[0] != ndim or ndim > MAX_DIMS:
        raise ValueError(
            f"out_shape, a_strides, b_strides have lengths {ndim}, {sa.shape[0]}, "
            f"{sb.shape[0]}: expected equal lengths of at most {MAX_DIMS}")
    L.ndim = 0
    for d in range(ndim):
        if shape[d] < 0 or sa[d] < 0 or sb[d] < 0:
            raise ValueError(f"dim {d}: shape {shape[d]}, strides {sa[d]}, {sb[d]}: "
                             "expected non-negative values")
        size *= shape[d]
        a_end += (shape[d] - 1) * sa[d]
        b_end += (shape[d] - 1) * sb[d]
        if shape[d] == 1:
            continue    # a size-1 dim moves no pointer
        if (L.ndim > 0 and L.sa[L.ndim - 1] == sa[d] * shape[d]
                and L.sb[L.ndim - 1] == sb[d] * shape[d]):
            L.shape[L.ndim - 1] *= shape[d]    # contiguous in both inputs: merge
            L.sa[L.ndim - 1] = sa[d]
            L.sb[L.ndim - 1] = sb[d]
        else:
            L.shape[L.ndim] = shape[d]
            L.sa[L.ndim] = sa[d]
            L.sb[L.ndim] = sb[d]
            L.ndim += 1
    if L.ndim == 0:
        L.shape[0], L.sa[0], L.sb[0], L.ndim = 1, 0, 0, 1
    if size > 0 and (a_end >= a_len or b_end >= b_len):
        raise ValueError(f"shape {list(shape)} with strides {list(sa)} / {list(sb)} reaches "
                         f"elements {a_end} / {b_end} of a / b, which have {a_len} / {b_len}")
    return size


# ---------------------------------------------------------------------------------------
# Passes: one element-wise sweep over the output, as a plain struct a step holds an array of.

cdef struct _Pass:
    int kind                # PASS_BROADCAST, PASS_CHANNEL or PASS_PLANE
    int op
    const void *a           # broadcast: a; channel, plane: x (N16CX, the output's shape)
    const void *b           # broadcast: b; channel: vec; plane: plane (float32)
    _Layout L               # broadcast: the output as collapsed dims, strides of a and b
    Py_ssize_t vec_len      # channel: vec[n * vec_batch_stride + c * vec_stride] for c <
    Py_ssize_t vec_stride   # vec_len, 0 past it; plane: plane[n * vec_batch_stride + s]
    Py_ssize_t vec_batch_stride
    Py_ssize_t blocks       # channel, plane: output (N, blocks, npix, 16)
    Py_ssize_t npix
    Py_ssize_t channels     # channel, plane: lanes c >= channels are written 0; -1: computed


cdef struct _EltwiseArgs:
    int dtype
    void *y
    Py_ssize_t size         # output elements
    Py_ssize_t npasses
    const _Pass *passes


cdef void _broadcast_range(int op, const num_t* a, const num_t* b, num_t* y, const _Layout* L,
                           Py_ssize_t begin, Py_ssize_t end) noexcept nogil:
    """Output elements [begin, end): whole and partial rows of the collapsed layout."""
    cdef int inner = L.ndim - 1, d
    cdef Py_ssize_t cols = L.shape[inner], r, c, cnt, rem, a_off = 0, b_off = 0, pos = begin
    cdef Py_ssize_t idx[MAX_DIMS]
    if begin >= end:
        return
    r = begin // cols
    c = begin - r * cols
    # Unravel the first row into an index over the outer dims, then step it like an
    # odometer: one division per dim per call, not per row.
    rem = r
    for d in range(inner - 1, -1, -1):
        idx[d] = rem % L.shape[d]
        rem = rem // L.shape[d]
        a_off += idx[d] * L.sa[d]
        b_off += idx[d] * L.sb[d]
    while True:
        cnt = min(cols - c, end - pos)
        _binary_row(op, a + a_off + c * L.sa[inner], L.sa[inner],
                    b + b_off + c * L.sb[inner], L.sb[inner], y + pos, cnt)
        pos += cnt
        if pos >= end:
            break
        c = 0
        d = inner - 1
        while d >= 0:
            idx[d] += 1
            a_off += L.sa[d]
            b_off += L.sb[d]
            if idx[d] < L.shape[d]:
                break
            a_off -= L.shape[d] * L.sa[d]
            b_off -= L.shape[d] * L.sb[d]
            idx[d] = 0
            d -= 1


cdef void _blocked_range(const _Pass* p, float* y, Py_ssize_t begin,
                         Py_ssize_t end) noexcept nogil:
    """Output elements [begin, end) of a channel or plane pass, whole pixels of 16 lanes,
    a run of pixels of one (image, channel block) at a time."""
    cdef const float* x = <const float*>p.a
    cdef const float* operand = <const float*>p.b
    cdef Py_ssize_t pix = begin // 16, pix_end = end // 16, r, s, cnt, cb, ch, off, base
    cdef float v[16]
    cdef int l
    if pix >= pix_end:
        return
    r = pix // p.npix    # r = n * blocks + cb
    s = pix - r * p.npix
    while pix < pix_end:
        cnt = min(p.npix - s, pix_end - pix)
        cb = r % p.blocks
        base = (r // p.blocks) * p.vec_batch_stride
        off = pix * 16
        if p.kind == PASS_CHANNEL:  # the block's 16 values of vec
            for l in range(16):
                ch = cb * 16 + l
                v[l] = operand[base + ch * p.vec_stride] if ch < p.vec_len else 0
            _channel_binary_pixels(p.op, x + off, v, y + off, cnt)
        else:  # each pixel's lanes meet the plane's one value there
            _plane_binary_pixels(p.op, x + off, operand + base + s, y + off, cnt)
        if 0 <= p.channels < (cb + 1) * 16:
            _zero_padding_lanes(y + off, cnt, <int>(p.channels - cb * 16))
        pix += cnt
        s = 0
        r += 1


cdef void _eltwise_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _EltwiseArgs *args = <const _EltwiseArgs *>a
    cdef const _Pass *p
    cdef Py_ssize_t b, e, k
    _share(args.size, tid, nthreads, &b, &e)
    if b >= e:
        return
    for k in range(args.npasses):
        p = &args.passes[k]
        if p.kind != PASS_BROADCAST:
            _blocked_range(p, <float*>args.y, b, e)
        elif args.dtype == DT_FLOAT32:
            _broadcast_range(p.op, <const float*>p.a, <const float*>p.b, <float*>args.y,
                             &p.L, b, e)
        else:
            _int_broadcast_range(args.dtype, p, args.y, b, e)


cdef void _int_broadcast_range(int dt, const _Pass *p, void *y, Py_ssize_t b,
                               Py_ssize_t e) noexcept nogil:
    """_broadcast_range on the integer type dt."""
    if dt == DT_INT32:
        _broadcast_range(p.op, <const int32_t*>p.a, <const int32_t*>p.b, <int32_t*>y, &p.L, b, e)
    elif dt == DT_INT64:
        _broadcast_range(p.op, <const int64_t*>p.a, <const int64_t*>p.b, <int64_t*>y, &p.L, b, e)
    elif dt == DT_INT8:
        _broadcast_range(p.op, <const int8_t*>p.a, <const int8_t*>p.b, <int8_t*>y, &p.L, b, e)
    elif dt == DT_UINT8:
        _broadcast_range(p.op, <const uint8_t*>p.a, <const uint8_t*>p.b, <uint8_t*>y, &p.L, b, e)
    elif dt == DT_INT16:
        _broadcast_range(p.op, <const int16_t*>p.a, <const int16_t*>p.b, <int16_t*>y, &p.L, b, e)
    elif dt == DT_UINT16:
        _broadcast_range(p.op, <const uint16_t*>p.a, <const uint16_t*>p.b, <uint16_t*>y, &p.L,
                         b, e)
    elif dt == DT_UINT32:
        _broadcast_range(p.op, <const uint32_t*>p.a, <const uint32_t*>p.b, <uint32_t*>y, &p.L,
                         b, e)
    else:
        _broadcast_range(p.op, <const uint64_t*>p.a, <const uint64_t*>p.b, <uint64_t*>y, &p.L,
                         b, e)


_DTYPES = {np.dtype(np.float32): DT_FLOAT32, np.dtype(np.int32): DT_INT32,
           np.dtype(np.int64): DT_INT64, np.dtype(np.int8): DT_INT8,
           np.dtype(np.uint8): DT_UINT8, np.dtype(np.int16): DT_INT16,
           np.dtype(np.uint16): DT_UINT16, np.dtype(np.uint32): DT_UINT32,
           np.dtype(np.uint64): DT_UINT64}


cdef int _dtype_code(dtype) except -1:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise ValueError(f"dtype {dt}: expected float32 or an integer type")
    return _DTYPES[dt]


cdef int _check_op(int op) except -1:
    if op < OP_ADD or op > OP_DIV:
        raise ValueError(f"op {op}: expected ADD, MUL, SUB or DIV (0 to 3)")
    return 0


cdef bytes _pass_bytes(const _Pass *p):
    return (<const char *>p)[:sizeof(_Pass)]


def binary_pass(int op, size_t a, Py_ssize_t a_len, size_t b, Py_ssize_t b_len, out_shape,
                a_strides, b_strides):
    """One pass y = a op b, numpy broadcasting through element strides (0 = broadcast dim).

    Returns (pass, output size) for make_eltwise_step; a_len / b_len are the elements a and b
    hold, checked against what the strides reach.
    """
    cdef _Pass p
    cdef Py_ssize_t size
    _check_op(op)
    memset(&p, 0, sizeof(_Pass))
    p.kind = PASS_BROADCAST
    p.op = op
    p.a = <const void *>a
    p.b = <const void *>b
    size = _collapse(np.ascontiguousarray(out_shape, np.int64),
                     np.ascontiguousarray(a_strides, np.int64),
                     np.ascontiguousarray(b_strides, np.int64), a_len, b_len, &p.L)
    return _pass_bytes(&p), size


cdef int _blocked_pass(_Pass *p, int kind, int op, size_t x, size_t operand, Py_ssize_t N,
                       Py_ssize_t blocks, Py_ssize_t npix, bint operand_first,
                       Py_ssize_t channels, Py_ssize_t batch_stride) except -1:
    """Fill ``p``: a channel or plane pass over N16CX x and y (N, blocks, npix, 16), after
    checks; the operand first turns Sub and Div around."""
    _check_op(op)
    if N < 0 or blocks < 0 or npix < 0 or batch_stride < 0:
        raise ValueError(f"N {N}, blocks {blocks}, npix {npix}, batch stride {batch_stride}: "
                         f"expected non-negative values")
    if channels > blocks * 16:
        raise ValueError(f"channels {channels} exceed the {blocks * 16} lanes of x")
    memset(p, 0, sizeof(_Pass))
    p.kind = kind
    p.op = op
    if operand_first and op == OP_SUB:
        p.op = OP_RSUB
    elif operand_first and op == OP_DIV:
        p.op = OP_RDIV
    p.a = <const void *>x
    p.b = <const void *>operand
    p.vec_batch_stride = batch_stride
    p.blocks = blocks
    p.npix = npix
    p.channels = channels
    return 0


def channel_pass(int op, size_t x, size_t vec, Py_ssize_t vec_len, Py_ssize_t vec_stride,
                 Py_ssize_t N, Py_ssize_t blocks, Py_ssize_t npix, bint vec_first=False,
                 Py_ssize_t channels=-1, Py_ssize_t vec_batch_stride=0):
    """One pass y[n, c, s] = x[n, c, s] op vec[n, c] (vec op x if vec_first) on N16CX
    float32, x and y (N, blocks, npix, 16); vec[n, c] is read at n * vec_batch_stride +
    c * vec_stride for c < vec_len and is 0 past it (vec_batch_stride 0: one vector for
    every n).  With channels >= 0, lanes c >= channels of y are written 0 (Div by padding
    would make them NaN).  Returns (pass, output size)."""
    cdef _Pass p
    if vec_len < 0 or vec_stride < 0:
        raise ValueError(f"vec_len {vec_len}, vec_stride {vec_stride}: expected non-negative "
                         f"values")
    _blocked_pass(&p, PASS_CHANNEL, op, x, vec, N, blocks, npix, vec_first, channels,
                  vec_batch_stride)
    p.vec_len = vec_len
    p.vec_stride = vec_stride
    return _pass_bytes(&p), N * blocks * npix * 16


def plane_pass(int op, size_t x, size_t plane, Py_ssize_t N, Py_ssize_t blocks,
               Py_ssize_t npix, bint plane_first=False, Py_ssize_t channels=-1,
               Py_ssize_t plane_batch_stride=0):
    """One pass y[n, c, s] = x[n, c, s] op plane[n, s] (plane op x if plane_first) on N16CX
    float32 x and y (N, blocks, npix, 16): an operand (N or 1, 1, spatial...) in NDARRAY
    that broadcasts over the channels (a spatial gate: FocalNet's, CBAM's), read at
    n * plane_batch_stride + s.  With channels >= 0, lanes c >= channels of y are written 0.
    Returns (pass, output size)."""
    cdef _Pass p
    _blocked_pass(&p, PASS_PLANE, op, x, plane, N, blocks, npix, plane_first, channels,
                  plane_batch_stride)
    return _pass_bytes(&p), N * blocks * npix * 16


def make_eltwise_step(dtype, size_t y, Py_ssize_t size, passes, keep=None):
    """A step running ``passes`` (from binary_pass / channel_pass / plane_pass) in order over
    the output y of ``size`` elements of ``dtype``.  A pass after the first may read y only
    at the positions it writes (a = y with the output's own layout: Sum's running total)."""
    cdef int dt = _dtype_code(dtype)
    cdef Py_ssize_t k, npasses = len(passes)
    cdef bytes blob
    cdef const _Pass *p
    if npasses == 0:
        raise ValueError("make_eltwise_step needs at least one pass")
    for k, (blob, pass_size) in enumerate(passes):
        if len(blob) != sizeof(_Pass):
            raise ValueError(f"pass {k} is not a pass of this module")
        if pass_size != size:
            raise ValueError(f"pass {k} covers {pass_size} elements, the output has {size}")
        p = <const _Pass *><const char *>blob
        if p.kind != PASS_BROADCAST and dt != DT_FLOAT32:
            raise ValueError(f"pass {k}: a channel or plane pass needs float32, got "
                             f"{np.dtype(dtype)}")
    table = np.empty(npasses * sizeof(_Pass), np.uint8)
    cdef unsigned char[::1] t = table
    for k in range(npasses):
        blob = passes[k][0]
        memcpy(&t[k * sizeof(_Pass)], <const char *>blob, sizeof(_Pass))
    cdef Step step = new_step(_eltwise_step, sizeof(_EltwiseArgs),
                              size * npasses >= PARALLEL_MIN, (table, keep))
    cdef _EltwiseArgs *args = <_EltwiseArgs *>step.args
    args.dtype = dt
    args.y = <void *>y
    args.size = size
    args.npasses = npasses
    args.passes = <const _Pass *>&t[0]
    step.label = "eltwise"
    return step


def make_binary_step(int op, dtype, size_t a, Py_ssize_t a_len, size_t b, Py_ssize_t b_len,
                     size_t y, out_shape, a_strides, b_strides):
    """y = a op b (ADD, MUL, SUB, DIV), numpy broadcasting through element strides; y is
    contiguous with ``out_shape``.  Integer Div truncates, x / 0 = 0, as onnx.reference."""
    bp = binary_pass(op, a, a_len, b, b_len, out_shape, a_strides, b_strides)
    return make_eltwise_step(dtype, y, bp[1], [bp])


def make_channel_binary_n16cx_step(int op, size_t x, size_t vec, Py_ssize_t vec_len,
                                   Py_ssize_t vec_stride, size_t y, Py_ssize_t N,
                                   Py_ssize_t blocks, Py_ssize_t npix, bint vec_first=False,
                                   Py_ssize_t channels=-1):
    """y[n, c, s] = x[n, c, s] op vec[c] on N16CX (see channel_pass)."""
    cp = channel_pass(op, x, vec, vec_len, vec_stride, N, blocks, npix, vec_first, channels)
    return make_eltwise_step(np.float32, y, cp[1], [cp])


def contiguous_strides(shape):
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for dim in reversed(tuple(shape)):
        strides.append(step)
        step *= dim
    return np.array(strides[::-1], np.int64)


def binary(int op, const num_t[::1] a, const num_t[::1] b, num_t[::1] y,
           const int64_t[::1] out_shape, const int64_t[::1] a_strides,
           const int64_t[::1] b_strides, int num_threads):
    """y = a op b, numpy broadcasting through element strides; op in ADD, MUL, SUB, DIV."""
    cdef object dtype = np.asarray(y).dtype
    _check_op(op)
    bp = binary_pass(op, <size_t>&a[0], a.shape[0], <size_t>&b[0], b.shape[0],
                     np.asarray(out_shape), np.asarray(a_strides), np.asarray(b_strides))
    if y.shape[0] != bp[1]:
        raise ValueError(f"y has {y.shape[0]} elements, out_shape {list(out_shape)} needs "
                         f"{bp[1]}")
    if bp[1] == 0:
        return
    run_steps([make_eltwise_step(dtype, <size_t>&y[0], bp[1], [bp])], num_threads)


# ---------------------------------------------------------------------------------------
# Per-channel binary op on N16CX: y[n, c, s] = x[n, c, s] op vec[c].

cdef void _channel_binary_pixels(int op, const float* x, const float* vec, float* y,
                                 Py_ssize_t npix) noexcept nogil:
    """One channel block: npix pixels of 16 lanes; vec holds the block's 16 values."""
    cdef Py_ssize_t i
    cdef int l
    cdef float v[16]
    for l in range(16):
        v[l] = vec[l]    # a local copy: gcc need not fear that stores to y change it
    if op == OP_ADD:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] + v[l]
    elif op == OP_MUL:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] * v[l]
    elif op == OP_SUB:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] - v[l]
    elif op == OP_DIV:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] / v[l]
    elif op == OP_RSUB:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = v[l] - x[i * 16 + l]
    else:
        for i in range(npix):
            for l in range(16):
                y[i * 16 + l] = v[l] / x[i * 16 + l]


cdef void _plane_binary_pixels(int op, const float* x, const float* plane, float* y,
                               Py_ssize_t npix) noexcept nogil:
    """One channel block: npix pixels of 16 lanes, pixel i's lanes with plane[i]."""
    cdef Py_ssize_t i
    cdef int l
    cdef float v
    if op == OP_ADD:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] + v
    elif op == OP_MUL:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] * v
    elif op == OP_SUB:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] - v
    elif op == OP_DIV:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = x[i * 16 + l] / v
    elif op == OP_RSUB:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = v - x[i * 16 + l]
    else:
        for i in range(npix):
            v = plane[i]
            for l in range(16):
                y[i * 16 + l] = v / x[i * 16 + l]


cdef void _zero_padding_lanes(float* y, Py_ssize_t npix, int first) noexcept nogil:
    """Set lanes [first, 16) of npix pixels to 0."""
    cdef Py_ssize_t i
    cdef int l
    for i in range(npix):
        for l in range(first, 16):
            y[i * 16 + l] = 0


cdef tuple _shape4(const float[:, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3])


def channel_binary_n16cx_fp32(int op, const float[:, :, :, ::1] x, const float[::1] vec,
                              float[:, :, :, ::1] y, int num_threads, bint vec_first=False,
                              Py_ssize_t channels=-1):
    """y[n, c, s] = x[n, c, s] op vec[c] (vec op x if vec_first); x, y (N, C/16, S, 16).

    With ``channels`` >= 0, lanes c >= channels of y are written as 0 (Div by padding
    would make them NaN); with -1 they are computed like the others.
    """
    cdef Py_ssize_t N = x.shape[0], blocks = x.shape[1], npix = x.shape[2]
    _check_op(op)
    if x.shape[3] != 16 or _shape4(x) != _shape4(y):
        raise ValueError(f"x {_shape4(x)}, y {_shape4(y)}: expected equal shapes "
                         "(N, ceil(C/16), S, 16)")
    if vec.shape[0] != blocks * 16:
        raise ValueError(f"vec has {vec.shape[0]} values: expected {blocks * 16} "
                         "(C padded to a multiple of 16)")
    if N * blocks * npix == 0:
        return
    step = make_channel_binary_n16cx_step(op, <size_t>&x[0, 0, 0, 0], <size_t>&vec[0],
                                          blocks * 16, 1, <size_t>&y[0, 0, 0, 0], N, blocks,
                                          npix, vec_first, channels)
    run_steps([step], num_threads)
