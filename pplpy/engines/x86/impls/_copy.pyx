# Data movement of any element type, as compiled steps of the run plan.
#
# Everything here moves bytes: the element type only sets the element size, so this is one
# module built with baseline flags (memcpy and integer copies gain nothing from a wider ISA).
#
#   make_concat_step        y = the rows of several inputs side by side (Concat on any axis
#                           in NDARRAY; one input and one row is a plain copy: Reshape,
#                           Flatten, Squeeze, Unsqueeze, Identity, Dropout, Constant)
#   make_strided_copy_step  y[i] = x[base + sum(i_k * stride_k)] (Transpose, Slice)
#   make_fill_step          y = a repeated byte pattern (ConstantOfShape, Dropout's mask)
#   make_gather_step        y[o, j] = x[o, indices[j]] rows as block copies (Gather)
#   make_channel_map_n16cx_step  each output channel of an N16CX tensor copies a chosen
#                           channel of one of several N16CX inputs, as lane runs (Concat,
#                           channel Split and Slice, ChannelShuffle); make_concat_n16cx_step
#                           (float maps of one-lane runs, a shuffle, go to _chmap_fp32)
#   make_group_step         several independent steps as one (Dropout: y and its mask)
#   make_pad_step           y[i_0, ...] = x[t_0[i_0], ...], or a value where any t_k[i_k] < 0
#                           (Pad in every mode, NDARRAY or N16CX spatial axes)
#
# Each make_*_step takes addresses (size_t) and sizes, checks them, and returns a Step;
# the Python-visible test wrappers at the bottom build the same steps from numpy arrays and
# run them with run_steps, so tests and the runtime take one code path.
#
# A step is parallel when it moves at least PARALLEL_BYTES: every thread takes a balanced
# share of the output's bytes (or rows), and no two threads write the same byte.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

from pplpy.runtime.step cimport (Step, new_step, ppl_fault, ppl_fault_record, ppl_partition,
                                 ppl_plan_step, set_fault)
from pplpy.engines.x86.impls.fault_text import valid_indices
from pplpy.runtime.step import run_steps

cdef extern from "_transpose_fp32.h" nogil:
    void ppl_transpose_block(const float *x, Py_ssize_t ldx, float *y, Py_ssize_t ldy,
                             Py_ssize_t rows, Py_ssize_t cols)


cdef enum:
    # A step moving fewer bytes runs serially: a fork costs more than it saves.
    PARALLEL_BYTES = 262144
    # Threads split byte ranges on multiples of this (one cache line each side).
    LINE = 64
    MAX_RANK = 16
    LANES = 16


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline void copy_elements(char *dst, const char *src, Py_ssize_t n, Py_ssize_t stride,
                               Py_ssize_t es) noexcept nogil:
    """dst[i] = src[i * stride] for i < n elements of es bytes (stride in bytes)."""
    cdef Py_ssize_t i
    if stride == es:
        memcpy(dst, src, n * es)
    elif es == 4:
        for i in range(n):
            (<uint32_t *>dst)[i] = (<const uint32_t *>(src + i * stride))[0]
    elif es == 8:
        for i in range(n):
            (<uint64_t *>dst)[i] = (<const uint64_t *>(src + i * stride))[0]
    elif es == 2:
        for i in range(n):
            (<uint16_t *>dst)[i] = (<const uint16_t *>(src + i * stride))[0]
    elif es == 1:
        for i in range(n):
            (<uint8_t *>dst)[i] = (<const uint8_t *>(src + i * stride))[0]
    else:
        for i in range(n):
            memcpy(dst + i * es, src + i * stride, es)


cdef inline void byte_share(Py_ssize_t total, int tid, int nthreads, Py_ssize_t *b,
                            Py_ssize_t *e) noexcept nogil:
    """Thread tid's share [b, e) of total bytes, cut on cache-line multiples."""
    ppl_partition(ceil_div(total, LINE), tid, nthreads, b, e)
    b[0] = min(b[0] * LINE, total)
    e[0] = min(e[0] * LINE, total)


def _parallel(Py_ssize_t nbytes):
    return nbytes >= PARALLEL_BYTES


# -- concat / copy ------------------------------------------------------------------------

cdef struct ConcatArgs:
    char *dst
    Py_ssize_t outer          # rows of the output
    Py_ssize_t row            # bytes of one output row: the sum of segs
    Py_ssize_t n              # inputs
    const char **srcs         # input i's row o starts at srcs[i] + o * segs[i]
    Py_ssize_t *segs


cdef void concat_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ConcatArgs *args = <const ConcatArgs *>a
    cdef Py_ssize_t b, e, o, pos, i, seg, take, skip
    byte_share(args.outer * args.row, tid, nthreads, &b, &e)
    if b >= e:
        return
    o = b // args.row
    pos = b - o * args.row        # byte position inside row o
    i = 0
    while b < e:
        seg = args.segs[i]
        if pos >= seg:            # segment i of this row lies before b
            pos -= seg
        else:
            take = min(seg - pos, e - b)
            memcpy(args.dst + b, args.srcs[i] + o * seg + pos, take)
            b += take
            pos = 0
        i += 1
        if i == args.n:
            i = 0
            o += 1


def make_concat_step(size_t dst, srcs, segs, Py_ssize_t outer):
    """Step: each of the ``outer`` output rows is input i's row o (``segs[i]`` bytes at
    ``srcs[i] + o * segs[i]``) for every i in turn.  Concat along an axis has outer =
    prod(dims[:axis]) and segs[i] = prod(dims_i[axis:]) * element size."""
    cdef Py_ssize_t n = len(srcs), i, row = 0
    if n == 0 or len(segs) != n:
        raise ValueError(f"need one segment size per input, got {len(segs)} for {n} inputs")
    if outer < 0 or any(s < 0 for s in segs):
        raise ValueError(f"negative size: outer {outer}, segments {list(segs)}")
    for s in segs:
        row += s
    cdef Step step = new_step(concat_step, sizeof(ConcatArgs) +
                              n * (sizeof(const char *) + sizeof(Py_ssize_t)),
                              _parallel(outer * row))
    cdef ConcatArgs *args = <ConcatArgs *>step.args
    args.dst = <char *>dst
    args.outer = outer if row > 0 else 0
    args.row = row
    args.n = n
    args.srcs = <const char **>(<char *>step.args + sizeof(ConcatArgs))
    args.segs = <Py_ssize_t *>(<char *>args.srcs + n * sizeof(const char *))
    for i in range(n):
        args.srcs[i] = <const char *><size_t>srcs[i]
        args.segs[i] = segs[i]
    return step


def make_copy_step(size_t dst, size_t src, Py_ssize_t nbytes, keep=None):
    """Step: memcpy(dst, src, nbytes), split over threads when big.  ``keep`` holds what
    ``src`` points into (a Constant's value)."""
    step = make_concat_step(dst, [src], [nbytes], 1)
    step.keep = keep
    return step


# -- fill ---------------------------------------------------------------------------------

cdef struct FillArgs:
    char *dst
    Py_ssize_t count          # elements
    Py_ssize_t es             # bytes per element, <= 8
    uint64_t pattern          # the element's bytes


cdef void fill_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const FillArgs *args = <const FillArgs *>a
    cdef Py_ssize_t b, e, i, es = args.es
    cdef char *dst = args.dst
    ppl_partition(args.count, tid, nthreads, &b, &e)
    if es == 4:
        for i in range(b, e):
            (<uint32_t *>dst)[i] = <uint32_t>args.pattern
    elif es == 8:
        for i in range(b, e):
            (<uint64_t *>dst)[i] = args.pattern
    elif es == 2:
        for i in range(b, e):
            (<uint16_t *>dst)[i] = <uint16_t>args.pattern
    else:
        memset(dst + b, <int>(args.pattern & 0xff), e - b)


def make_fill_step(size_t dst, Py_ssize_t count, bytes value):
    """Step: the ``count`` elements at ``dst`` each become ``value`` (1, 2, 4 or 8 bytes)."""
    cdef Py_ssize_t es = len(value)
    if es not in (1, 2, 4, 8):
        raise ValueError(f"fill value must be 1, 2, 4 or 8 bytes, got {es}")
    if count < 0:
        raise ValueError(f"negative element count {count}")
    cdef Step step = new_step(fill_step, sizeof(FillArgs), _parallel(count * es))
    cdef FillArgs *args = <FillArgs *>step.args
    cdef uint64_t pattern = 0
    memcpy(&pattern, <const char *>value, es)
    args.dst = <char *>dst
    args.count = count
    args.es = es
    args.pattern = pattern
    return step


# -- strided copy (Transpose, Slice) --------------------------------------------------------

cdef struct StridedArgs:
    char *dst                 # contiguous output, dims[0] x ... x dims[rank-1]
    const char *src           # element 0 of the output comes from here
    Py_ssize_t es
    Py_ssize_t rank           # >= 1
    Py_ssize_t dims[MAX_RANK]
    Py_ssize_t strides[MAX_RANK]   # source bytes per step along each output dim (signed)


cdef void strided_copy_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const StridedArgs *args = <const StridedArgs *>a
    cdef Py_ssize_t r = args.rank, last = args.rank - 1, es = args.es
    cdef Py_ssize_t inner = args.dims[last], inner_stride = args.strides[last]
    cdef Py_ssize_t total = 1, b, e, row, col, q, take, k
    cdef Py_ssize_t idx[MAX_RANK]
    cdef const char *src
    for k in range(r):
        total *= args.dims[k]
    ppl_partition(total, tid, nthreads, &b, &e)
    if b >= e:
        return
    # The multi-index of flat output element b, and its source address.
    row = b // inner
    col = b - row * inner
    src = args.src       # the start of the current output row's source
    q = row
    k = last - 1
    while k >= 0:
        idx[k] = q % args.dims[k]
        q = q // args.dims[k]
        src += idx[k] * args.strides[k]
        k -= 1
    while b < e:
        take = min(inner - col, e - b)
        copy_elements(args.dst + b * es, src + col * inner_stride, take, inner_stride, es)
        b += take
        col = 0
        # Next row: an odometer over dims[0 : rank-1].
        k = last - 1
        while k >= 0:
            idx[k] += 1
            src += args.strides[k]
            if idx[k] < args.dims[k]:
                break
            src -= args.strides[k] * args.dims[k]
            idx[k] = 0
            k -= 1


# A transpose whose source is contiguous along an output axis other than the last (x (R, C)
# -> y (C, R)) reads one element per source row for every output row: with rows of a few
# hundred bytes and more rows than the cache holds lines, each line is fetched again for
# every output row it serves (SegFormer's (16384, 128) -> (128, 16384) moved 3 GB/s).  The
# copy goes in TILE x TILE blocks of those two axes, each through a buffer on the stack:
# TILE contiguous runs of the source in, then the output's rows out of the buffer.  Reading
# each source line once and whole also sidesteps the cache-set conflicts of reading
# TILE lines at once from rows a power of two apart ((128, 16384) -> (16384, 128): 64 KiB).

cdef enum:
    TILE = 64
    # Both axes at least this long go in tiles (a shorter one, or the remainder past the
    # last whole tile, as a partial tile).
    MIN_TILED = 16


cdef struct TiledArgs:
    char *dst                 # contiguous output, dims[0] x ... x dims[rank-1]
    const char *src
    Py_ssize_t es
    Py_ssize_t rank           # >= 2
    Py_ssize_t a              # the output axis the source is contiguous along (< rank-1)
    Py_ssize_t dims[MAX_RANK]
    Py_ssize_t strides[MAX_RANK]      # source bytes per step along each output dim
    Py_ssize_t dst_strides[MAX_RANK]  # output bytes per step along each dim


cdef inline void copy_tile(char *dst, const char *src, Py_ssize_t rows, Py_ssize_t cols,
                           Py_ssize_t dst_row, Py_ssize_t src_col, Py_ssize_t es,
                           char *buf) noexcept nogil:
    """dst[i, j] = src[i * es + j * src_col] for a rows x cols tile (dst rows dst_row bytes
    apart, columns contiguous; the source contiguous along the rows), through ``buf``.
    4-byte elements leave the buffer in 4 x 4 register blocks (_transpose_fp32.h), others
    one at a time."""
    cdef Py_ssize_t i, j
    for j in range(cols):
        memcpy(buf + j * rows * es, src + j * src_col, rows * es)
    if es == 4:
        ppl_transpose_block(<const float *>buf, rows, <float *>dst, dst_row // 4, rows, cols)
        return
    for i in range(rows):
        copy_elements(dst + i * dst_row, buf + i * es, cols, rows * es, es)


cdef void tiled_copy_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const TiledArgs *args = <const TiledArgs *>a
    cdef Py_ssize_t last = args.rank - 1, ax = args.a, es = args.es
    cdef Py_ssize_t rows = args.dims[ax], cols = args.dims[last]
    cdef Py_ssize_t row_tiles = ceil_div(rows, TILE), col_tiles = ceil_div(cols, TILE)
    cdef Py_ssize_t outer = 1, b, e, t, q, k, o, rt, ct, r0, c0, r, c
    cdef const char *src
    cdef char *dst
    cdef uint64_t buf[TILE * TILE]    # one tile of up to 8-byte elements
    for k in range(last):
        if k != ax:
            outer *= args.dims[k]
    ppl_partition(outer * row_tiles * col_tiles, tid, nthreads, &b, &e)
    for t in range(b, e):
        ct = t % col_tiles
        q = t // col_tiles
        rt = q % row_tiles
        o = q // row_tiles
        src = args.src
        dst = args.dst
        k = last - 1
        while k >= 0:        # the outer multi-index, over every dim but ax and last
            if k != ax:
                q = o % args.dims[k]
                o = o // args.dims[k]
                src += q * args.strides[k]
                dst += q * args.dst_strides[k]
            k -= 1
        r0 = rt * TILE
        c0 = ct * TILE
        r = min(TILE, rows - r0)
        c = min(TILE, cols - c0)
        copy_tile(dst + r0 * args.dst_strides[ax] + c0 * es,
                  src + r0 * es + c0 * args.strides[last], r, c,
                  args.dst_strides[ax], args.strides[last], es, <char *>buf)


cdef Py_ssize_t tiled_axis(dims, strides, Py_ssize_t es):
    """The output axis other than the last that the source is contiguous along, when the
    last is not and both are at least MIN_TILED long; else -1 (and for elements over 8 bytes,
    which the tile buffer does not take)."""
    last = len(dims) - 1
    if last < 1 or es > 8 or strides[last] == es or dims[last] < MIN_TILED:
        return -1
    for k in range(last):
        if strides[k] == es and dims[k] >= MIN_TILED:
            return k
    return -1


def coalesce(dims, strides, Py_ssize_t es):
    """Drop size-1 dims and merge neighbours that are contiguous in the source: the fewest
    loops that describe the same copy.  Returns (dims, strides), at least one dim."""
    out_d, out_s = [], []
    for d, s in zip(dims, strides):
        if d == 1:
            continue
        last = len(out_d) - 1    # (wraparound is off: no [-1])
        if last >= 0 and out_s[last] == s * d:
            out_d[last] *= d
            out_s[last] = s
        else:
            out_d.append(d)
            out_s.append(s)
    if not out_d:
        out_d, out_s = [1], [es]
    return out_d, out_s


def strided_copy_kind(Py_ssize_t es, dims, strides):
    """"tiled" or "strided": how make_strided_copy_step copies ``dims`` read through
    ``strides`` (after merging dims), for tests and benchmarks."""
    dims, strides = coalesce(dims, strides, es)
    return "tiled" if tiled_axis(dims, strides, es) >= 0 else "strided"


def make_strided_copy_step(size_t dst, size_t src, Py_ssize_t es, dims, strides):
    """Step: contiguous y with ``dims``, y[i_0, ..., i_k] = the element at ``src`` +
    sum(i_j * strides[j]) (strides in bytes, may be negative: Slice with negative steps)."""
    cdef Py_ssize_t k, total = 1
    if len(dims) != len(strides):
        raise ValueError(f"{len(dims)} dims but {len(strides)} strides")
    if es <= 0:
        raise ValueError(f"element size must be positive, got {es}")
    for d in dims:
        if d < 0:
            raise ValueError(f"negative dim in {list(dims)}")
        total *= d
    dims, strides = coalesce(dims, strides, es)
    if total == 0:
        dims, strides = [0], [es]
    if len(dims) > MAX_RANK:
        raise ValueError(f"a strided copy of rank {len(dims)} after merging dims is more than "
                         f"pplpy's {MAX_RANK}")
    cdef Py_ssize_t a = tiled_axis(dims, strides, es)
    if a >= 0:
        return _tiled_copy_step(dst, src, es, dims, strides, a, total)
    cdef Step step = new_step(strided_copy_step, sizeof(StridedArgs), _parallel(total * es))
    cdef StridedArgs *args = <StridedArgs *>step.args
    args.dst = <char *>dst
    args.src = <const char *>src
    args.es = es
    args.rank = len(dims)
    for k in range(args.rank):
        args.dims[k] = dims[k]
        args.strides[k] = strides[k]
    return step


cdef Step _tiled_copy_step(size_t dst, size_t src, Py_ssize_t es, dims, strides,
                           Py_ssize_t a, Py_ssize_t total):
    cdef Step step = new_step(tiled_copy_step, sizeof(TiledArgs), _parallel(total * es))
    cdef TiledArgs *args = <TiledArgs *>step.args
    cdef Py_ssize_t k, run = es
    args.dst = <char *>dst
    args.src = <const char *>src
    args.es = es
    args.rank = len(dims)
    args.a = a
    for k in range(args.rank - 1, -1, -1):
        args.dims[k] = dims[k]
        args.strides[k] = strides[k]
        args.dst_strides[k] = run
        run *= dims[k]
    return step


def transpose_strides(dims, perm, Py_ssize_t es):
    """(output dims, source byte strides) of x.transpose(perm) for contiguous x of ``dims``."""
    rank = len(dims)
    in_strides = [0] * rank
    s = es
    for k in range(rank - 1, -1, -1):
        in_strides[k] = s
        s *= dims[k]
    return [dims[p] for p in perm], [in_strides[p] for p in perm]


# -- gather -------------------------------------------------------------------------------


cdef struct GatherArgs:
    char *dst
    const char *data
    const void *indices
    int index_size            # 4 or 8
    Py_ssize_t outer          # prod(data dims before axis)
    Py_ssize_t axis_dim
    Py_ssize_t m              # number of indices
    Py_ssize_t row            # bytes of prod(data dims after axis)
    ppl_fault fault           # an index out of range, fed at run time


cdef void gather_step(const void *a, int tid, int nthreads) noexcept nogil:
    # An index outside [-axis_dim, axis_dim) zero-fills its row, so no read goes out of
    # bounds, and is recorded: the run then raises an InputError naming it.  Constant and
    # host-known indices are checked, with a pplpy error, before any step is made.
    cdef const GatherArgs *args = <const GatherArgs *>a
    cdef Py_ssize_t b, e, t, o, j, idx, given, row = args.row
    ppl_partition(args.outer * args.m, tid, nthreads, &b, &e)
    for t in range(b, e):
        o = t // args.m
        j = t - o * args.m
        if args.index_size == 8:
            idx = <Py_ssize_t>(<const int64_t *>args.indices)[j]
        else:
            idx = <Py_ssize_t>(<const int32_t *>args.indices)[j]
        given = idx
        if idx < 0:
            idx += args.axis_dim
        if 0 <= idx < args.axis_dim:
            memcpy(args.dst + t * row, args.data + (o * args.axis_dim + idx) * row, row)
        else:
            memset(args.dst + t * row, 0, row)
            ppl_fault_record(<ppl_fault *>&args.fault, given)


def make_gather_step(size_t dst, size_t data, size_t indices, int index_size,
                     Py_ssize_t outer, Py_ssize_t axis_dim, Py_ssize_t m, Py_ssize_t row):
    """Step: y[o, j, :] = data[o, indices[j], :] viewing data as (outer, axis_dim, row bytes);
    a negative index counts from the end; an index out of range gives a zero row and makes
    the run raise an InputError."""
    if index_size not in (4, 8):
        raise ValueError(f"indices must be int32 or int64 (4 or 8 bytes), got {index_size}")
    if min(outer, axis_dim, m, row) < 0:
        raise ValueError(f"negative size: outer {outer}, axis {axis_dim}, indices {m}, "
                         f"row {row}")
    cdef Step step = new_step(gather_step, sizeof(GatherArgs), _parallel(outer * m * row))
    cdef GatherArgs *args = <GatherArgs *>step.args
    args.dst = <char *>dst
    args.data = <const char *>data
    args.indices = <const void *>indices
    args.index_size = index_size
    args.outer = outer
    args.axis_dim = axis_dim
    args.m = m
    args.row = row
    set_fault(step, &args.fault, f"index {{value}} is out of range for an axis of "
              f"{axis_dim} ({valid_indices(axis_dim)})")
    return step


# -- N16CX channel concat -----------------------------------------------------------------

cdef struct LaneRun:
    Py_ssize_t src            # input index; -1: zero the lanes (padding)
    Py_ssize_t block          # the input's channel block
    Py_ssize_t src_lane
    Py_ssize_t dst_lane
    Py_ssize_t count


cdef struct ConcatN16Args:
    char *dst
    Py_ssize_t batch
    Py_ssize_t out_blocks
    Py_ssize_t pixels         # S, the product of the spatial dims
    Py_ssize_t es
    const char **srcs
    const Py_ssize_t *in_blocks
    const Py_ssize_t *first_run   # runs of output block ob: [first_run[ob], first_run[ob+1])
    const LaneRun *runs


cdef void concat_n16cx_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ConcatN16Args *args = <const ConcatN16Args *>a
    cdef Py_ssize_t b, e, t, n, ob, r, r0, nr, s, es = args.es, block = args.pixels * LANES * es
    cdef const LaneRun *run
    cdef char *dst
    cdef const char *bases[LANES]     # each run's source block (NULL: padding)
    cdef const uint32_t *lanes[LANES]
    ppl_partition(args.batch * args.out_blocks, tid, nthreads, &b, &e)
    for t in range(b, e):
        n = t // args.out_blocks
        ob = t - n * args.out_blocks
        dst = args.dst + t * block
        r0 = args.first_run[ob]
        nr = args.first_run[ob + 1] - r0
        run = &args.runs[r0]
        if nr == 1 and run.count == LANES and run.src >= 0:   # a whole block: one memcpy
            memcpy(dst, args.srcs[run.src] + (n * args.in_blocks[run.src] + run.block) * block,
                   block)
            continue
        if es == 4:       # each lane's source (NULL: padding), then 16 lanes a pixel
            for r in range(nr):
                run = &args.runs[r0 + r]
                for s in range(run.count):
                    lanes[run.dst_lane + s] = (
                        NULL if run.src < 0 else <const uint32_t *>(
                            args.srcs[run.src] + (n * args.in_blocks[run.src] + run.block)
                            * block) + run.src_lane + s)
            gather_lanes(<uint32_t *>dst, lanes, args.pixels)
            continue
        for r in range(nr):
            run = &args.runs[r0 + r]
            bases[r] = (NULL if run.src < 0 else
                        args.srcs[run.src] + (n * args.in_blocks[run.src] + run.block) * block)
        # pixel by pixel: the output block is written in order
        for s in range(args.pixels):
            for r in range(nr):
                run = &args.runs[r0 + r]
                copy_lanes(dst + (s * LANES + run.dst_lane) * es,
                           bases[r] + (s * LANES + run.src_lane) * es
                           if bases[r] != NULL else NULL, run.count, es)


cdef inline void gather_lanes(uint32_t *dst, const uint32_t **lanes,
                              Py_ssize_t pixels) noexcept nogil:
    """dst[s, l] = lanes[l][s * LANES] (0 where lanes[l] is NULL): one N16CX block whose 16
    lanes come from anywhere, written pixel by pixel in order."""
    cdef Py_ssize_t s, l
    for s in range(pixels):
        for l in range(LANES):
            dst[s * LANES + l] = lanes[l][s * LANES] if lanes[l] != NULL else 0


cdef inline void copy_lanes(char *dst, const char *src, Py_ssize_t count,
                            Py_ssize_t es) noexcept nogil:
    """count lanes of es bytes from src to dst, or zeros where src is NULL."""
    cdef Py_ssize_t i
    if src == NULL:
        memset(dst, 0, count * es)
    elif es == 4:
        for i in range(count):
            (<uint32_t *>dst)[i] = (<const uint32_t *>src)[i]
    else:
        memcpy(dst, src, count * es)


def n16cx_lane_runs(sources):
    """For each output block, the runs of lanes (input, input block, input lane, output
    lane, count) that fill it, padding last.  ``sources[c]`` is the (input index, input
    channel) output channel c copies: a channel concat, split, slice or shuffle is a list of
    sources.  Neighbouring channels that stay neighbours, in one block on both sides, make
    one run."""
    total = len(sources)
    out_blocks = ceil_div(total, LANES)
    runs = [[] for _ in range(out_blocks)]
    for out, (i, j) in enumerate(sources):
        ob, dl = divmod(out, LANES)
        k, sl = divmod(j, LANES)
        block_runs = runs[ob]
        count = len(block_runs)    # (this module has wraparound off: no [-1])
        last = block_runs[count - 1] if count else None
        if (last is not None and last[0] == i and last[1] == k
                and last[2] + last[4] == sl and last[3] + last[4] == dl):
            block_runs[count - 1] = (i, k, last[2], last[3], last[4] + 1)
        else:
            block_runs.append((i, k, sl, dl, 1))
    if total % LANES:
        runs[out_blocks - 1].append((-1, 0, 0, total % LANES, LANES - total % LANES))
    return runs


def concat_sources(channels):
    """The sources of a channel concat of inputs with ``channels``."""
    return [(i, j) for i, c in enumerate(channels) for j in range(c)]


def make_concat_n16cx_step(size_t dst, srcs, channels, Py_ssize_t batch, Py_ssize_t pixels,
                           Py_ssize_t es):
    """Step: channel concat of N16CX inputs (batch, ceil(c_i/16), pixels, 16) at ``srcs``
    into the N16CX output at ``dst``; the output's padding lanes become 0."""
    if len(srcs) == 0 or len(channels) != len(srcs):
        raise ValueError(f"need one channel count per input, got {len(channels)} for "
                         f"{len(srcs)}")
    return make_channel_map_n16cx_step(dst, srcs, channels, concat_sources(channels), batch,
                                       pixels, es)


def check_channel_map(srcs, channels, sources, Py_ssize_t batch, Py_ssize_t pixels,
                      Py_ssize_t es):
    """Raise ValueError unless ``sources`` names existing channels of the inputs and the
    sizes are sane (the checks of every N16CX channel-map step)."""
    cdef Py_ssize_t n = len(srcs)
    if n == 0 or len(channels) != n:
        raise ValueError(f"need one channel count per input, got {len(channels)} for {n}")
    if min(batch, pixels, *channels) < 0 or es <= 0:
        raise ValueError(f"bad sizes: batch {batch}, pixels {pixels}, channels "
                         f"{list(channels)}, element size {es}")
    for i, j in sources:
        if not (0 <= i < n and 0 <= j < channels[i]):
            raise ValueError(f"source channel {j} of input {i} does not exist")


def make_channel_map_n16cx_step(size_t dst, srcs, channels, sources, Py_ssize_t batch,
                                Py_ssize_t pixels, Py_ssize_t es):
    """Step: output channel c of the N16CX output at ``dst`` is channel sources[c][1] of
    N16CX input sources[c][0] (inputs at ``srcs`` with ``channels`` channels each); the
    output's padding lanes become 0.  Concat, channel Split and Slice, ChannelShuffle."""
    cdef Py_ssize_t n = len(srcs), i, r, nruns, ob
    check_channel_map(srcs, channels, sources, batch, pixels, es)
    runs = n16cx_lane_runs(sources)
    out_blocks = len(runs)
    nruns = sum(len(rs) for rs in runs)
    table = np.zeros(nruns * 5 + (out_blocks + 1) + 2 * n, np.intp)   # runs, first_run,
    pos = 0                                                            # in_blocks, srcs
    first = []
    for rs in runs:
        first.append(pos // 5)
        for run in rs:
            table[pos:pos + 5] = run
            pos += 5
    first.append(pos // 5)
    table[pos:pos + out_blocks + 1] = first
    table[pos + out_blocks + 1:pos + out_blocks + 1 + n] = [ceil_div(c, LANES) for c in channels]
    table[pos + out_blocks + 1 + n:] = [<Py_ssize_t>s for s in srcs]
    cdef Py_ssize_t[::1] t = table
    cdef Step step = new_step(concat_n16cx_step, sizeof(ConcatN16Args),
                              _parallel(batch * out_blocks * pixels * LANES * es), table)
    cdef ConcatN16Args *args = <ConcatN16Args *>step.args
    args.dst = <char *>dst
    args.batch = batch
    args.out_blocks = out_blocks
    args.pixels = pixels
    args.es = es
    if nruns > 0:
        args.runs = <const LaneRun *>&t[0]
    args.first_run = &t[pos]
    args.in_blocks = &t[pos + out_blocks + 1]
    args.srcs = <const char **>&t[pos + out_blocks + 1 + n]
    if out_blocks == 0:
        args.batch = 0
    return step


# -- group --------------------------------------------------------------------------------

cdef struct GroupArgs:
    Py_ssize_t n
    ppl_plan_step *steps


cdef void group_step(const void *a, int tid, int nthreads) noexcept nogil:
    # No barrier between the parts: they must write disjoint memory and not read each
    # other's outputs.  A serial part runs on thread 0 only.
    cdef const GroupArgs *args = <const GroupArgs *>a
    cdef Py_ssize_t i
    for i in range(args.n):
        if args.steps[i].parallel:
            args.steps[i].fn(args.steps[i].args, tid, nthreads)
        elif tid == 0:
            args.steps[i].fn(args.steps[i].args, 0, 1)


def make_group_step(steps):
    """One step running independent compiled ``steps`` (disjoint outputs, none reading
    another's output) without a barrier between them; parallel when any part is."""
    cdef Py_ssize_t n = len(steps), i
    cdef Step part
    cdef bint parallel = False
    for s in steps:
        if type(s) is not Step:
            raise ValueError(f"a group holds compiled steps only, got {type(s).__name__}")
        parallel = parallel or (<Step>s).parallel
    cdef Step step = new_step(group_step, sizeof(GroupArgs) + n * sizeof(ppl_plan_step),
                              parallel, tuple(steps))
    cdef GroupArgs *args = <GroupArgs *>step.args
    args.n = n
    args.steps = <ppl_plan_step *>(<char *>step.args + sizeof(GroupArgs))
    for i in range(n):
        part = steps[i]
        args.steps[i].fn = part.fn
        args.steps[i].args = part.args
        args.steps[i].parallel = part.parallel
    return step


# -- pad: a copy through one index table per dim --------------------------------------------

cdef inline void fill_pattern(char *dst, Py_ssize_t n, const char *value,
                              Py_ssize_t es) noexcept nogil:
    """n elements of es bytes at dst each become the es bytes at value."""
    cdef Py_ssize_t i
    if es == 4:
        for i in range(n):
            (<uint32_t *>dst)[i] = (<const uint32_t *>value)[0]
    elif es == 8:
        for i in range(n):
            (<uint64_t *>dst)[i] = (<const uint64_t *>value)[0]
    elif es == 2:
        for i in range(n):
            (<uint16_t *>dst)[i] = (<const uint16_t *>value)[0]
    elif es == 1:
        memset(dst, (<const uint8_t *>value)[0], n)
    else:
        for i in range(n):
            memcpy(dst + i * es, value, es)


cdef struct PadArgs:
    char *dst
    const char *src
    const char *value         # es bytes, read when the step runs (Pad's constant_value input)
    Py_ssize_t es
    Py_ssize_t chunk          # bytes per innermost table entry (a multiple of es)
    Py_ssize_t rank           # >= 1
    Py_ssize_t dims[MAX_RANK]
    const int64_t *tables[MAX_RANK]   # source byte offset of output index i along dim k; < 0: pad
    const int64_t *runs       # the innermost table as runs: (source offset or -1, entries)
    Py_ssize_t n_runs


cdef void pad_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const PadArgs *args = <const PadArgs *>a
    cdef Py_ssize_t last = args.rank - 1, inner = args.dims[last], chunk = args.chunk
    cdef Py_ssize_t rows = 1, b, e, row, q, k, j, r, run, off
    cdef Py_ssize_t idx[MAX_RANK]
    cdef const int64_t *runs = args.runs
    cdef char *dst
    cdef bint valid
    for k in range(last):
        rows *= args.dims[k]
    ppl_partition(rows, tid, nthreads, &b, &e)
    if b >= e:
        return
    q = b
    k = last - 1
    while k >= 0:
        idx[k] = q % args.dims[k]
        q = q // args.dims[k]
        k -= 1
    for row in range(b, e):
        off = 0
        valid = True
        for k in range(last):
            if args.tables[k][idx[k]] < 0:
                valid = False
            off += args.tables[k][idx[k]]
        dst = args.dst + row * inner * chunk
        if not valid:
            fill_pattern(dst, inner * chunk // args.es, args.value, args.es)
        else:
            j = 0
            for r in range(args.n_runs):
                run = runs[2 * r + 1]
                if runs[2 * r] < 0:
                    fill_pattern(dst + j * chunk, run * chunk // args.es, args.value, args.es)
                else:
                    memcpy(dst + j * chunk, args.src + off + runs[2 * r], run * chunk)
                j += run
        k = last - 1
        while k >= 0:
            idx[k] += 1
            if idx[k] < args.dims[k]:
                break
            idx[k] = 0
            k -= 1


def make_pad_step(size_t dst, size_t src, size_t value, Py_ssize_t es, in_dims, tables):
    """Step: contiguous y of dims (len(tables[k]) for each k) with y[i_0, ..., i_r] =
    x[tables[0][i_0], ..., tables[r][i_r]] for contiguous x of ``in_dims``, or the es bytes
    at ``value`` where any table entry is negative.  Every entry is checked against
    ``in_dims`` here, so the step never reads outside x."""
    cdef Py_ssize_t rank = len(in_dims), k, chunk = es, total = 1
    if rank != len(tables) or rank == 0:
        raise ValueError(f"need one table per dim: {rank} dims, {len(tables)} tables")
    if es <= 0:
        raise ValueError(f"element size must be positive, got {es}")
    tabs = [np.asarray(t, np.int64).reshape(-1) for t in tables]
    for k in range(rank):
        if tabs[k].size and int(tabs[k].max()) >= in_dims[k]:
            raise ValueError(f"table {k} reads index {int(tabs[k].max())} of a dim of "
                             f"{in_dims[k]}")
        total *= tabs[k].size
    strides = [0] * rank
    s = es
    for k in range(rank - 1, -1, -1):
        strides[k] = s
        s *= in_dims[k]
    # Trailing dims copied whole (the identity table) become one chunk per entry.
    while rank > 1 and tabs[rank - 1].size == in_dims[rank - 1] and np.array_equal(
            tabs[rank - 1], np.arange(in_dims[rank - 1])):
        chunk *= in_dims[rank - 1]
        rank -= 1
    if rank > MAX_RANK:
        raise ValueError(f"a pad of rank {rank} is more than pplpy's {MAX_RANK}")
    offsets = [np.where(tabs[k] < 0, -1, tabs[k] * strides[k]).astype(np.int64)
               for k in range(rank)]
    if total == 0:
        offsets = [np.zeros(0, np.int64)]
        rank = 1
    runs = _table_runs(offsets[rank - 1], chunk)
    cdef Step step = new_step(pad_step, sizeof(PadArgs), _parallel(total * es),
                              offsets + [runs])
    cdef PadArgs *args = <PadArgs *>step.args
    cdef int64_t[::1] view
    args.dst = <char *>dst
    args.src = <const char *>src
    args.value = <const char *>value
    args.es = es
    args.chunk = chunk
    args.rank = rank
    for k in range(rank):
        args.dims[k] = offsets[k].size
        if offsets[k].size:
            view = offsets[k]
            args.tables[k] = &view[0]
    args.n_runs = runs.shape[0]
    if args.n_runs:
        view = runs.reshape(-1)
        args.runs = &view[0]
    return step


def _table_runs(offsets, Py_ssize_t chunk):
    """The innermost table as (source byte offset, entries) runs, (-1, entries) for padding:
    a run of sources chunk bytes apart is one memcpy, a run of padding one fill.  Worked out
    once here; the step used to find the runs by comparing entries on every output row
    (0.38 ms for a 1-pixel pad of (1, 64, 112, 112), ONNX Runtime's 0.14)."""
    t = np.asarray(offsets, np.int64)
    if t.size == 0:
        return np.zeros((0, 2), np.int64)
    pad = t < 0
    start = np.ones(t.size, bool)
    start[1:] = (pad[1:] != pad[:-1]) | (~pad[1:] & (t[1:] != t[:-1] + chunk))
    first = np.flatnonzero(start)
    length = np.diff(np.append(first, t.size))
    return np.ascontiguousarray(np.stack([np.where(pad[first], -1, t[first]), length], 1),
                                np.int64)


def pad_table(Py_ssize_t dim, Py_ssize_t begin, Py_ssize_t end, str mode):
    """Source index of each output index along one dim padded by ``begin``/``end`` (negative
    crops), -1 for the constant; the modes are numpy.pad's (reflect, edge, wrap).  Negative
    pads crop first and the positive ones pad the cropped range (as onnxruntime and PyTorch
    do): a wrap or reflect pad never reads an element the other side's crop removed."""
    src = np.arange(dim, dtype=np.int64)
    lo = -begin if begin < 0 else 0
    hi = dim + end if end < 0 else dim
    src = src[lo:max(hi, lo)]
    if begin > 0 or end > 0:
        width = (max(begin, 0), max(end, 0))
        if mode == "constant":
            src = np.pad(src, width, mode="constant", constant_values=-1)
        else:
            if src.size == 0:
                raise ValueError(f"{mode} padding of an empty dim")
            src = np.pad(src, width, mode=mode)
    return src


# -- Python-visible wrappers (tests) ------------------------------------------------------

def _address(array):
    return array.__array_interface__["data"][0]


def _contiguous(array, what):
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    return array


def copy(x, y, int num_threads=1):
    """y[...] = x, byte for byte (same size)."""
    _contiguous(x, "x")
    _contiguous(y, "y")
    if x.nbytes != y.nbytes:
        raise ValueError(f"x has {x.nbytes} bytes, y {y.nbytes}")
    run_steps([make_copy_step(_address(y), _address(x), x.nbytes)], num_threads)


def fill(y, value, int num_threads=1):
    """y[...] = value (converted to y's dtype)."""
    _contiguous(y, "y")
    pattern = np.asarray(value, dtype=y.dtype).tobytes()
    run_steps([make_fill_step(_address(y), y.size, pattern)], num_threads)


def concat(xs, int axis, y, int num_threads=1):
    """y = np.concatenate(xs, axis) for contiguous xs and y of one dtype."""
    for x in xs:
        _contiguous(x, "every input")
    _contiguous(y, "y")
    outer = int(np.prod(y.shape[:axis], dtype=np.int64))
    segs = [int(np.prod(x.shape[axis:], dtype=np.int64)) * x.itemsize for x in xs]
    run_steps([make_concat_step(_address(y), [_address(x) for x in xs], segs, outer)],
              num_threads)


def transpose(x, perm, y, int num_threads=1):
    """y = x.transpose(perm) for contiguous x and y."""
    _contiguous(x, "x")
    _contiguous(y, "y")
    dims, strides = transpose_strides(x.shape, perm, x.itemsize)
    run_steps([make_strided_copy_step(_address(y), _address(x), x.itemsize, dims, strides)],
              num_threads)


def strided_copy(x, y, int num_threads=1):
    """y[...] = x for any strided numpy view x (Slice's path) and contiguous y."""
    _contiguous(y, "y")
    run_steps([make_strided_copy_step(_address(y), _address(x), x.itemsize, list(x.shape),
                                      list(x.strides))], num_threads)


def gather(data, indices, int axis, y, int num_threads=1):
    """y = np.take(data, indices, axis), out-of-range indices giving zeros."""
    _contiguous(data, "data")
    _contiguous(indices, "indices")
    _contiguous(y, "y")
    outer = int(np.prod(data.shape[:axis], dtype=np.int64))
    row = int(np.prod(data.shape[axis + 1:], dtype=np.int64)) * data.itemsize
    run_steps([make_gather_step(_address(y), _address(data), _address(indices),
                                indices.itemsize, outer, data.shape[axis], indices.size, row)],
              num_threads)


def concat_n16cx(xs, channels, y, int num_threads=1):
    """Channel concat of blocked (N, ceil(c/16), S, 16) arrays into blocked y."""
    for x in xs:
        _contiguous(x, "every input")
    _contiguous(y, "y")
    run_steps([make_concat_n16cx_step(_address(y), [_address(x) for x in xs], list(channels),
                                      y.shape[0], y.shape[2], y.itemsize)], num_threads)


def channel_map_n16cx(xs, channels, sources, y, int num_threads=1):
    """y's channel c = channel sources[c][1] of xs[sources[c][0]], all blocked."""
    for x in xs:
        _contiguous(x, "every input")
    _contiguous(y, "y")
    run_steps([make_channel_map_n16cx_step(_address(y), [_address(x) for x in xs],
                                           list(channels), list(sources), y.shape[0],
                                           y.shape[2], y.itemsize)], num_threads)


def pad(x, pads, y, str mode="constant", value=0, int num_threads=1):
    """y = numpy.pad(x, pads) in ``mode`` for contiguous x and y; pads is
    [(begin, end) per dim], negative crops."""
    _contiguous(x, "x")
    _contiguous(y, "y")
    tables = [pad_table(d, b, e, mode) for d, (b, e) in zip(x.shape, pads)]
    v = np.asarray(value, x.dtype).reshape(1)
    run_steps([make_pad_step(_address(y), _address(x), _address(v), x.itemsize, list(x.shape),
                             tables)], num_threads)
