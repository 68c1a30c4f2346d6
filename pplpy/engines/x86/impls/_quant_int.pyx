# Integer kernels of the quantized ops (MatMulInteger, QLinearMatMul, ConvInteger,
# QLinearConv, DynamicQuantizeLinear) as compiled steps of the run plan.
#
#   make_igemm_step     C[b, m, n] = sum_k (A[b, m, k] - za[m]) * (B[b, k, n] - zb[n])
#                       int32 accumulation; A int8 / uint8, B int8 / uint8 / int32; zero
#                       points per tensor or per row (A) / per column (B)
#   make_im2col_step    col[n, g, (c, ky, kx), (oy, ox)] = x[n, g*Cg + c, iy, ix] - zx, 0 where
#                       the window lies in the padding (a conv of x - zx pads with zeros)
#   make_requant_step   y[r, j] = saturate(rint((C[r, j] + bias[m]) * s(m, j)) + zy), with
#                       m = r % R and s(m, j) = (s_row[m] * s_col[j]) / s_y in float32, the
#                       product with the int32 in float64, as onnx.reference computes it
#   make_minmax_step    DynamicQuantizeLinear's scale and zero point from min(x, 0), max(x, 0)
#
# A convolution is im2col then one GEMM per (image, group) with the weight as A, so
# QLinearConv and ConvInteger share the GEMM of QLinearMatMul and MatMulInteger.  Element
# types are fused types that Cython specialises per combination; the step switches on
# ONNX type codes.  Every address, size and type is checked in make_*_step.  Baseline flags:
# one module for every tier (the inner loops are plain int32 arithmetic gcc vectorises).

from libc.math cimport NAN
from libc.stdint cimport int8_t, uint8_t, int32_t, int64_t
from libc.string cimport memset

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_onnx_types.pxi"
include "_quant_round.pxi"

cdef enum:
    # Below this many multiply-adds (or elements) a step runs serially.
    PARALLEL_WORK = 65536
    # Output columns per block of the GEMM: a block of C's row stays in L1 across k.
    N_BLOCK = 512

ctypedef fused a_t:
    int8_t
    uint8_t

ctypedef fused b_t:
    int8_t
    uint8_t
    int32_t

ctypedef fused q_t:
    int8_t
    uint8_t

_CODES = {np.dtype(np.int8): T_INT8, np.dtype(np.uint8): T_UINT8, np.dtype(np.int32): T_INT32}
_RANGES = {T_INT8: (-128.0, 127.0), T_UINT8: (0.0, 255.0)}


cdef int _code(dtype, allowed) except -1:
    dt = np.dtype(dtype)
    code = _CODES.get(dt)
    if code not in allowed:
        raise ValueError(f"element type {dt} is not supported here")
    return code


def _check_offsets(name, offsets, Py_ssize_t count, Py_ssize_t span, Py_ssize_t size):
    """offsets: ``count`` int64 element offsets, each with ``span`` elements inside ``size``."""
    arr = np.ascontiguousarray(offsets, np.int64)
    if arr.shape != (count,):
        raise ValueError(f"{name}: expected {count} offsets, got shape {arr.shape}")
    if count and (arr.min() < 0 or arr.max() + span > size):
        raise ValueError(f"{name}: offsets reach outside the {size} elements")
    return arr


# ---------------------------------------------------------------------------------------
# GEMM.

cdef struct GemmArgs:
    const void *A
    const void *B
    int32_t *C
    const int64_t *a_off        # per batch entry, in elements
    const int64_t *b_off
    const int64_t *c_off
    const int64_t *za_off       # per batch entry: where its rows' zero points start
    const void *za              # NULL: 0; else za[za_off[b] + m * za_step], A's type
    const void *zb              # NULL: 0; else zb[n * zb_step], B's type
    Py_ssize_t za_step, zb_step
    Py_ssize_t batch, M, N, K
    int atype, btype


cdef void _gemm_rows(const GemmArgs *g, const a_t *A, const b_t *B, Py_ssize_t r0,
                     Py_ssize_t r1) noexcept nogil:
    """Rows [r0, r1) of the batch-stacked output (row r = entry r // M, row r % M)."""
    cdef Py_ssize_t r, bi, m, k, n, n0, n1, N = g.N, K = g.K
    cdef const a_t *arow
    cdef const b_t *bmat
    cdef const b_t *brow
    cdef const b_t *zbv = <const b_t *>g.zb
    cdef int32_t *crow
    cdef int32_t av, za, zb0
    zb0 = <int32_t>zbv[0] if zbv != NULL else 0
    for r in range(r0, r1):
        bi = r // g.M
        m = r - bi * g.M
        arow = A + g.a_off[bi] + m * K
        bmat = B + g.b_off[bi]
        crow = g.C + g.c_off[bi] + m * N
        za = <int32_t>(<const a_t *>g.za)[g.za_off[bi] + m * g.za_step] if g.za != NULL else 0
        memset(crow, 0, N * sizeof(int32_t))
        n0 = 0
        while n0 < N:
            n1 = min(n0 + N_BLOCK, N)
            for k in range(K):
                av = <int32_t>arow[k] - za
                if av == 0:
                    continue
                brow = bmat + k * N
                if zbv == NULL or g.zb_step == 0:
                    for n in range(n0, n1):
                        crow[n] += av * (<int32_t>brow[n] - zb0)
                else:
                    for n in range(n0, n1):
                        crow[n] += av * (<int32_t>brow[n] - <int32_t>zbv[n])
            n0 = n1


cdef void _gemm_b(const GemmArgs *g, const a_t *A, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    if g.btype == T_INT8:
        _gemm_rows(g, A, <const int8_t *>g.B, r0, r1)
    elif g.btype == T_UINT8:
        _gemm_rows(g, A, <const uint8_t *>g.B, r0, r1)
    else:
        _gemm_rows(g, A, <const int32_t *>g.B, r0, r1)


cdef void _gemm_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const GemmArgs *g = <const GemmArgs *>p
    cdef Py_ssize_t r0, r1
    ppl_partition(g.batch * g.M, tid, nthreads, &r0, &r1)
    if g.atype == T_INT8:
        _gemm_b(g, <const int8_t *>g.A, r0, r1)
    else:
        _gemm_b(g, <const uint8_t *>g.A, r0, r1)


def make_igemm_step(adtype, size_t A, Py_ssize_t a_size, bdtype, size_t B, Py_ssize_t b_size,
                    size_t C, Py_ssize_t c_size, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                    a_off, b_off, c_off, size_t za=0, Py_ssize_t za_count=1, za_off=None,
                    size_t zb=0, Py_ssize_t zb_count=1, keep=None):
    """Step of C[b] = (A[b] - za) @ (B[b] - zb) in int32 for every batch entry b: A[b] is
    M x K at A + a_off[b], B[b] K x N at B + b_off[b], C[b] M x N at C + c_off[b] (element
    offsets; a_size, b_size, c_size: the elements each buffer holds).  za (A's type) holds
    1 value or za_count values read at za_off[b] + m (per row); zb (B's type) 1 value or
    N (per column).  Zero-point address 0: none."""
    cdef Step step
    cdef GemmArgs *g
    cdef int at = _code(adtype, (T_INT8, T_UINT8))
    cdef int bt = _code(bdtype, (T_INT8, T_UINT8, T_INT32))
    if A == 0 or B == 0 or C == 0 or M < 0 or N < 0 or K < 0:
        raise ValueError(f"igemm: addresses or sizes ({M}, {N}, {K})")
    aoff = np.ascontiguousarray(a_off, np.int64)
    batch = aoff.shape[0] if aoff.ndim == 1 else -1
    aoff = _check_offsets("a_off", aoff, batch, M * K, a_size)
    boff = _check_offsets("b_off", b_off, batch, K * N, b_size)
    coff = _check_offsets("c_off", c_off, batch, M * N, c_size)
    zoff = _check_offsets("za_off", np.zeros(batch, np.int64) if za_off is None else za_off,
                          batch, M if za_count > 1 else 1, za_count)
    if za_count != 1 and za_off is None and za_count != M:
        raise ValueError(f"za: {za_count} values for {M} rows")
    if zb_count not in (1, N):
        raise ValueError(f"zb: {zb_count} values for {N} columns")
    step = new_step(_gemm_step, sizeof(GemmArgs), batch * M * N * K > PARALLEL_WORK,
                    (keep, aoff, boff, coff, zoff))
    g = <GemmArgs *>step.args
    g.A, g.B, g.C = <const void *>A, <const void *>B, <int32_t *>C
    g.a_off = <const int64_t *><size_t>aoff.ctypes.data
    g.b_off = <const int64_t *><size_t>boff.ctypes.data
    g.c_off = <const int64_t *><size_t>coff.ctypes.data
    g.za_off = <const int64_t *><size_t>zoff.ctypes.data
    g.za, g.zb = <const void *>za, <const void *>zb
    g.za_step = 1 if za_count > 1 else 0
    g.zb_step = 1 if zb_count > 1 else 0
    g.batch, g.M, g.N, g.K = batch, M, N, K
    g.atype, g.btype = at, bt
    step.label = "igemm"
    return step


# ---------------------------------------------------------------------------------------
# im2col of an integer image, its zero point subtracted.

cdef struct Im2colArgs:
    const void *x
    int32_t *col
    const void *zx              # NULL or one value of x's type
    int xtype
    Py_ssize_t N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW


cdef void _im2col_rows(const Im2colArgs *a, const a_t *x, Py_ssize_t r0,
                       Py_ssize_t r1) noexcept nogil:
    """Rows [r0, r1) of col, row r = (n * C + c) * KH * KW + ky * KW + kx: group g's rows
    for image n are one block, channels g * Cg to (g + 1) * Cg."""
    cdef Py_ssize_t r, rest, n_c, ky, kx, oy, ox, iy, ix
    cdef int32_t z = <int32_t>(<const a_t *>a.zx)[0] if a.zx != NULL else 0
    cdef const a_t *plane
    cdef int32_t *out
    for r in range(r0, r1):
        n_c = r // (a.KH * a.KW)          # n * C + c: the input plane
        rest = r - n_c * a.KH * a.KW
        ky = rest // a.KW
        kx = rest - ky * a.KW
        plane = x + n_c * a.H * a.W
        out = a.col + r * a.OH * a.OW
        for oy in range(a.OH):
            iy = oy * a.SH - a.PH + ky * a.DH
            if iy < 0 or iy >= a.H:
                memset(out + oy * a.OW, 0, a.OW * sizeof(int32_t))
                continue
            for ox in range(a.OW):
                ix = ox * a.SW - a.PW + kx * a.DW
                out[oy * a.OW + ox] = (<int32_t>plane[iy * a.W + ix] - z) \
                    if 0 <= ix < a.W else 0


cdef void _im2col_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const Im2colArgs *a = <const Im2colArgs *>p
    cdef Py_ssize_t r0, r1
    ppl_partition(a.N * a.C * a.KH * a.KW, tid, nthreads, &r0, &r1)
    if a.xtype == T_INT8:
        _im2col_rows(a, <const int8_t *>a.x, r0, r1)
    else:
        _im2col_rows(a, <const uint8_t *>a.x, r0, r1)


def make_im2col_step(xdtype, size_t x, size_t col, size_t zx, Py_ssize_t N, Py_ssize_t C,
                     Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t KH,
                     Py_ssize_t KW, Py_ssize_t SH, Py_ssize_t SW, Py_ssize_t PH, Py_ssize_t PW,
                     Py_ssize_t DH, Py_ssize_t DW, keep=None):
    """Step writing col (int32, N * C * KH * KW rows of OH * OW) from x (N, C, H, W) of int8
    or uint8 minus its zero point zx (address 0: none); PH, PW: the padding before."""
    cdef Step step
    cdef Im2colArgs *a
    cdef int xt = _code(xdtype, (T_INT8, T_UINT8))
    if x == 0 or col == 0 or min(N, C, H, W, OH, OW) < 0 or min(KH, KW, SH, SW, DH, DW) < 1:
        raise ValueError("im2col: addresses or geometry")
    step = new_step(_im2col_step, sizeof(Im2colArgs), N * C * KH * KW * OH * OW > PARALLEL_WORK,
                    keep)
    a = <Im2colArgs *>step.args
    a.x, a.col, a.zx, a.xtype = <const void *>x, <int32_t *>col, <const void *>zx, xt
    a.N, a.C, a.H, a.W, a.OH, a.OW = N, C, H, W, OH, OW
    a.KH, a.KW, a.SH, a.SW, a.PH, a.PW, a.DH, a.DW = KH, KW, SH, SW, PH, PW, DH, DW
    step.label = "im2col"
    return step


# ---------------------------------------------------------------------------------------
# Requantization of an int32 accumulator.

cdef struct RequantArgs:
    const int32_t *acc
    void *y
    int ytype
    Py_ssize_t rows, cols, R
    const int32_t *bias         # NULL or R values
    const float *s_row          # R values (s_row_step 1) or 1 (step 0)
    const float *s_col          # cols values (s_col_step 1) or 1 (step 0)
    const float *s_y            # one value
    const void *zy              # NULL or one value of y's type
    Py_ssize_t s_row_step, s_col_step
    double lo, hi


cdef void _requant_rows(const RequantArgs *a, q_t *y, Py_ssize_t r0,
                        Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, j, m, cols = a.cols
    cdef const int32_t *acc
    cdef q_t *out
    cdef float sr, sy = a.s_y[0], mult
    cdef double z = <double>(<const q_t *>a.zy)[0] if a.zy != NULL else 0
    cdef double lo = a.lo, hi = a.hi
    cdef int32_t b
    for r in range(r0, r1):
        m = r % a.R
        sr = a.s_row[m * a.s_row_step]
        b = a.bias[m] if a.bias != NULL else 0
        acc = a.acc + r * cols
        out = y + r * cols
        if a.s_col_step == 0:
            mult = (sr * a.s_col[0]) / sy
            for j in range(cols):
                out[j] = <q_t>quantize_f64(<double>(acc[j] + b) * mult, z, lo, hi)
        else:
            for j in range(cols):
                mult = (sr * a.s_col[j]) / sy
                out[j] = <q_t>quantize_f64(<double>(acc[j] + b) * mult, z, lo, hi)


cdef void _requant_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RequantArgs *a = <const RequantArgs *>p
    cdef Py_ssize_t r0, r1
    ppl_partition(a.rows, tid, nthreads, &r0, &r1)
    if a.ytype == T_INT8:
        _requant_rows(a, <int8_t *>a.y, r0, r1)
    else:
        _requant_rows(a, <uint8_t *>a.y, r0, r1)


def make_requant_step(ydtype, size_t acc, size_t y, Py_ssize_t rows, Py_ssize_t cols,
                      Py_ssize_t R, size_t s_row, Py_ssize_t s_row_count, size_t s_col,
                      Py_ssize_t s_col_count, size_t s_y, size_t zy=0, size_t bias=0,
                      keep=None):
    """Step of y[r, j] = saturate(rint((acc[r, j] + bias[r % R]) * s) + zy) into int8 or
    uint8, s = (s_row[r % R] * s_col[j]) / s_y in float32; s_row holds 1 or R values, s_col
    1 or cols; bias (int32, R values) and zy (y's type, 1 value) may be 0: none."""
    cdef Step step
    cdef RequantArgs *a
    cdef int yt = _code(ydtype, (T_INT8, T_UINT8))
    if acc == 0 or y == 0 or s_row == 0 or s_col == 0 or s_y == 0 or rows < 0 or cols < 0 \
            or R < 1 or rows % R:
        raise ValueError(f"requant: addresses or geometry ({rows}, {cols}, {R})")
    if s_row_count not in (1, R) or s_col_count not in (1, cols):
        raise ValueError(f"requant: {s_row_count} row scales for {R} rows or {s_col_count} "
                         f"column scales for {cols} columns")
    step = new_step(_requant_step, sizeof(RequantArgs), rows * cols > PARALLEL_WORK, keep)
    a = <RequantArgs *>step.args
    a.acc, a.y, a.ytype = <const int32_t *>acc, <void *>y, yt
    a.rows, a.cols, a.R = rows, cols, R
    a.bias = <const int32_t *>bias
    a.s_row, a.s_col, a.s_y = <const float *>s_row, <const float *>s_col, <const float *>s_y
    a.s_row_step = 1 if s_row_count > 1 else 0
    a.s_col_step = 1 if s_col_count > 1 else 0
    a.zy = <const void *>zy
    a.lo, a.hi = _RANGES[yt]
    step.label = "requant"
    return step


# ---------------------------------------------------------------------------------------
# DynamicQuantizeLinear's scale and zero point.

cdef struct MinMaxArgs:
    const float *x
    Py_ssize_t n
    float *scale
    uint8_t *zp


cdef void _minmax_step(const void *p, int tid, int nthreads) noexcept nogil:
    """scale = (max(x, 0) - min(x, 0)) / 255 (1 / 255 when both are 0), zero point =
    saturate(rint(-min / scale)) in [0, 255], all in float32 as the reference.  NaN among
    numbers is passed over (as ONNX Runtime); x all NaN gives scale NaN and zero point 255,
    and so does a zero point that is NaN (min -inf: inf / inf), as the reference and ONNX
    Runtime give (they made finite zeros of a NaN activation downstream)."""
    cdef const MinMaxArgs *a = <const MinMaxArgs *>p
    cdef float lo = 0, hi = 0, v, span, q = 255, one = 1, zero_point
    cdef bint numbers = a.n == 0
    cdef Py_ssize_t i
    for i in range(a.n):
        v = a.x[i]
        lo = v if v < lo else lo
        hi = v if v > hi else hi
        numbers = numbers | (v == v)
    if not numbers:
        a.scale[0] = NAN
        a.zp[0] = 255
        return
    span = one if hi == lo else hi - lo
    a.scale[0] = span / q
    zero_point = -lo / a.scale[0]
    a.zp[0] = 255 if zero_point != zero_point else <uint8_t>quantize_f32(zero_point, 0, 0, 255)


def make_minmax_step(size_t x, Py_ssize_t n, size_t scale, size_t zp, keep=None):
    """Serial step writing DynamicQuantizeLinear's float32 scale and uint8 zero point of
    the n float32 values at x (one pass over x; the quantization is a _quantize step)."""
    cdef Step step
    cdef MinMaxArgs *a
    if x == 0 or scale == 0 or zp == 0 or n < 0:
        raise ValueError("minmax: addresses or size")
    step = new_step(_minmax_step, sizeof(MinMaxArgs), False, keep)
    a = <MinMaxArgs *>step.args
    a.x, a.n, a.scale, a.zp = <const float *>x, n, <float *>scale, <uint8_t *>zp
    step.label = "minmax"
    return step


# ---------------------------------------------------------------------------------------
# Test wrappers (the kernels' own tests; the ops build the same steps).

def igemm(a, b, za=None, zb=None, int num_threads=1):
    """(a - za) @ (b - zb) in int32 for 2-D a (int8/uint8) and b (int8/uint8/int32); za
    scalar or per row, zb scalar or per column."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    M, K = a.shape
    N = b.shape[1]
    c = np.empty((M, N), np.int32)
    za = None if za is None else np.ascontiguousarray(za, a.dtype).reshape(-1)
    zb = None if zb is None else np.ascontiguousarray(zb, b.dtype).reshape(-1)
    step = make_igemm_step(a.dtype, a.ctypes.data, a.size, b.dtype, b.ctypes.data, b.size,
                           c.ctypes.data, c.size, M, N, K, [0], [0], [0],
                           0 if za is None else za.ctypes.data, 1 if za is None else za.size,
                           None, 0 if zb is None else zb.ctypes.data,
                           1 if zb is None else zb.size, (a, b, c, za, zb))
    run_steps([step], num_threads)
    return c
