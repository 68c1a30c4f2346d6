# Index ops of any element type, as compiled steps of the run plan.
#
# Data moves by element size; only the ops that compare or combine values (ScatterND and
# ScatterElements reductions, TopK, NonZero) look at the element type, through a fused type
# that Cython specialises once per numeric type.  One module, baseline flags.
#
#   make_gather_elements_step  y[p] = data[p with p[axis] = indices[p]]
#   make_gather_nd_step        y[b, j] = data[b, indices[b, j, :]] (slices)
#   make_scatter_nd_step       y = data; y[indices[j]] (op)= updates[j]
#   make_scatter_elements_step y = data; y[p with p[axis] = indices[p]] (op)= updates[p]
#   make_onehot_step           y[o, d, i] = on if indices[o, i] == d else off
#   make_trilu_step            y = x with the elements below / above diagonal k zeroed
#   make_eye_step              y = ones on diagonal k, zeros elsewhere
#   make_reverse_sequence_step y[t, b] = x[lens[b] - 1 - t, b] for t < lens[b], else x[t, b]
#   make_nonzero_step          y[k, n] = coordinate k of the n-th non-zero element
#   make_topk_step             the k largest / smallest along an axis, and their indices
#
# Indices read from memory at run time are never trusted: an index outside its dim (after
# adding the dim to a negative one) makes a gather write zeros and a scatter skip the update,
# so no step reads or writes out of bounds.  Constant indices are checked by the op, with a
# pplpy error, before a step is made.
#
# Parallel steps split the output: a scatter thread copies its share of data and applies, in
# order, the updates that land in its share, so duplicates reduce in the order ONNX gives
# and no barrier is needed.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

from pplpy.runtime.step cimport (Step, new_step, ppl_fault, ppl_fault_record, ppl_partition,
                                 set_fault)
from pplpy.engines.x86.impls.fault_text import valid_indices
from pplpy.runtime.step import run_steps


include "_onnx_types.pxi"

cdef enum:
    PARALLEL_ELEMENTS = 65536
    MAX_RANK = 16
    # reductions
    R_NONE = 0
    R_ADD = 1
    R_MUL = 2
    R_MAX = 3
    R_MIN = 4

REDUCTIONS = {"none": R_NONE, "add": R_ADD, "mul": R_MUL, "max": R_MAX, "min": R_MIN}
NUMERIC = (T_FLOAT, T_UINT8, T_INT8, T_UINT16, T_INT16, T_INT32, T_INT64, T_DOUBLE, T_UINT32,
           T_UINT64)

ctypedef fused num_t:
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


cdef inline int64_t read_index(const void *p, Py_ssize_t i, int size) noexcept nogil:
    if size == 8:
        return (<const int64_t *>p)[i]
    return (<const int32_t *>p)[i]


cdef inline int64_t read_any(const void *p, Py_ssize_t i, int code) noexcept nogil:
    """Element i of a numeric tensor as an integer (floats truncate toward zero)."""
    if code == T_INT64:
        return (<const int64_t *>p)[i]
    if code == T_INT32:
        return (<const int32_t *>p)[i]
    if code == T_FLOAT:
        return <int64_t>(<const float *>p)[i]
    if code == T_DOUBLE:
        return <int64_t>(<const double *>p)[i]
    if code == T_INT8:
        return (<const int8_t *>p)[i]
    if code == T_UINT8 or code == T_BOOL:
        return (<const uint8_t *>p)[i]
    if code == T_INT16:
        return (<const int16_t *>p)[i]
    if code == T_UINT16:
        return (<const uint16_t *>p)[i]
    if code == T_UINT32:
        return (<const uint32_t *>p)[i]
    return <int64_t>(<const uint64_t *>p)[i]


cdef inline bint in_dim(int64_t *idx, Py_ssize_t dim) noexcept nogil:
    """Normalise a negative index; whether it lies in [0, dim)."""
    if idx[0] < 0:
        idx[0] += dim
    return 0 <= idx[0] < dim


def _parallel(Py_ssize_t n):
    return n >= PARALLEL_ELEMENTS


def _check_sizes(*sizes):
    for s in sizes:
        if s < 0:
            raise ValueError(f"negative size in {list(sizes)}")


cdef int _set_dims(Py_ssize_t *out, dims) except -1:
    cdef Py_ssize_t k
    if len(dims) > MAX_RANK:
        raise ValueError(f"rank {len(dims)} is more than pplpy's {MAX_RANK}")
    for k in range(len(dims)):
        out[k] = dims[k]
    return 0


# -- reductions -------------------------------------------------------------------------

cdef inline void reduce_typed(num_t *d, const num_t *u, Py_ssize_t n, int mode) noexcept nogil:
    cdef Py_ssize_t i
    if mode == R_ADD:
        for i in range(n):
            d[i] = d[i] + u[i]
    elif mode == R_MUL:
        for i in range(n):
            d[i] = d[i] * u[i]
    elif mode == R_MAX:
        for i in range(n):
            if u[i] > d[i]:
                d[i] = u[i]
    else:
        for i in range(n):
            if u[i] < d[i]:
                d[i] = u[i]


cdef void apply_update(char *d, const char *u, Py_ssize_t n, Py_ssize_t es, int mode,
                       int code) noexcept nogil:
    """d[:n] (op)= u[:n]; R_NONE copies bytes of any type."""
    if mode == R_NONE:
        memcpy(d, u, n * es)
    elif code == T_FLOAT:
        reduce_typed(<float *>d, <const float *>u, n, mode)
    elif code == T_DOUBLE:
        reduce_typed(<double *>d, <const double *>u, n, mode)
    elif code == T_INT32:
        reduce_typed(<int32_t *>d, <const int32_t *>u, n, mode)
    elif code == T_INT64:
        reduce_typed(<int64_t *>d, <const int64_t *>u, n, mode)
    elif code == T_INT8:
        reduce_typed(<int8_t *>d, <const int8_t *>u, n, mode)
    elif code == T_UINT8:
        reduce_typed(<uint8_t *>d, <const uint8_t *>u, n, mode)
    elif code == T_INT16:
        reduce_typed(<int16_t *>d, <const int16_t *>u, n, mode)
    elif code == T_UINT16:
        reduce_typed(<uint16_t *>d, <const uint16_t *>u, n, mode)
    elif code == T_UINT32:
        reduce_typed(<uint32_t *>d, <const uint32_t *>u, n, mode)
    elif code == T_UINT64:
        reduce_typed(<uint64_t *>d, <const uint64_t *>u, n, mode)


def _check_reduction(int reduction, int code):
    if reduction not in REDUCTIONS.values():
        raise ValueError(f"unknown reduction code {reduction}")
    if reduction != R_NONE and code not in NUMERIC:
        raise ValueError(f"reduction needs a numeric element type, got ONNX type {code}")


# -- GatherElements and ScatterElements -----------------------------------------------------

cdef struct ElementsArgs:
    char *dst
    const char *data
    const void *indices
    const char *updates       # ScatterElements only
    int index_size
    int code                  # element type (reductions)
    int reduction
    Py_ssize_t es
    Py_ssize_t rank
    Py_ssize_t axis
    Py_ssize_t total          # elements of the output (gather) or of data (scatter)
    Py_ssize_t count          # elements of indices
    Py_ssize_t idims[MAX_RANK]    # dims of indices
    Py_ssize_t dstrides[MAX_RANK] # element strides of data
    Py_ssize_t ddims[MAX_RANK]
    ppl_fault fault               # an index out of range, fed at run time


cdef inline Py_ssize_t element_target(const ElementsArgs *args, Py_ssize_t *idx,
                                      int64_t j) noexcept nogil:
    """Data element offset of indices position idx with idx[axis] replaced by j, or -1 (an
    index out of range, recorded)."""
    cdef Py_ssize_t k, off = 0
    cdef int64_t given = j
    if not in_dim(&j, args.ddims[args.axis]):
        ppl_fault_record(<ppl_fault *>&args.fault, given)
        return -1
    for k in range(args.rank):
        if k == args.axis:
            off += j * args.dstrides[k]
        else:
            off += idx[k] * args.dstrides[k]
    return off


cdef inline void decode(Py_ssize_t t, Py_ssize_t rank, const Py_ssize_t *dims,
                        Py_ssize_t *idx) noexcept nogil:
    cdef Py_ssize_t k = rank - 1
    while k >= 0:
        idx[k] = t % dims[k]
        t = t // dims[k]
        k -= 1


cdef inline void advance(Py_ssize_t rank, const Py_ssize_t *dims, Py_ssize_t *idx) noexcept nogil:
    cdef Py_ssize_t k = rank - 1
    while k >= 0:
        idx[k] += 1
        if idx[k] < dims[k]:
            return
        idx[k] = 0
        k -= 1


cdef inline void copy_element(char *dst, const char *src, Py_ssize_t es) noexcept nogil:
    if es == 4:
        (<uint32_t *>dst)[0] = (<const uint32_t *>src)[0]
    elif es == 8:
        (<uint64_t *>dst)[0] = (<const uint64_t *>src)[0]
    else:
        memcpy(dst, src, es)


cdef inline (Py_ssize_t, Py_ssize_t) _gather_row_f32_i64(
        const ElementsArgs *args, Py_ssize_t t, Py_ssize_t stop, Py_ssize_t col,
        Py_ssize_t base, Py_ssize_t n, Py_ssize_t step_j, Py_ssize_t step_col) noexcept nogil:
    """Elements [t, stop) of one row with 4-byte data and int64 indices, up to the first
    index out of range (left to the general loop, which zeroes it and records it); returns
    where it stopped and that element's column."""
    cdef const int64_t *ind = <const int64_t *>args.indices
    cdef const uint32_t *src = <const uint32_t *>args.data + base + col * step_col
    cdef uint32_t *dst = <uint32_t *>args.dst
    cdef int64_t j
    while t < stop:
        j = ind[t]
        if j < 0:
            j += n
        if <uint64_t>j >= <uint64_t>n:
            break
        dst[t] = src[j * step_j]
        src += step_col
        t += 1
        col += 1
    return t, col


cdef void gather_elements_step(const void *a, int tid, int nthreads) noexcept nogil:
    # Row by row along the last axis of indices: the data offset of a row's other axes is
    # summed once per row, then each element adds its index (and its column, when the axis
    # is not the last).  Element by element through every axis, DeBERTa's relative-position
    # gathers (12 x 128 x 128 from 12 x 128 x 512) took 1 ms each, 9% of the model.
    cdef const ElementsArgs *args = <const ElementsArgs *>a
    cdef Py_ssize_t b, e, t, k, off, stop, base, col, es = args.es, last = args.rank - 1
    cdef Py_ssize_t axis = args.axis, n = args.ddims[args.axis] if args.rank else 0
    cdef Py_ssize_t step_j = args.dstrides[axis] if args.rank else 0
    cdef Py_ssize_t step_col = 0 if axis == last or args.rank == 0 else args.dstrides[last]
    cdef Py_ssize_t inner = args.idims[last] if args.rank else 1
    cdef int64_t j, given
    cdef Py_ssize_t idx[MAX_RANK]
    ppl_partition(args.count, tid, nthreads, &b, &e)
    if b >= e:
        return
    decode(b, args.rank, args.idims, idx)
    t = b
    while t < e:
        base = 0
        for k in range(last):
            if k != axis:
                base += idx[k] * args.dstrides[k]
        col = idx[last] if args.rank else 0
        stop = min(e, t + inner - col)
        if es == 4 and args.index_size == 8:  # float32 by int64: the common case, typed
            t, col = _gather_row_f32_i64(args, t, stop, col, base, n, step_j, step_col)
        while t < stop:
            j = read_index(args.indices, t, args.index_size)
            given = j
            if in_dim(&j, n):
                off = base + j * step_j + col * step_col
                copy_element(args.dst + t * es, args.data + off * es, es)
            else:
                ppl_fault_record(<ppl_fault *>&args.fault, given)
                memset(args.dst + t * es, 0, es)
            t += 1
            col += 1
        if args.rank:  # the next row: the row's last column, advanced once
            idx[last] = args.idims[last] - 1
            advance(args.rank, args.idims, idx)


cdef void scatter_elements_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ElementsArgs *args = <const ElementsArgs *>a
    cdef Py_ssize_t b, e, t, off, es = args.es
    cdef Py_ssize_t idx[MAX_RANK]
    ppl_partition(args.total, tid, nthreads, &b, &e)
    if b >= e:
        return
    memcpy(args.dst + b * es, args.data + b * es, (e - b) * es)
    if args.count == 0:
        return
    decode(0, args.rank, args.idims, idx)
    for t in range(args.count):
        off = element_target(args, idx, read_index(args.indices, t, args.index_size))
        if b <= off < e:
            apply_update(args.dst + off * es, args.updates + t * es, 1, es, args.reduction,
                         args.code)
        advance(args.rank, args.idims, idx)


cdef Step _elements_step(bint scatter, size_t dst, size_t data, size_t indices, size_t updates,
                         int index_size, Py_ssize_t es, data_dims, index_dims, Py_ssize_t axis,
                         int code, int reduction):
    if index_size not in (4, 8):
        raise ValueError(f"indices must be int32 or int64 (4 or 8 bytes), got {index_size}")
    rank = len(data_dims)
    if len(index_dims) != rank or not 0 <= axis < max(rank, 1):
        raise ValueError(f"indices dims {list(index_dims)} and axis {axis} do not fit data "
                         f"dims {list(data_dims)}")
    _check_sizes(es, *data_dims, *index_dims)
    _check_reduction(reduction, code)
    for k in range(rank):
        if k != axis and index_dims[k] > data_dims[k]:
            raise ValueError(f"indices dims {list(index_dims)} exceed data dims "
                             f"{list(data_dims)} off the axis")
    total = 1
    for d in data_dims:
        total *= d
    count = 1
    for d in index_dims:
        count *= d
    cdef Step step = new_step(scatter_elements_step if scatter else gather_elements_step,
                              sizeof(ElementsArgs),
                              _parallel(total if scatter else count))
    cdef ElementsArgs *args = <ElementsArgs *>step.args
    args.dst = <char *>dst
    args.data = <const char *>data
    args.indices = <const void *>indices
    args.updates = <const char *>updates
    args.index_size = index_size
    args.code = code
    args.reduction = reduction
    args.es = es
    args.rank = rank
    args.axis = axis
    args.total = total
    args.count = count
    _set_dims(args.idims, index_dims)
    _set_dims(args.ddims, data_dims)
    s = 1
    for k in range(rank - 1, -1, -1):
        args.dstrides[k] = s
        s *= data_dims[k]
    n = data_dims[axis] if rank else 0
    set_fault(step, &args.fault, f"index {{value}} is out of range for axis {axis} of "
              f"{n} ({valid_indices(n)})")
    return step


def make_gather_elements_step(size_t dst, size_t data, size_t indices, int index_size,
                              Py_ssize_t es, data_dims, index_dims, Py_ssize_t axis):
    """Step: y (dims of indices) with y[p] = data[p with p[axis] = indices[p]]; an index out
    of range gives 0 and makes the run raise an InputError."""
    return _elements_step(False, dst, data, indices, 0, index_size, es, data_dims, index_dims,
                          axis, 0, R_NONE)


def make_scatter_elements_step(size_t dst, size_t data, size_t indices, size_t updates,
                               int index_size, Py_ssize_t es, data_dims, index_dims,
                               Py_ssize_t axis, int code, int reduction):
    """Step: y = data, then for each position p of indices in order, y[p with p[axis] =
    indices[p]] (op)= updates[p]; an index out of range is skipped and makes the run raise
    an InputError."""
    return _elements_step(True, dst, data, indices, updates, index_size, es, data_dims,
                          index_dims, axis, code, reduction)


# -- GatherND and ScatterND ----------------------------------------------------------------

cdef struct NDArgs:
    char *dst
    const char *data
    const void *indices
    const char *updates
    int index_size
    int code
    int reduction
    Py_ssize_t es
    Py_ssize_t batches        # prod(data dims[:batch_dims])
    Py_ssize_t m              # index tuples per batch
    Py_ssize_t q              # length of one tuple
    Py_ssize_t rows           # rows of data per batch: prod(dims[b:b+q])
    Py_ssize_t slice          # bytes of one row: prod(dims[b+q:]) * es
    Py_ssize_t dims[MAX_RANK] # data dims[b:b+q]
    ppl_fault fault           # an index out of range, fed at run time


cdef inline Py_ssize_t nd_row(const NDArgs *args, Py_ssize_t t) noexcept nogil:
    """Row (within its batch) addressed by index tuple t, or -1 (an index out of range,
    recorded)."""
    cdef Py_ssize_t k, row = 0
    cdef int64_t j, given
    for k in range(args.q):
        j = read_index(args.indices, t * args.q + k, args.index_size)
        given = j
        if not in_dim(&j, args.dims[k]):
            ppl_fault_record(<ppl_fault *>&args.fault, given)
            return -1
        row = row * args.dims[k] + j
    return row


cdef void gather_nd_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const NDArgs *args = <const NDArgs *>a
    cdef Py_ssize_t b, e, t, row, batch, sl = args.slice
    ppl_partition(args.batches * args.m, tid, nthreads, &b, &e)
    for t in range(b, e):
        batch = t // args.m
        row = nd_row(args, t)
        if row >= 0:
            memcpy(args.dst + t * sl, args.data + (batch * args.rows + row) * sl, sl)
        else:
            memset(args.dst + t * sl, 0, sl)


cdef void scatter_nd_step(const void *a, int tid, int nthreads) noexcept nogil:
    # Data rows are split over threads; each applies the updates landing in its rows.
    cdef const NDArgs *args = <const NDArgs *>a
    cdef Py_ssize_t b, e, t, row, sl = args.slice
    ppl_partition(args.rows, tid, nthreads, &b, &e)
    if b >= e:
        return
    memcpy(args.dst + b * sl, args.data + b * sl, (e - b) * sl)
    for t in range(args.m):
        row = nd_row(args, t)
        if b <= row < e:
            apply_update(args.dst + row * sl, args.updates + t * sl, sl // args.es, args.es,
                         args.reduction, args.code)


def _nd_step(bint scatter, size_t dst, size_t data, size_t indices, size_t updates,
             int index_size, Py_ssize_t es, data_dims, Py_ssize_t batch_dims, Py_ssize_t m,
             Py_ssize_t q, int code, int reduction):
    if index_size not in (4, 8):
        raise ValueError(f"indices must be int32 or int64 (4 or 8 bytes), got {index_size}")
    if not 0 <= batch_dims or batch_dims + q > len(data_dims) or q > MAX_RANK:
        raise ValueError(f"index tuples of {q} after {batch_dims} batch dims do not fit data "
                         f"dims {list(data_dims)}")
    _check_sizes(es, m, *data_dims)
    _check_reduction(reduction, code)
    batches = 1
    for d in data_dims[:batch_dims]:
        batches *= d
    rows = 1
    for d in data_dims[batch_dims:batch_dims + q]:
        rows *= d
    sl = es
    for d in data_dims[batch_dims + q:]:
        sl *= d
    cdef Step step = new_step(scatter_nd_step if scatter else gather_nd_step, sizeof(NDArgs),
                              _parallel((rows if scatter else batches * m) * sl // es))
    cdef NDArgs *args = <NDArgs *>step.args
    args.dst = <char *>dst
    args.data = <const char *>data
    args.indices = <const void *>indices
    args.updates = <const char *>updates
    args.index_size = index_size
    args.code = code
    args.reduction = reduction
    args.es = es
    args.batches = batches
    args.m = m
    args.q = q
    args.rows = rows
    args.slice = sl
    _set_dims(args.dims, data_dims[batch_dims:batch_dims + q])
    dims = list(data_dims[batch_dims:batch_dims + q])
    set_fault(step, &args.fault, f"index {{value}} is out of range for its dim (index tuples "
              f"address dims {dims}; an index i of dim d lies in -d to d - 1)")
    return step


def make_gather_nd_step(size_t dst, size_t data, size_t indices, int index_size, Py_ssize_t es,
                        data_dims, Py_ssize_t batch_dims, Py_ssize_t m, Py_ssize_t q):
    """Step: y[b, j] = data[b, indices[b, j, 0], ..., indices[b, j, q-1]] (a slice of the
    trailing dims) for each of the prod(dims[:batch_dims]) batches and m tuples per batch; a
    tuple out of range gives zeros and makes the run raise an InputError."""
    return _nd_step(False, dst, data, indices, 0, index_size, es, data_dims, batch_dims, m, q,
                    0, R_NONE)


def make_scatter_nd_step(size_t dst, size_t data, size_t indices, size_t updates,
                         int index_size, Py_ssize_t es, data_dims, Py_ssize_t m, Py_ssize_t q,
                         int code, int reduction):
    """Step: y = data, then y[indices[j]] (op)= updates[j] for j < m in order (each a slice
    of the dims after q); a tuple out of range is skipped and makes the run raise an
    InputError."""
    return _nd_step(True, dst, data, indices, updates, index_size, es, data_dims, 0, m, q, code,
                    reduction)


# -- OneHot --------------------------------------------------------------------------------

cdef struct OneHotArgs:
    char *dst
    const void *indices
    const char *values        # [off, on], es bytes each, read when the step runs
    int code                  # indices' element type
    Py_ssize_t es
    Py_ssize_t outer
    Py_ssize_t depth
    Py_ssize_t inner


cdef void onehot_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const OneHotArgs *args = <const OneHotArgs *>a
    cdef Py_ssize_t b, e, t, o, d, i, es = args.es
    cdef int64_t j
    cdef char *dst
    ppl_partition(args.outer * args.depth, tid, nthreads, &b, &e)
    for t in range(b, e):
        o = t // args.depth
        d = t - o * args.depth
        dst = args.dst + t * args.inner * es
        for i in range(args.inner):
            j = read_any(args.indices, o * args.inner + i, args.code)
            if j < 0:
                j += args.depth
            memcpy(dst + i * es, args.values + es if j == d else args.values, es)


def make_onehot_step(size_t dst, size_t indices, int code, size_t values, Py_ssize_t es,
                     Py_ssize_t outer, Py_ssize_t depth, Py_ssize_t inner):
    """Step: y (outer, depth, inner) = values[1] where indices[o, i] (negative counts from
    depth) equals d, values[0] elsewhere (an index out of range gives a row of off)."""
    if code not in NUMERIC and code != T_BOOL:
        raise ValueError(f"indices must be numeric, got ONNX type {code}")
    _check_sizes(es, outer, depth, inner)
    cdef Step step = new_step(onehot_step, sizeof(OneHotArgs), _parallel(outer * depth * inner))
    cdef OneHotArgs *args = <OneHotArgs *>step.args
    args.dst = <char *>dst
    args.indices = <const void *>indices
    args.values = <const char *>values
    args.code = code
    args.es = es
    args.outer = outer
    args.depth = depth
    args.inner = inner
    return step


# -- Trilu and EyeLike ---------------------------------------------------------------------

cdef struct TriluArgs:
    char *dst
    const char *src           # NULL: EyeLike (write the one pattern on the diagonal)
    const int64_t *k_at       # NULL: k below
    int64_t k
    bint upper
    Py_ssize_t es
    Py_ssize_t batch
    Py_ssize_t rows
    Py_ssize_t cols
    uint64_t one


cdef inline Py_ssize_t clamp(int64_t v, Py_ssize_t hi) noexcept nogil:
    if v < 0:
        return 0
    if v > hi:
        return hi
    return <Py_ssize_t>v


cdef void trilu_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const TriluArgs *args = <const TriluArgs *>a
    cdef Py_ssize_t b, e, t, i, lo, hi, cols = args.cols, es = args.es
    cdef int64_t k = args.k_at[0] if args.k_at != NULL else args.k
    cdef char *dst
    cdef const char *src
    ppl_partition(args.batch * args.rows, tid, nthreads, &b, &e)
    # k is clamped so i + k cannot overflow: any |k| beyond the matrix acts the same.
    if k > cols:
        k = cols
    if k < -args.rows - 1:
        k = -args.rows - 1
    for t in range(b, e):
        i = t % args.rows
        dst = args.dst + t * cols * es
        if args.src == NULL:
            memset(dst, 0, cols * es)
            if 0 <= i + k < cols:
                memcpy(dst + (i + k) * es, &args.one, es)
            continue
        src = args.src + t * cols * es
        # kept columns [lo, hi)
        if args.upper:
            lo = clamp(i + k, cols)
            hi = cols
        else:
            lo = 0
            hi = clamp(i + k + 1, cols)
        if hi < lo:
            hi = lo
        memset(dst, 0, lo * es)
        memcpy(dst + lo * es, src + lo * es, (hi - lo) * es)
        memset(dst + hi * es, 0, (cols - hi) * es)


def make_trilu_step(size_t dst, size_t src, Py_ssize_t es, Py_ssize_t batch, Py_ssize_t rows,
                    Py_ssize_t cols, size_t k_at, int64_t k, bint upper):
    """Step: y[.., i, j] = x[.., i, j] where j - i >= k (upper) or j - i <= k (lower), else 0;
    k is the int64 at ``k_at`` when the step runs (0: use ``k``)."""
    _check_sizes(es, batch, rows, cols)
    cdef Step step = new_step(trilu_step, sizeof(TriluArgs), _parallel(batch * rows * cols))
    cdef TriluArgs *args = <TriluArgs *>step.args
    args.dst = <char *>dst
    args.src = <const char *>src
    args.k_at = <const int64_t *>k_at
    args.k = k
    args.upper = upper
    args.es = es
    args.batch = batch
    args.rows = rows
    args.cols = cols
    return step


def make_eye_step(size_t dst, Py_ssize_t rows, Py_ssize_t cols, int64_t k, bytes one):
    """Step: y (rows, cols) = ``one`` (the element's bytes) where j - i == k, 0 elsewhere."""
    es = len(one)
    if es not in (1, 2, 4, 8):
        raise ValueError(f"element must be 1, 2, 4 or 8 bytes, got {es}")
    _check_sizes(rows, cols)
    cdef Step step = new_step(trilu_step, sizeof(TriluArgs), _parallel(rows * cols))
    cdef TriluArgs *args = <TriluArgs *>step.args
    args.dst = <char *>dst
    args.src = NULL
    args.k_at = NULL
    args.k = k
    args.es = es
    args.batch = 1
    args.rows = rows
    args.cols = cols
    args.one = 0
    memcpy(&args.one, <const char *>one, es)
    return step


# -- ReverseSequence -----------------------------------------------------------------------

cdef struct ReverseArgs:
    char *dst
    const char *src
    const int64_t *lens       # one per batch, read when the step runs
    bint time_major           # x is (T, B, inner) when true, (B, T, inner) otherwise
    Py_ssize_t steps          # T
    Py_ssize_t batch          # B
    Py_ssize_t row            # bytes of inner
    ppl_fault fault           # a length outside [0, T], fed at run time


cdef void reverse_sequence_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ReverseArgs *args = <const ReverseArgs *>a
    cdef Py_ssize_t b, e, t, s, n, pos, src_t, row = args.row
    cdef int64_t length
    ppl_partition(args.steps * args.batch, tid, nthreads, &b, &e)
    for pos in range(b, e):
        if args.time_major:
            s = pos // args.batch
            n = pos - s * args.batch
        else:
            n = pos // args.steps
            s = pos - n * args.steps
        length = args.lens[n]
        if length > args.steps or length < 0:  # clamped to [0, T], and reported
            ppl_fault_record(<ppl_fault *>&args.fault, length)
            length = args.steps if length > args.steps else 0
        src_t = length - 1 - s if s < length else s
        if args.time_major:
            t = src_t * args.batch + n
        else:
            t = n * args.steps + src_t
        memcpy(args.dst + pos * row, args.src + t * row, row)


def make_reverse_sequence_step(size_t dst, size_t src, size_t lens, bint time_major,
                               Py_ssize_t steps, Py_ssize_t batch, Py_ssize_t row):
    """Step: y[t, b] = x[lens[b] - 1 - t, b] for t < lens[b], x[t, b] otherwise, over the
    (T, B) or (B, T) leading dims of rows of ``row`` bytes; lens (int64) outside [0, T] are
    clamped and make the run raise an InputError."""
    _check_sizes(steps, batch, row)
    cdef Step step = new_step(reverse_sequence_step, sizeof(ReverseArgs),
                              _parallel(steps * batch * row // 4))
    cdef ReverseArgs *args = <ReverseArgs *>step.args
    args.dst = <char *>dst
    args.src = <const char *>src
    args.lens = <const int64_t *>lens
    args.time_major = time_major
    args.steps = steps
    args.batch = batch
    args.row = row
    set_fault(step, &args.fault, f"sequence length {{value}} is out of range for a time axis "
              f"of {steps} (valid: 0 to {steps})")
    return step


# -- NonZero -------------------------------------------------------------------------------

cdef struct NonZeroArgs:
    int64_t *dst              # (rank, count)
    const char *src
    int code
    Py_ssize_t es
    Py_ssize_t rank
    Py_ssize_t total
    Py_ssize_t count
    Py_ssize_t dims[MAX_RANK]


cdef inline bint nonzero_at(const NonZeroArgs *args, Py_ssize_t t) noexcept nogil:
    cdef Py_ssize_t k
    if args.code == T_FLOAT:
        return (<const float *>args.src)[t] != 0     # -0.0 is zero; NaN is not
    if args.code == T_DOUBLE:
        return (<const double *>args.src)[t] != 0
    for k in range(args.es):
        if args.src[t * args.es + k] != 0:
            return True
    return False


cdef void nonzero_step(const void *a, int tid, int nthreads) noexcept nogil:
    # Serial: the n-th non-zero's column depends on every element before it.  The count was
    # decided when the plan was made; no more than count columns are written, and any left
    # over (never, while the data is the data the plan saw) are zeroed.
    cdef const NonZeroArgs *args = <const NonZeroArgs *>a
    cdef Py_ssize_t t, k, n = 0
    cdef Py_ssize_t idx[MAX_RANK]
    for k in range(args.rank):
        idx[k] = 0
    for t in range(args.total):
        if n == args.count:
            break
        if nonzero_at(args, t):
            for k in range(args.rank):
                args.dst[k * args.count + n] = idx[k]
            n += 1
        advance(args.rank, args.dims, idx)
    while n < args.count:
        for k in range(args.rank):
            args.dst[k * args.count + n] = 0
        n += 1


def make_nonzero_step(size_t dst, size_t src, int code, Py_ssize_t es, dims, Py_ssize_t count):
    """Step: y (rank, count) int64, column n = the coordinates of the n-th non-zero element
    of x (row-major order)."""
    _check_sizes(es, count, *dims)
    cdef Step step = new_step(nonzero_step, sizeof(NonZeroArgs), False)
    cdef NonZeroArgs *args = <NonZeroArgs *>step.args
    args.dst = <int64_t *>dst
    args.src = <const char *>src
    args.code = code
    args.es = es
    args.rank = len(dims)
    _set_dims(args.dims, dims)
    total = 1
    for d in dims:
        total *= d
    args.total = total
    args.count = count
    return step


# -- TopK ----------------------------------------------------------------------------------

cdef struct TopKArgs:
    char *values
    int64_t *indices
    const char *src
    int64_t *scratch          # 2 * n per thread
    int code
    bint largest
    Py_ssize_t es
    Py_ssize_t outer
    Py_ssize_t n              # the axis
    Py_ssize_t inner
    Py_ssize_t k


cdef inline bint better(num_t a, num_t b, bint largest) noexcept nogil:
    # NaN ranks above every number (numpy.sort, onnxruntime): first for largest, last for
    # smallest.  A bare a > b is false both ways for NaN, which is no strict weak order and
    # lets the merge sort leave finite values out of order around it.
    if num_t is float or num_t is double:
        if a != a:
            return largest and b == b
        if b != b:
            return not largest
    return a > b if largest else a < b


cdef inline bint ahead(const num_t *x, Py_ssize_t stride, int64_t i, int64_t j,
                       bint largest) noexcept nogil:
    """Element i ranks before element j: the better value, or the lower index among values
    of one rank (NaN with NaN included)."""
    cdef num_t a = x[i * stride], b = x[j * stride]
    if better(a, b, largest):
        return True
    if better(b, a, largest):
        return False
    return i < j


cdef void sort_indices(const num_t *x, Py_ssize_t stride, int64_t *a, int64_t *tmp,
                       Py_ssize_t n, bint largest) noexcept nogil:
    """a[0..n) (indices into x) sorted by rank, best first (a bottom-up merge sort)."""
    cdef Py_ssize_t width = 1, lo, mid, hi, l, r, o
    cdef int64_t *swap
    cdef int64_t *start = a
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            l = lo
            r = mid
            o = lo
            while l < mid and r < hi:
                if ahead(x, stride, a[r], a[l], largest):
                    tmp[o] = a[r]
                    r += 1
                else:
                    tmp[o] = a[l]
                    l += 1
                o += 1
            while l < mid:
                tmp[o] = a[l]
                l += 1
                o += 1
            while r < hi:
                tmp[o] = a[r]
                r += 1
                o += 1
            lo += 2 * width
        swap = a
        a = tmp
        tmp = swap
        width *= 2
    if a != start:
        memcpy(start, a, n * sizeof(int64_t))


cdef inline void sift_down(const num_t *x, Py_ssize_t stride, int64_t *heap, Py_ssize_t p,
                           Py_ssize_t k, bint largest) noexcept nogil:
    """Restore the heap below p: every parent ranks after its children (the root is the
    kept element that ranks last)."""
    cdef Py_ssize_t c
    cdef int64_t t
    while True:
        c = 2 * p + 1
        if c >= k:
            return
        if c + 1 < k and ahead(x, stride, heap[c], heap[c + 1], largest):
            c += 1              # the child that ranks last
        if not ahead(x, stride, heap[p], heap[c], largest):
            return
        t = heap[p]
        heap[p] = heap[c]
        heap[c] = t
        p = c


cdef void select_row(const num_t *x, Py_ssize_t stride, int64_t *heap, Py_ssize_t n,
                     Py_ssize_t k, bint largest) noexcept nogil:
    """heap[0..k) = the indices of the k best of x[0..n) (a heap of the k best so far; an
    element replaces its root only when strictly better, since its index is higher than
    every kept one's)."""
    cdef Py_ssize_t i
    for i in range(k):
        heap[i] = i
    for i in range(k // 2 - 1, -1, -1):
        sift_down(x, stride, heap, i, k, largest)
    for i in range(k, n):
        if better(x[i * stride], x[heap[0] * stride], largest):
            heap[0] = i
            sift_down(x, stride, heap, 0, k, largest)


cdef void topk_row(const TopKArgs *args, const num_t *x, num_t *values, int64_t *scratch,
                   Py_ssize_t row) noexcept nogil:
    """One row: with k at most a quarter of the axis, the k best through a heap (n log k,
    and most elements lose one comparison with the root), then sorted; otherwise the whole
    row sorted (a merge sort of every index took 54 ms for (1, 80, 8400), k = 100)."""
    cdef Py_ssize_t o = row // args.inner, i = row - o * args.inner, j
    cdef Py_ssize_t base = o * args.n * args.inner + i, out = o * args.k * args.inner + i
    cdef Py_ssize_t n = args.n, k = args.k
    if k == 0:
        return
    if k * 4 <= n:
        select_row(x + base, args.inner, scratch, n, k, args.largest)
        sort_indices(x + base, args.inner, scratch, scratch + n, k, args.largest)
    else:
        for j in range(n):
            scratch[j] = j
        sort_indices(x + base, args.inner, scratch, scratch + n, n, args.largest)
    for j in range(k):
        values[out + j * args.inner] = x[base + scratch[j] * args.inner]
        args.indices[out + j * args.inner] = scratch[j]


cdef void topk_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const TopKArgs *args = <const TopKArgs *>a
    cdef Py_ssize_t b, e, row
    cdef int64_t *scratch = args.scratch + tid * 2 * args.n
    cdef int code = args.code
    ppl_partition(args.outer * args.inner, tid, nthreads, &b, &e)
    for row in range(b, e):
        if code == T_FLOAT:
            topk_row(args, <const float *>args.src, <float *>args.values, scratch, row)
        elif code == T_DOUBLE:
            topk_row(args, <const double *>args.src, <double *>args.values, scratch, row)
        elif code == T_INT32:
            topk_row(args, <const int32_t *>args.src, <int32_t *>args.values, scratch, row)
        elif code == T_INT64:
            topk_row(args, <const int64_t *>args.src, <int64_t *>args.values, scratch, row)
        elif code == T_INT8:
            topk_row(args, <const int8_t *>args.src, <int8_t *>args.values, scratch, row)
        elif code == T_UINT8:
            topk_row(args, <const uint8_t *>args.src, <uint8_t *>args.values, scratch, row)
        elif code == T_INT16:
            topk_row(args, <const int16_t *>args.src, <int16_t *>args.values, scratch, row)
        elif code == T_UINT16:
            topk_row(args, <const uint16_t *>args.src, <uint16_t *>args.values, scratch, row)
        elif code == T_UINT32:
            topk_row(args, <const uint32_t *>args.src, <uint32_t *>args.values, scratch, row)
        elif code == T_UINT64:
            topk_row(args, <const uint64_t *>args.src, <uint64_t *>args.values, scratch, row)


def make_topk_step(size_t values, size_t indices, size_t src, int code, Py_ssize_t outer,
                   Py_ssize_t n, Py_ssize_t inner, Py_ssize_t k, bint largest, int num_threads):
    """Step: for x viewed as (outer, n, inner), values/indices (outer, k, inner) = the k
    largest (or smallest) along n, best first, ties by lower index.  NaN ranks above +inf."""
    if code not in NUMERIC:
        raise ValueError(f"TopK needs a numeric element type, got ONNX type {code}")
    _check_sizes(outer, n, inner, k)
    if k > n:
        raise ValueError(f"k = {k} is more than the axis holds ({n})")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    scratch = np.zeros(max(num_threads * 2 * n, 1), np.int64)
    cdef int64_t[::1] s = scratch
    cdef Step step = new_step(topk_step, sizeof(TopKArgs), _parallel(outer * n * inner),
                              scratch)
    cdef TopKArgs *args = <TopKArgs *>step.args
    args.values = <char *>values
    args.indices = <int64_t *>indices
    args.src = <const char *>src
    args.scratch = &s[0]
    args.code = code
    args.largest = largest
    args.outer = outer
    args.n = n
    args.inner = inner
    args.k = k
    return step


# -- Python-visible wrappers (tests) ------------------------------------------------------

def _address(array):
    return array.__array_interface__["data"][0]


def _code(dtype):
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def gather_elements(data, indices, int axis, y, int num_threads=1):
    run_steps([make_gather_elements_step(_address(y), _address(data), _address(indices),
                                         indices.itemsize, data.itemsize, list(data.shape),
                                         list(indices.shape), axis)], num_threads)


def scatter_elements(data, indices, updates, int axis, y, str reduction="none",
                     int num_threads=1):
    run_steps([make_scatter_elements_step(
        _address(y), _address(data), _address(indices), _address(updates), indices.itemsize,
        data.itemsize, list(data.shape), list(indices.shape), axis, _code(data.dtype),
        REDUCTIONS[reduction])], num_threads)


def gather_nd(data, indices, int batch_dims, y, int num_threads=1):
    shape = indices.shape
    q = shape[len(shape) - 1]
    m = int(np.prod(shape[batch_dims:len(shape) - 1], dtype=np.int64))
    run_steps([make_gather_nd_step(_address(y), _address(data), _address(indices),
                                   indices.itemsize, data.itemsize, list(data.shape),
                                   batch_dims, m, q)], num_threads)


def scatter_nd(data, indices, updates, y, str reduction="none", int num_threads=1):
    shape = indices.shape
    q = shape[len(shape) - 1]
    m = int(np.prod(shape[:len(shape) - 1], dtype=np.int64))
    run_steps([make_scatter_nd_step(_address(y), _address(data), _address(indices),
                                    _address(updates), indices.itemsize, data.itemsize,
                                    list(data.shape), m, q, _code(data.dtype),
                                    REDUCTIONS[reduction])], num_threads)


def topk(x, int k, int axis, values, indices, bint largest=True, int num_threads=1):
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    run_steps([make_topk_step(_address(values), _address(indices), _address(x),
                              _code(x.dtype), outer, x.shape[axis], inner, k, largest,
                              num_threads)], num_threads)


def nonzero(x, y, int num_threads=1):
    run_steps([make_nonzero_step(_address(y), _address(x), _code(x.dtype), x.itemsize,
                                 list(x.shape), y.shape[1])], num_threads)
