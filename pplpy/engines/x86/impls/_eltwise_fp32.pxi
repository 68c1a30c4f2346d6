# Element-wise kernels: activations on flat float32 buffers, and broadcasting binary
# arithmetic (Add, Mul, Sub, Div) for float32, int32 and int64.
#
# Written once and included by _eltwise_fp32_{avx512,fma,sse}.pyx, so gcc vectorises each
# loop three ways.  The loops are kept in forms it vectorises under -fno-trapping-math:
# if/else rather than fmaxf/fminf, exp_fp32 rather than libm's expf, and a separate loop
# per (op, stride pattern) so no branch is left inside a loop.  Activations are
# format-agnostic: an N16CX tensor is just a longer flat buffer.

from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint64_t

include "_kernel_support.pxi"


cdef enum:
    OP_ADD = 0
    OP_MUL = 1
    OP_SUB = 2
    OP_DIV = 3
    # Internal codes for "vec op x" in channel_binary_n16cx_fp32 (reversed Sub and Div).
    OP_RSUB = 4
    OP_RDIV = 5
    MAX_DIMS = 8

# The op codes of binary() and channel_binary_n16cx_fp32(), for Python callers.
ADD = OP_ADD
MUL = OP_MUL
SUB = OP_SUB
DIV = OP_DIV


ctypedef fused num_t:
    float
    int32_t
    int64_t


# ---------------------------------------------------------------------------------------
# Activations.  Each core runs on one chunk of at most GRAIN elements; the wrappers hand
# chunks to threads.

cdef void _relu(const float* x, float* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        # "0 if x < 0" rather than "x if x > 0" lets NaN through, as numpy.maximum does.
        y[i] = 0 if x[i] < 0 else x[i]


cdef void _leaky_relu(const float* x, float* y, Py_ssize_t n, float alpha) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = x[i] if x[i] >= 0 else alpha * x[i]


cdef void _clip(const float* x, float* y, Py_ssize_t n, float lo, float hi) noexcept nogil:
    cdef Py_ssize_t i
    cdef float v
    for i in range(n):
        # Comparisons are false for NaN, so NaN passes through, as in numpy.clip.
        v = lo if x[i] < lo else x[i]
        y[i] = hi if v > hi else v


cdef void _sigmoid(const float* x, float* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float v, e, r, one = 1    # a float 1: a literal 1 would make this double arithmetic
    for i in range(n):
        v = x[i]
        # exp(-|x|) never overflows, and e / (1 + e) keeps full relative precision for
        # x << 0, where 1 - 1 / (1 + exp(x)) would cancel.
        e = exp_fp32(-v if v > 0 else v)
        r = one / (one + e)
        y[i] = r if v >= 0 else e * r


cdef Py_ssize_t _same_length(const float[::1] x, float[::1] y) except -1:
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} elements but y has {y.shape[0]}: pass equal sizes")
    return x.shape[0]


def relu_fp32(const float[::1] x, float[::1] y, int num_threads):
    """y = max(x, 0)"""
    cdef Py_ssize_t n = _same_length(x, y), t, nt = ceil_div(n, GRAIN)
    for t in prange(nt, nogil=True, num_threads=threads_for(num_threads, nt), schedule="static"):
        _relu(&x[t * GRAIN], &y[t * GRAIN], min(GRAIN, n - t * GRAIN))


def leaky_relu_fp32(const float[::1] x, float[::1] y, float alpha, int num_threads):
    """y = x if x >= 0 else alpha * x"""
    cdef Py_ssize_t n = _same_length(x, y), t, nt = ceil_div(n, GRAIN)
    for t in prange(nt, nogil=True, num_threads=threads_for(num_threads, nt), schedule="static"):
        _leaky_relu(&x[t * GRAIN], &y[t * GRAIN], min(GRAIN, n - t * GRAIN), alpha)


def clip_fp32(const float[::1] x, float[::1] y, float lo, float hi, int num_threads):
    """y = min(max(x, lo), hi)"""
    cdef Py_ssize_t n = _same_length(x, y), t, nt = ceil_div(n, GRAIN)
    for t in prange(nt, nogil=True, num_threads=threads_for(num_threads, nt), schedule="static"):
        _clip(&x[t * GRAIN], &y[t * GRAIN], min(GRAIN, n - t * GRAIN), lo, hi)


def sigmoid_fp32(const float[::1] x, float[::1] y, int num_threads):
    """y = 1 / (1 + exp(-x))"""
    cdef Py_ssize_t n = _same_length(x, y), t, nt = ceil_div(n, GRAIN)
    for t in prange(nt, nogil=True, num_threads=threads_for(num_threads, nt), schedule="static"):
        _sigmoid(&x[t * GRAIN], &y[t * GRAIN], min(GRAIN, n - t * GRAIN))


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
        if b == -1:
            return <num_t>(<uint64_t>0 - <uint64_t>a)
        return a / b


cdef void _binary_vv(int op, const num_t* a, const num_t* b, num_t* y,
                     Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if op == OP_ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == OP_MUL:
        for i in range(n):
            y[i] = a[i] * b[i]
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
            y[i] = a[i] * b
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
            y[i] = a * b[i]
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
            y[i] = a[i * sa] * b[i * sb]
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


cdef void _binary_task(int op, const num_t* a, const num_t* b, num_t* y, const _Layout* L,
                       const Tasks2D* tasks, Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, r, rem, a_off = 0, b_off = 0
    cdef Py_ssize_t idx[MAX_DIMS]
    cdef int d, inner = L.ndim - 1
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    # Unravel the first row into an index over the outer dims, then step it like an
    # odometer: one division per dim per task, not per row.
    rem = r0
    for d in range(inner - 1, -1, -1):
        idx[d] = rem % L.shape[d]
        rem = rem // L.shape[d]
        a_off += idx[d] * L.sa[d]
        b_off += idx[d] * L.sb[d]
    for r in range(r0, r1):
        _binary_row(op, a + a_off + c0 * L.sa[inner], L.sa[inner],
                    b + b_off + c0 * L.sb[inner], L.sb[inner],
                    y + r * L.shape[inner] + c0, c1 - c0)
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


def binary(int op, const num_t[::1] a, const num_t[::1] b, num_t[::1] y,
           const int64_t[::1] out_shape, const int64_t[::1] a_strides,
           const int64_t[::1] b_strides, int num_threads):
    """y = a op b, numpy broadcasting through element strides; op in ADD, MUL, SUB, DIV."""
    cdef _Layout L
    cdef Tasks2D tasks
    cdef Py_ssize_t size, rows = 1, t
    cdef int d
    if op < OP_ADD or op > OP_DIV:
        raise ValueError(f"op {op}: expected ADD, MUL, SUB or DIV (0 to 3)")
    size = _collapse(out_shape, a_strides, b_strides, a.shape[0], b.shape[0], &L)
    if y.shape[0] != size:
        raise ValueError(f"y has {y.shape[0]} elements, out_shape {list(out_shape)} needs {size}")
    if size == 0:
        return
    for d in range(L.ndim - 1):
        rows *= L.shape[d]
    tasks = split_2d(rows, L.shape[L.ndim - 1], GRAIN)
    for t in prange(tasks.count, nogil=True, num_threads=threads_for(num_threads, tasks.count),
                    schedule="static"):
        _binary_task(op, &a[0], &b[0], &y[0], &L, &tasks, t)


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


cdef void _zero_padding_lanes(float* y, Py_ssize_t npix, int first) noexcept nogil:
    """Set lanes [first, 16) of npix pixels to 0."""
    cdef Py_ssize_t i
    cdef int l
    for i in range(npix):
        for l in range(first, 16):
            y[i * 16 + l] = 0


cdef void _channel_binary_task(int op, const float* x, const float* vec, float* y,
                               Py_ssize_t blocks, Py_ssize_t npix, Py_ssize_t channels,
                               const Tasks2D* tasks, Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, r, cb, off
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    for r in range(r0, r1):    # r = n * blocks + cb
        cb = r % blocks
        off = (r * npix + c0) * 16
        _channel_binary_pixels(op, x + off, vec + cb * 16, y + off, c1 - c0)
        if 0 <= channels < (cb + 1) * 16:
            _zero_padding_lanes(y + off, c1 - c0, <int>(channels - cb * 16))


cdef tuple _shape4(const float[:, :, :, ::1] a):
    return (a.shape[0], a.shape[1], a.shape[2], a.shape[3])


def channel_binary_n16cx_fp32(int op, const float[:, :, :, ::1] x, const float[::1] vec,
                              float[:, :, :, ::1] y, int num_threads, bint vec_first=False,
                              Py_ssize_t channels=-1):
    """y[n, c, s] = x[n, c, s] op vec[c] (vec op x if vec_first); x, y (N, C/16, S, 16).

    With ``channels`` >= 0, lanes c >= channels of y are written as 0 (Div by padding
    would make them NaN); with -1 they are computed like the others.
    """
    cdef Py_ssize_t N = x.shape[0], blocks = x.shape[1], npix = x.shape[2], t
    cdef Tasks2D tasks
    if op < OP_ADD or op > OP_DIV:
        raise ValueError(f"op {op}: expected ADD, MUL, SUB or DIV (0 to 3)")
    if x.shape[3] != 16 or _shape4(x) != _shape4(y):
        raise ValueError(f"x {_shape4(x)}, y {_shape4(y)}: expected equal shapes "
                         "(N, ceil(C/16), S, 16)")
    if vec.shape[0] != blocks * 16:
        raise ValueError(f"vec has {vec.shape[0]} values: expected {blocks * 16} "
                         "(C padded to a multiple of 16)")
    if channels > blocks * 16:
        raise ValueError(f"channels {channels} exceed the {blocks * 16} lanes of x")
    if vec_first and op == OP_SUB:
        op = OP_RSUB
    elif vec_first and op == OP_DIV:
        op = OP_RDIV
    tasks = split_2d(N * blocks, npix, GRAIN // 16)
    if tasks.count == 0:
        return
    for t in prange(tasks.count, nogil=True, num_threads=threads_for(num_threads, tasks.count),
                    schedule="static"):
        _channel_binary_task(op, &x[0, 0, 0, 0], &vec[0], &y[0, 0, 0, 0], blocks, npix,
                             channels, &tasks, t)
