# Broadcasting passes with one to three inputs over one contiguous output, for the modules
# that include this file (_logic.pyx for any element type, _binmath_fp32_<isa>.pyx for the
# float32 math).  Same design as _eltwise_fp32.pxi's binary passes:
#
# - the output is collapsed to rows x inner (size-1 dims dropped, dims contiguous in every
#   input merged), and an odometer walks the outer dims once per thread share;
# - a pass computes y = f(x0, x1, x2) over one range of the output through a row function
#   of its module, called with each input's element stride along the inner dim (1, 0 for a
#   broadcast scalar, or anything): the module writes one loop per stride pattern so that
#   the common ones vectorise;
# - a step runs its passes in order over the same share of the output, so a later pass may
#   read y at the positions it writes (Max of several inputs: y = max(y, x_k)) with no
#   barrier; shares are whole 16-element groups, so no two threads write one cache line.

from libc.string cimport memcpy, memset
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as np

cdef enum:
    NARY_MAX_DIMS = 8
    NARY_MAX_IN = 3
    NARY_SPLIT = 16
    # Below this many elements of work a step is serial: a fork and join cost more.
    NARY_PARALLEL_MIN = 65536


ctypedef void (*nary_row_t)(int op, const char **src, const Py_ssize_t *stride, char *y,
                            Py_ssize_t n) noexcept nogil


cdef struct NPass:
    nary_row_t row
    int op
    int nin
    const char *src[NARY_MAX_IN]
    Py_ssize_t itemsize[NARY_MAX_IN]
    int ndim                        # collapsed output dims, the last one the inner row
    Py_ssize_t shape[NARY_MAX_DIMS]
    Py_ssize_t st[NARY_MAX_IN * NARY_MAX_DIMS]   # element strides, input k at k * MAX_DIMS


cdef struct _NStepArgs:
    char *y
    Py_ssize_t y_itemsize
    Py_ssize_t size
    Py_ssize_t npasses
    const NPass *passes


cdef inline void _nary_share(Py_ssize_t n, int tid, int nthreads, Py_ssize_t *b,
                             Py_ssize_t *e) noexcept nogil:
    """Thread tid's share [b, e) of n elements, cut at multiples of NARY_SPLIT."""
    ppl_partition((n + NARY_SPLIT - 1) // NARY_SPLIT, tid, nthreads, b, e)
    b[0] = min(b[0] * NARY_SPLIT, n)
    e[0] = min(e[0] * NARY_SPLIT, n)


cdef void _nary_range(const NPass *p, char *y, Py_ssize_t ysize, Py_ssize_t begin,
                      Py_ssize_t end) noexcept nogil:
    """Output elements [begin, end): whole and partial rows of the collapsed layout."""
    cdef int inner = p.ndim - 1, d, k, nin = p.nin
    cdef Py_ssize_t cols = p.shape[inner], r, c, cnt, rem, pos = begin
    cdef Py_ssize_t idx[NARY_MAX_DIMS]
    cdef Py_ssize_t off[NARY_MAX_IN]
    cdef Py_ssize_t inner_st[NARY_MAX_IN]
    cdef const char *src[NARY_MAX_IN]
    if begin >= end:
        return
    for k in range(nin):
        off[k] = 0
        inner_st[k] = p.st[k * NARY_MAX_DIMS + inner]
    r = begin // cols
    c = begin - r * cols
    rem = r
    for d in range(inner - 1, -1, -1):
        idx[d] = rem % p.shape[d]
        rem = rem // p.shape[d]
        for k in range(nin):
            off[k] += idx[d] * p.st[k * NARY_MAX_DIMS + d]
    while True:
        cnt = min(cols - c, end - pos)
        for k in range(nin):
            src[k] = p.src[k] + (off[k] + c * inner_st[k]) * p.itemsize[k]
        p.row(p.op, src, inner_st, y + pos * ysize, cnt)
        pos += cnt
        if pos >= end:
            break
        c = 0
        d = inner - 1
        while d >= 0:
            idx[d] += 1
            for k in range(nin):
                off[k] += p.st[k * NARY_MAX_DIMS + d]
            if idx[d] < p.shape[d]:
                break
            for k in range(nin):
                off[k] -= p.shape[d] * p.st[k * NARY_MAX_DIMS + d]
            idx[d] = 0
            d -= 1


cdef void _nary_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _NStepArgs *args = <const _NStepArgs *>a
    cdef Py_ssize_t b, e, k
    _nary_share(args.size, tid, nthreads, &b, &e)
    if b >= e:
        return
    for k in range(args.npasses):
        _nary_range(&args.passes[k], args.y, args.y_itemsize, b, e)


cdef bytes nary_pass(nary_row_t row, int op, addresses, lengths, itemsizes, out_shape,
                     strides):
    """A pass as bytes: y = row(op; inputs) over ``out_shape``; ``strides[k]`` are input k's
    element strides over the output's dims (0 = broadcast), checked against ``lengths``."""
    cdef NPass p
    cdef Py_ssize_t ndim = len(out_shape), d, k, nin = len(addresses), dim, end, merged
    if nin < 1 or nin > NARY_MAX_IN or ndim > NARY_MAX_DIMS:
        raise ValueError(f"{nin} inputs of rank {ndim}: expected 1 to {NARY_MAX_IN} inputs "
                         f"of rank at most {NARY_MAX_DIMS}")
    if len(lengths) != nin or len(itemsizes) != nin or len(strides) != nin:
        raise ValueError("addresses, lengths, itemsizes and strides need one entry per input")
    memset(&p, 0, sizeof(NPass))
    p.row = row
    p.op = op
    p.nin = <int>nin
    size = 1
    for d in range(ndim):
        size *= int(out_shape[d])
    for k in range(nin):
        p.src[k] = <const char *><size_t>addresses[k]
        p.itemsize[k] = itemsizes[k]
        if len(strides[k]) != ndim:
            raise ValueError(f"input {k}: {len(strides[k])} strides for rank {ndim}")
        end = 0
        for d in range(ndim):
            if out_shape[d] < 0 or strides[k][d] < 0:
                raise ValueError(f"dim {d}: size {out_shape[d]}, stride {strides[k][d]}: "
                                 "expected non-negative values")
            end += (out_shape[d] - 1) * strides[k][d]
        if size > 0 and (end >= lengths[k] or addresses[k] == 0):
            raise ValueError(f"input {k}: shape {list(out_shape)} with strides "
                             f"{list(strides[k])} reaches element {end}, it has {lengths[k]}")
    for d in range(ndim):
        dim = out_shape[d]
        if dim == 1:
            continue
        merged = p.ndim > 0
        for k in range(nin):
            if merged and p.st[k * NARY_MAX_DIMS + p.ndim - 1] != strides[k][d] * dim:
                merged = False
        if merged:
            p.shape[p.ndim - 1] *= dim
            for k in range(nin):
                p.st[k * NARY_MAX_DIMS + p.ndim - 1] = strides[k][d]
        else:
            p.shape[p.ndim] = dim
            for k in range(nin):
                p.st[k * NARY_MAX_DIMS + p.ndim] = strides[k][d]
            p.ndim += 1
    if p.ndim == 0:
        p.shape[0] = 1
        p.ndim = 1
    return (<const char *>&p)[:sizeof(NPass)]


cdef Step nary_step(size_t y, Py_ssize_t y_itemsize, Py_ssize_t size, passes, keep):
    """A step running ``passes`` (bytes from nary_pass, each over ``size`` elements) in order
    over the contiguous output y."""
    cdef Py_ssize_t k, npasses = len(passes)
    cdef bytes blob
    if npasses == 0:
        raise ValueError("a step needs at least one pass")
    if size > 0 and y == 0:
        raise ValueError("y must be a valid address")
    table = np.empty(max(1, npasses * sizeof(NPass)), np.uint8)
    cdef unsigned char[::1] t = table
    for k in range(npasses):
        blob = passes[k]
        if len(blob) != sizeof(NPass):
            raise ValueError(f"pass {k} is not a pass of this module")
        memcpy(&t[k * sizeof(NPass)], <const char *>blob, sizeof(NPass))
    cdef Step step = new_step(_nary_step, sizeof(_NStepArgs),
                              size * npasses >= NARY_PARALLEL_MIN, (table, keep))
    cdef _NStepArgs *args = <_NStepArgs *>step.args
    args.y = <char *>y
    args.y_itemsize = y_itemsize
    args.size = size
    args.npasses = npasses
    args.passes = <const NPass *>&t[0]
    return step
