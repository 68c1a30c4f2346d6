# Element type conversion (Cast, CastLike) as a compiled step.
#
# One loop per (source, destination) pair: a fused source type, specialised by Cython for
# each numeric type, holds a switch over the destination with a plain C conversion loop in
# each branch, so every loop vectorises and no element goes through a switch.
#
# Semantics are C's, which are numpy's on x86: float -> int truncates toward zero; a float
# that does not fit the integer type (or NaN) gives whatever the conversion instruction gives
# (ONNX leaves it undefined); int -> narrower int wraps; anything -> bool is x != 0; bool is
# read as 0 / 1.  float16 goes through float32 on the way in and float64 on the way out, in
# chunks on the stack (both exact except int64 beyond 2^53 into float16), rounding to nearest
# even as numpy does; float32 <-> float16 itself is _float16.h's bit arithmetic, vectorised
# (gcc's _Float16 converts through libgcc an element at a time: 100x slower), other types
# into float16 go from double through _Float16 (a float step first would round twice).

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps


cdef extern from *:
    ctypedef float half "_Float16"

cdef extern from "_float16.h" nogil:
    void ppl_floats_to_halves(const float *x, uint16_t *y, Py_ssize_t n)
    void ppl_halves_to_floats(const uint16_t *x, float *y, Py_ssize_t n)

include "_onnx_types.pxi"

cdef enum:
    PARALLEL_ELEMENTS = 65536
    CHUNK = 256

# Element sizes of the types this module converts, by ONNX type number.
SIZES = {T_FLOAT16: 2, T_FLOAT: 4, T_UINT8: 1, T_INT8: 1, T_UINT16: 2, T_INT16: 2, T_INT32: 4, T_INT64: 8,
         T_BOOL: 1, T_DOUBLE: 8, T_UINT32: 4, T_UINT64: 8}

ctypedef fused src_t:
    float
    double
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    int64_t
    uint64_t


cdef void cast_from(const src_t *x, char *y, Py_ssize_t n, int to) noexcept nogil:
    cdef Py_ssize_t i
    if to == T_FLOAT:
        for i in range(n):
            (<float *>y)[i] = <float>x[i]
    elif to == T_DOUBLE:
        for i in range(n):
            (<double *>y)[i] = <double>x[i]
    elif to == T_INT32:
        for i in range(n):
            (<int32_t *>y)[i] = <int32_t>x[i]
    elif to == T_INT64:
        for i in range(n):
            (<int64_t *>y)[i] = <int64_t>x[i]
    elif to == T_INT8:
        for i in range(n):
            (<int8_t *>y)[i] = <int8_t>x[i]
    elif to == T_UINT8:
        for i in range(n):
            (<uint8_t *>y)[i] = <uint8_t>x[i]
    elif to == T_INT16:
        for i in range(n):
            (<int16_t *>y)[i] = <int16_t>x[i]
    elif to == T_UINT16:
        for i in range(n):
            (<uint16_t *>y)[i] = <uint16_t>x[i]
    elif to == T_UINT32:
        for i in range(n):
            (<uint32_t *>y)[i] = <uint32_t>x[i]
    elif to == T_UINT64:
        for i in range(n):
            (<uint64_t *>y)[i] = <uint64_t>x[i]
    elif to == T_BOOL:
        for i in range(n):
            (<uint8_t *>y)[i] = x[i] != 0


cdef void cast_any(const char *x, int code, char *y, Py_ssize_t n, int to) noexcept nogil:
    """y[:n] = x[:n] from type ``code`` to type ``to``, neither float16."""
    if code == to:
        memcpy(y, x, n * SIZE_OF(code))
    elif code == T_FLOAT:
        cast_from(<const float *>x, y, n, to)
    elif code == T_DOUBLE:
        cast_from(<const double *>x, y, n, to)
    elif code == T_INT32:
        cast_from(<const int32_t *>x, y, n, to)
    elif code == T_INT64:
        cast_from(<const int64_t *>x, y, n, to)
    elif code == T_INT8:
        cast_from(<const int8_t *>x, y, n, to)
    elif code == T_UINT8 or code == T_BOOL:
        cast_from(<const uint8_t *>x, y, n, to)
    elif code == T_INT16:
        cast_from(<const int16_t *>x, y, n, to)
    elif code == T_UINT16:
        cast_from(<const uint16_t *>x, y, n, to)
    elif code == T_UINT32:
        cast_from(<const uint32_t *>x, y, n, to)
    elif code == T_UINT64:
        cast_from(<const uint64_t *>x, y, n, to)


cdef inline Py_ssize_t SIZE_OF(int code) noexcept nogil:
    if code == T_DOUBLE or code == T_INT64 or code == T_UINT64:
        return 8
    if code == T_FLOAT or code == T_INT32 or code == T_UINT32:
        return 4
    if code == T_FLOAT16 or code == T_INT16 or code == T_UINT16:
        return 2
    return 1


cdef void cast_half(const char *x, int code, char *y, Py_ssize_t n, int to) noexcept nogil:
    """The same with float16 on one side or both, through a float / double chunk."""
    cdef float f[CHUNK]
    cdef double d[CHUNK]
    cdef Py_ssize_t b = 0, m, i
    cdef half *hy = <half *>y
    while b < n:
        m = min(n - b, <Py_ssize_t>CHUNK)
        if code == T_FLOAT16 and to == T_FLOAT16:
            memcpy(y + b * 2, x + b * 2, m * 2)
        elif code == T_FLOAT16 and to == T_FLOAT:
            ppl_halves_to_floats(<const uint16_t *>(x + b * 2), <float *>(y + b * 4), m)
        elif code == T_FLOAT16:
            ppl_halves_to_floats(<const uint16_t *>(x + b * 2), f, m)
            cast_any(<const char *>f, T_FLOAT, y + b * SIZE_OF(to), m, to)
        elif code == T_FLOAT:
            ppl_floats_to_halves(<const float *>(x + b * 4), <uint16_t *>(y + b * 2), m)
        else:
            cast_any(x + b * SIZE_OF(code), code, <char *>d, m, T_DOUBLE)
            for i in range(m):
                hy[b + i] = <half>d[i]
        b += m


cdef struct CastArgs:
    char *dst
    const char *src
    int src_type
    int dst_type
    Py_ssize_t count
    Py_ssize_t src_size
    Py_ssize_t dst_size


cdef void cast_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const CastArgs *args = <const CastArgs *>a
    cdef Py_ssize_t b, e, n
    cdef int to = args.dst_type, code = args.src_type
    cdef char *y
    cdef const char *x
    ppl_partition(args.count, tid, nthreads, &b, &e)
    if b >= e:
        return
    n = e - b
    y = args.dst + b * args.dst_size
    x = args.src + b * args.src_size
    if code == T_FLOAT16 or to == T_FLOAT16:
        cast_half(x, code, y, n, to)
    else:
        cast_any(x, code, y, n, to)


def make_cast_step(size_t dst, size_t src, Py_ssize_t count, int src_type, int dst_type):
    """Step: y[i] = (dst type) x[i] for ``count`` elements; types are ONNX TensorProto
    numbers (float, double, int8-64, uint8-64, bool)."""
    for code in (src_type, dst_type):
        if code not in SIZES:
            raise ValueError(f"cannot cast ONNX element type {code}; pplpy casts between "
                             f"{sorted(SIZES)}")
    if count < 0:
        raise ValueError(f"negative element count {count}")
    cdef Step step = new_step(cast_step, sizeof(CastArgs), count >= PARALLEL_ELEMENTS)
    cdef CastArgs *args = <CastArgs *>step.args
    args.dst = <char *>dst
    args.src = <const char *>src
    args.src_type = src_type
    args.dst_type = dst_type
    args.count = count
    args.src_size = SIZES[src_type]
    args.dst_size = SIZES[dst_type]
    return step


def cast(x, y, int num_threads=1):
    """y[...] = x converted to y's dtype (contiguous, same element count)."""
    from onnx import helper
    if x.size != y.size or not (x.flags.c_contiguous and y.flags.c_contiguous):
        raise ValueError("x and y must be contiguous with the same element count")
    run_steps([make_cast_step(y.__array_interface__["data"][0],
                              x.__array_interface__["data"][0], x.size,
                              helper.np_dtype_to_tensor_dtype(x.dtype),
                              helper.np_dtype_to_tensor_dtype(y.dtype))], num_threads)
