# QuantizeLinear and DequantizeLinear as compiled steps of the run plan.
#
#     quantize     y[o, c, i] = saturate(round_half_even(x / scale[c]) + zero_point[c])
#     dequantize   y[o, c, i] = (x - zero_point[c]) * scale[c]
#
# x is viewed as (outer, C, inner): C = 1 for a per-tensor scale, the quantized axis for a
# per-axis one.  The integer side is int8, uint8, int16 or uint16 (int32 too for
# dequantize).  Rounding is the default IEEE rounding (to nearest, ties to even), done with
# the magic-number trick of _quant_round.pxi (shared with _quant_int), so the loop stays
# plain arithmetic.  Baseline flags: one module for every tier.

from libc.stdint cimport int8_t, uint8_t, int16_t, uint16_t, int32_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_quant_round.pxi"

ctypedef fused qint:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t

cdef enum:
    GRAIN = 65536

_TYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int16): 2,
          np.dtype(np.uint16): 3, np.dtype(np.int32): 4}
_RANGES = {0: (-128, 127), 1: (0, 255), 2: (-32768, 32767), 3: (0, 65535),
           4: (-2147483648, 2147483647)}


cdef struct QArgs:
    const float *x              # quantize: x; dequantize: y
    void *q                     # quantize: y; dequantize: x
    const float *scale          # C values
    const void *zp              # NULL, or C values of the integer type
    Py_ssize_t outer, C, inner
    int qtype
    float lo, hi                # the integer type's range


cdef void _quantize_run(const QArgs *a, qint *q, Py_ssize_t start, Py_ssize_t n,
                        Py_ssize_t c) noexcept nogil:
    """q[start:start+n] from x[start:start+n], all with scale and zero point c."""
    cdef Py_ssize_t i
    cdef const float *x = a.x + start
    cdef qint *y = q + start
    cdef float s = a.scale[c], z = <float>(<const qint *>a.zp)[c] if a.zp != NULL else 0
    cdef float lo = a.lo, hi = a.hi
    for i in range(n):
        y[i] = <qint>quantize_f32(x[i] / s, z, lo, hi)


cdef void _dequantize_run(const QArgs *a, const qint *q, Py_ssize_t start, Py_ssize_t n,
                          Py_ssize_t c) noexcept nogil:
    cdef Py_ssize_t i
    cdef float *y = <float *>a.x + start
    cdef const qint *x = q + start
    cdef float s = a.scale[c]
    cdef float z = <float>(<const qint *>a.zp)[c] if a.zp != NULL else 0
    for i in range(n):
        # In float, as the reference computes it for 8- and 16-bit types (exact there).
        y[i] = (<float>x[i] - z) * s


cdef void _quantize_rows(const QArgs *a, qint *q, int tid, int nthreads) noexcept nogil:
    """This thread's share: element ranges per tensor scale, (outer, C) rows per axis."""
    cdef Py_ssize_t r0, r1, r
    if a.C == 1:
        ppl_partition(a.outer * a.inner, tid, nthreads, &r0, &r1)
        _quantize_run(a, q, r0, r1 - r0, 0)
        return
    ppl_partition(a.outer * a.C, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        _quantize_run(a, q, r * a.inner, a.inner, r % a.C)


cdef void _dequantize_rows(const QArgs *a, const qint *q, int tid, int nthreads) noexcept nogil:
    cdef Py_ssize_t r0, r1, r
    if a.C == 1:
        ppl_partition(a.outer * a.inner, tid, nthreads, &r0, &r1)
        _dequantize_run(a, q, r0, r1 - r0, 0)
        return
    ppl_partition(a.outer * a.C, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        _dequantize_run(a, q, r * a.inner, a.inner, r % a.C)


cdef void _quantize_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const QArgs *a = <const QArgs *>p
    if a.qtype == 0:
        _quantize_rows(a, <int8_t *>a.q, tid, nthreads)
    elif a.qtype == 1:
        _quantize_rows(a, <uint8_t *>a.q, tid, nthreads)
    elif a.qtype == 2:
        _quantize_rows(a, <int16_t *>a.q, tid, nthreads)
    else:
        _quantize_rows(a, <uint16_t *>a.q, tid, nthreads)


cdef void _dequantize_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const QArgs *a = <const QArgs *>p
    if a.qtype == 0:
        _dequantize_rows(a, <const int8_t *>a.q, tid, nthreads)
    elif a.qtype == 1:
        _dequantize_rows(a, <const uint8_t *>a.q, tid, nthreads)
    elif a.qtype == 2:
        _dequantize_rows(a, <const int16_t *>a.q, tid, nthreads)
    elif a.qtype == 3:
        _dequantize_rows(a, <const uint16_t *>a.q, tid, nthreads)
    else:
        _dequantize_rows(a, <const int32_t *>a.q, tid, nthreads)


def make_quantize_step(bint quantize, qdtype, size_t x, size_t q, size_t scale, size_t zp,
                       Py_ssize_t outer, Py_ssize_t C, Py_ssize_t inner, keep=None):
    """Step of QuantizeLinear (float32 x -> integer q) or DequantizeLinear (q -> float32 x)
    over (outer, C, inner) with C scales and zero points (zp 0: none)."""
    cdef Step step
    cdef QArgs *a
    dt = np.dtype(qdtype)
    if dt not in _TYPES or (quantize and _TYPES[dt] == 4):
        raise ValueError(f"{'quantize' if quantize else 'dequantize'} to {dt}: not supported")
    if x == 0 or q == 0 or scale == 0 or outer < 0 or C < 1 or inner < 0:
        raise ValueError(f"quantize geometry ({outer}, {C}, {inner}) or addresses")
    step = new_step(_quantize_step if quantize else _dequantize_step, sizeof(QArgs),
                    outer * C * inner > GRAIN, keep)
    a = <QArgs *>step.args
    a.x, a.q = <const float *>x, <void *>q
    a.scale, a.zp = <const float *>scale, <const void *>zp
    a.outer, a.C, a.inner = outer, C, inner
    a.qtype = _TYPES[dt]
    a.lo, a.hi = _RANGES[a.qtype]
    return step


def quantize_fp32(x, scale, zp, qdtype, Py_ssize_t axis=-1, int num_threads=1):
    """Test wrapper: QuantizeLinear of contiguous float32 x; scale (and zp) per tensor, or
    per axis ``axis``."""
    x = np.ascontiguousarray(x, np.float32)
    scale = np.ascontiguousarray(scale, np.float32).reshape(-1)
    zp = None if zp is None else np.ascontiguousarray(zp, qdtype).reshape(-1)
    y = np.empty(x.shape, qdtype)
    outer, C, inner = _geometry(x.shape, scale.size, axis)
    run_steps([make_quantize_step(True, qdtype, x.ctypes.data, y.ctypes.data,
                                  scale.ctypes.data, 0 if zp is None else zp.ctypes.data,
                                  outer, C, inner, (x, y, scale, zp))], num_threads)
    return y


def dequantize_fp32(q, scale, zp, Py_ssize_t axis=-1, int num_threads=1):
    """Test wrapper: DequantizeLinear of a contiguous integer q."""
    q = np.ascontiguousarray(q)
    scale = np.ascontiguousarray(scale, np.float32).reshape(-1)
    zp = None if zp is None else np.ascontiguousarray(zp, q.dtype).reshape(-1)
    y = np.empty(q.shape, np.float32)
    outer, C, inner = _geometry(q.shape, scale.size, axis)
    run_steps([make_quantize_step(False, q.dtype, y.ctypes.data, q.ctypes.data,
                                  scale.ctypes.data, 0 if zp is None else zp.ctypes.data,
                                  outer, C, inner, (q, y, scale, zp))], num_threads)
    return y


def _geometry(shape, Py_ssize_t count, Py_ssize_t axis):
    size = int(np.prod(shape)) if len(shape) else 1
    if count == 1:
        return 1, 1, size
    axis = axis % len(shape)
    return (int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:])))
