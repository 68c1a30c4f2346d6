# Reductions, ArgMax/ArgMin, CumSum and CumProd as steps of the compiled run plan.
#
# Written once and included by _reduce_fp32_{avx512,fma,sse}.pyx, so each tier gets its own
# vector code.
#
#     make_reduce_step(kind, dtype, x, y, dims, mask=, axes=, n_axes=, noop=)
#     make_arg_step(dtype, x, y, outer, R, inner, is_max, last)     ArgMax / ArgMin
#     make_cumulative_step(op, dtype, x, y, dims, axis=, axis_address=, axis_is64=, exclusive,
#                          reverse)                                    CumSum / CumProd
#
# The geometry of a reduction.  Size-1 dims are dropped and adjacent dims that are both
# reduced or both kept are merged, leaving alternating groups.  The last kept group, when it
# is the innermost, is ``inner`` (contiguous: the loops vectorise along it); the innermost
# reduced group is (R, r_stride); every other reduced group is folded into ``Q`` (an index
# whose offset is found digit by digit), every other kept group into ``n_outer``.  So a
# reduction over several non-adjacent axes runs in one strided pass, with no transpose:
#
#     y[o, c] = post( combine over q < Q, r < R of f(x[kept_off(o) + red_off(q) + r*r_stride + c]) )
#
# Work items are (o, tile of TILE columns of inner); threads take contiguous runs of them.
# The reduced extent is never split between threads (that would need a second, combining
# step), so a reduction to a scalar runs on one thread.  When inner == 1 the reduced run is
# contiguous and the loop vectorises along it in LANES lanes instead.
#
# Accuracy: float sums are pairwise: rows (or contiguous runs of CONTIG_LEAF elements, in
# LANES lanes) are added in sequence only in short leaves, and leaves are combined in a
# balanced tree over r and over q, so the error grows with log(n), as numpy's sum does.
# ReduceLogSumExp subtracts the per-output maximum before exp.  Max, Min and Prod combine
# in sequence (exact for Max/Min).
#
# The reduced axes come either as a bit mask fixed when the step is made (attribute axes,
# constant axes input, N16CX) or as the address of the int64 axes tensor, read when the
# step runs: a fed axes input has its value in the plan's shape signature, and shape
# inference already checked it, but make_step runs before the feed is copied in.  Keepdims
# does not change the output's memory layout, so the step does not need it.
#
# Post-op chains (_post_chain_fp32.h, fused by passes/fuse_post_ops.py: oneDNN Graph's
# "Reduction + [Unary|Binary]*"): a float step given one applies it to the outputs of each
# work item right after they are stored (still in L1), through ppl_post_chain_range, so an
# element-wise tail costs no pass over memory of its own.  With inner == 1 a thread applies it
# to its whole run of outputs once they are done.

from libc.math cimport fabsf, logf, sqrtf, INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as np

from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"
include "_brgemm_fp32.pxi"  # the post-op chain declarations (_post_chain_fp32.pxi)

cdef extern from "_rows_fp32.h" nogil:
    float ppl_row_max(const float *s, Py_ssize_t n)
    float ppl_row_min(const float *s, Py_ssize_t n)


cdef enum:
    MAXD = 16           # largest rank handled (physical rank for N16CX)
    TILE = 128          # columns of inner per work item
    ROW_LEAF = 32       # rows a leaf of the pairwise column sum adds in sequence
    CONTIG_LEAF = 256   # elements a leaf of the pairwise contiguous sum adds (in lanes)
    LANES = 16
    PARALLEL_MIN = 65536

    K_SUM = 0
    K_MEAN = 1
    K_MAX = 2
    K_MIN = 3
    K_PROD = 4
    K_L1 = 5
    K_L2 = 6
    K_SUMSQ = 7
    K_LOGSUM = 8
    K_LSE = 9

    F_ID = 0
    F_ABS = 1
    F_SQR = 2
    F_EXP = 3

    DT_F32 = 0
    DT_I32 = 1
    DT_I64 = 2
    DT_BOOL = 3

# Python names of the kinds and element types.
KINDS = {"sum": K_SUM, "mean": K_MEAN, "max": K_MAX, "min": K_MIN, "prod": K_PROD,
         "l1": K_L1, "l2": K_L2, "sum_square": K_SUMSQ, "log_sum": K_LOGSUM,
         "log_sum_exp": K_LSE}
DTYPES = {np.dtype(np.float32): DT_F32, np.dtype(np.int32): DT_I32,
          np.dtype(np.int64): DT_I64, np.dtype(np.bool_): DT_BOOL}
# Kinds each element type supports (the integer kernels combine in sequence, exactly).
KINDS_OF_DTYPE = {DT_F32: frozenset(KINDS.values()),
                  DT_I32: frozenset((K_SUM, K_MAX, K_MIN, K_PROD)),
                  DT_I64: frozenset((K_SUM, K_MAX, K_MIN, K_PROD)),
                  DT_BOOL: frozenset((K_MAX, K_MIN))}
MAX_RANK = MAXD

ctypedef fused num_t:
    float
    int32_t
    int64_t
    uint8_t


# ---------------------------------------------------------------------------------------
# Geometry.

cdef struct Geometry:
    Py_ssize_t n_outer              # product of the kept groups other than inner
    int n_kept
    Py_ssize_t kept_size[MAXD]      # outermost first
    Py_ssize_t kept_stride[MAXD]
    Py_ssize_t inner
    int n_red
    Py_ssize_t red_size[MAXD]       # reduced groups other than the innermost
    Py_ssize_t red_stride[MAXD]
    Py_ssize_t Q                    # product of red_size
    Py_ssize_t R, r_stride          # the innermost reduced group
    Py_ssize_t tiles                # ceil(inner / TILE)
    Py_ssize_t count                # elements reduced into one output


cdef void _geometry(Geometry *g, const Py_ssize_t *dims, int rank, uint64_t mask) noexcept nogil:
    cdef Py_ssize_t gs[MAXD]
    cdef Py_ssize_t gst[MAXD]
    cdef int gr[MAXD]
    cdef int ng = 0, k, red, last, kr
    cdef Py_ssize_t d, stride = 1
    g.count = 1
    for k in range(rank):
        d = dims[k]
        red = <int>((mask >> k) & 1)
        if red:
            g.count *= d
        if d == 1:
            continue
        if ng > 0 and gr[ng - 1] == red:
            gs[ng - 1] *= d
        else:
            gs[ng] = d
            gr[ng] = red
            ng += 1
    for k in range(ng - 1, -1, -1):
        gst[k] = stride
        stride *= gs[k]
    g.inner = 1
    last = ng
    if ng > 0 and not gr[ng - 1]:
        g.inner = gs[ng - 1]
        last = ng - 1
    kr = -1
    for k in range(last):
        if gr[k]:
            kr = k
    g.R = 1
    g.r_stride = 0
    if kr >= 0:
        g.R = gs[kr]
        g.r_stride = gst[kr]
    g.n_kept = 0
    g.n_red = 0
    g.Q = 1
    g.n_outer = 1
    for k in range(last):
        if k == kr:
            continue
        if gr[k]:
            g.red_size[g.n_red] = gs[k]
            g.red_stride[g.n_red] = gst[k]
            g.n_red += 1
            g.Q *= gs[k]
        else:
            g.kept_size[g.n_kept] = gs[k]
            g.kept_stride[g.n_kept] = gst[k]
            g.n_kept += 1
            g.n_outer *= gs[k]
    g.tiles = ceil_div(g.inner, TILE)


cdef inline Py_ssize_t _kept_offset(const Geometry *g, Py_ssize_t o) noexcept nogil:
    cdef Py_ssize_t off = 0
    cdef int k
    for k in range(g.n_kept - 1, -1, -1):
        off += (o % g.kept_size[k]) * g.kept_stride[k]
        o = o // g.kept_size[k]
    return off


cdef inline Py_ssize_t _red_offset(const Geometry *g, Py_ssize_t q) noexcept nogil:
    cdef Py_ssize_t off = 0
    cdef int k
    for k in range(g.n_red - 1, -1, -1):
        off += (q % g.red_size[k]) * g.red_stride[k]
        q = q // g.red_size[k]
    return off


cdef inline uint64_t _all_axes(int rank) noexcept nogil:
    if rank >= 64:
        return ~(<uint64_t>0)
    return ((<uint64_t>1) << rank) - 1


# ---------------------------------------------------------------------------------------
# Reductions.

cdef struct ReduceArgs:
    const void *x
    void *y
    Py_ssize_t dims[MAXD]
    int rank
    int kind
    uint64_t mask
    const int64_t *axes     # NULL: use mask
    Py_ssize_t n_axes
    int noop
    double ident_f          # identity of the combine (float, and int/bool below)
    int64_t ident_i
    RunChain rc             # float32 only; len 0: none


cdef uint64_t _axes_mask(const ReduceArgs *a) noexcept nogil:
    cdef uint64_t m = 0
    cdef Py_ssize_t i
    cdef int64_t v
    if a.axes == NULL:
        return a.mask
    if a.n_axes == 0:
        return 0 if a.noop else _all_axes(a.rank)
    for i in range(a.n_axes):
        v = a.axes[i]
        if v < 0:
            v += a.rank
        if 0 <= v < a.rank:   # shape inference rejected others; never index out of range
            m |= (<uint64_t>1) << v
    return m


# -- float sums of f(x): pairwise -------------------------------------------------------

cdef inline void _acc_row(float *acc, const float *p, Py_ssize_t w, int f,
                          const float *m) noexcept nogil:
    cdef Py_ssize_t j
    cdef float v
    if f == F_ID:
        for j in range(w):
            acc[j] += p[j]
    elif f == F_ABS:
        for j in range(w):
            acc[j] += fabsf(p[j])
    elif f == F_SQR:
        for j in range(w):
            v = p[j]
            acc[j] += v * v
    else:
        for j in range(w):
            acc[j] += exp_fp32(p[j] - m[j])


cdef void _sum_rows_cols(const float *p, Py_ssize_t rows, Py_ssize_t stride, Py_ssize_t w,
                         float *acc, int f, const float *m) noexcept nogil:
    """acc[j] = sum over r < rows of f(p[r*stride + j]), pairwise over r."""
    cdef float tmp[TILE]
    cdef Py_ssize_t r, j, h
    if rows <= ROW_LEAF:
        for j in range(w):
            acc[j] = 0
        for r in range(rows):
            _acc_row(acc, p + r * stride, w, f, m)
        return
    h = rows // 2
    _sum_rows_cols(p, h, stride, w, acc, f, m)
    _sum_rows_cols(p + h * stride, rows - h, stride, w, tmp, f, m)
    for j in range(w):
        acc[j] += tmp[j]


cdef void _sum_q_cols(const float *x, const Geometry *g, Py_ssize_t base, Py_ssize_t q0,
                      Py_ssize_t q1, Py_ssize_t w, float *acc, int f,
                      const float *m) noexcept nogil:
    """The column sums over reduced groups q0..q1 (pairwise over q)."""
    cdef float tmp[TILE]
    cdef Py_ssize_t j, mid
    if q1 - q0 <= 0:
        for j in range(w):
            acc[j] = 0
        return
    if q1 - q0 == 1:
        _sum_rows_cols(x + base + _red_offset(g, q0), g.R, g.r_stride, w, acc, f, m)
        return
    mid = q0 + (q1 - q0) // 2
    _sum_q_cols(x, g, base, q0, mid, w, acc, f, m)
    _sum_q_cols(x, g, base, mid, q1, w, tmp, f, m)
    for j in range(w):
        acc[j] += tmp[j]


cdef inline float _lanes_total(float *lanes) noexcept nogil:
    cdef int l
    for l in range(8):
        lanes[l] += lanes[l + 8]
    for l in range(4):
        lanes[l] += lanes[l + 4]
    for l in range(2):
        lanes[l] += lanes[l + 2]
    return lanes[0] + lanes[1]


cdef float _sum_contig(const float *p, Py_ssize_t n, int f, float m) noexcept nogil:
    """sum of f(p[i]) for i < n: LANES lanes in leaves of CONTIG_LEAF, pairwise above."""
    cdef float lanes[LANES]
    cdef Py_ssize_t i, h, nb
    cdef int l
    cdef float v
    if n > CONTIG_LEAF:
        h = (n // 2) // LANES * LANES
        return _sum_contig(p, h, f, m) + _sum_contig(p + h, n - h, f, m)
    for l in range(LANES):
        lanes[l] = 0
    nb = n // LANES
    if f == F_ID:
        for i in range(nb):
            for l in range(LANES):
                lanes[l] += p[i * LANES + l]
        for i in range(nb * LANES, n):
            lanes[i - nb * LANES] += p[i]
    elif f == F_ABS:
        for i in range(nb):
            for l in range(LANES):
                lanes[l] += fabsf(p[i * LANES + l])
        for i in range(nb * LANES, n):
            lanes[i - nb * LANES] += fabsf(p[i])
    elif f == F_SQR:
        for i in range(nb):
            for l in range(LANES):
                v = p[i * LANES + l]
                lanes[l] += v * v
        for i in range(nb * LANES, n):
            lanes[i - nb * LANES] += p[i] * p[i]
    else:
        for i in range(nb):
            for l in range(LANES):
                lanes[l] += exp_fp32(p[i * LANES + l] - m)
        for i in range(nb * LANES, n):
            lanes[i - nb * LANES] += exp_fp32(p[i] - m)
    return _lanes_total(lanes)


cdef float _sum_q_contig(const float *x, const Geometry *g, Py_ssize_t base, Py_ssize_t q0,
                         Py_ssize_t q1, int f, float m) noexcept nogil:
    cdef Py_ssize_t mid
    if q1 - q0 <= 0:
        return 0
    if q1 - q0 == 1:
        return _sum_contig(x + base + _red_offset(g, q0), g.R, f, m)
    mid = q0 + (q1 - q0) // 2
    return _sum_q_contig(x, g, base, q0, mid, f, m) + _sum_q_contig(x, g, base, mid, q1, f, m)


# -- max, min, prod (and integer sums): in sequence, any element type -----------------

cdef void _lin_cols(const num_t *x, const Geometry *g, Py_ssize_t base, Py_ssize_t w,
                    num_t *out, int kind, num_t ident) noexcept nogil:
    """out[j] = combine over every reduced position of x[... + j]."""
    cdef Py_ssize_t q, r, j
    cdef const num_t *p
    cdef num_t v
    for j in range(w):
        out[j] = ident
    for q in range(g.Q):
        for r in range(g.R):
            p = x + base + _red_offset(g, q) + r * g.r_stride
            if kind == K_MAX:
                for j in range(w):
                    v = p[j]
                    out[j] = v if (v > out[j]) | (v != v) else out[j]   # NaN sticks
            elif kind == K_MIN:
                for j in range(w):
                    v = p[j]
                    out[j] = v if (v < out[j]) | (v != v) else out[j]
            elif kind == K_PROD:
                for j in range(w):
                    out[j] = out[j] * p[j]
            else:
                for j in range(w):
                    out[j] = out[j] + p[j]


cdef num_t _lin_contig(const num_t *x, const Geometry *g, Py_ssize_t base, int kind,
                       num_t ident) noexcept nogil:
    """combine over every reduced position, the innermost run contiguous (inner == 1)."""
    cdef num_t lanes[LANES]
    cdef Py_ssize_t q, i, nb = g.R // LANES
    cdef const num_t *p
    cdef num_t v, m
    cdef int l
    if num_t is float:
        if kind == K_MAX or kind == K_MIN:     # vector code, NaN sticking (_rows_fp32.h)
            v = ident
            for q in range(g.Q):
                p = x + base + _red_offset(g, q)
                m = ppl_row_max(p, g.R) if kind == K_MAX else ppl_row_min(p, g.R)
                if (m != m) | ((m > v) if kind == K_MAX else (m < v)):
                    v = m
            return v
    for l in range(LANES):
        lanes[l] = ident
    for q in range(g.Q):
        p = x + base + _red_offset(g, q)
        if kind == K_MAX:
            for i in range(nb):
                for l in range(LANES):
                    v = p[i * LANES + l]
                    lanes[l] = v if (v > lanes[l]) | (v != v) else lanes[l]
            for i in range(nb * LANES, g.R):
                v = p[i]
                lanes[0] = v if v > lanes[0] or v != v else lanes[0]
        elif kind == K_MIN:
            for i in range(nb):
                for l in range(LANES):
                    v = p[i * LANES + l]
                    lanes[l] = v if (v < lanes[l]) | (v != v) else lanes[l]
            for i in range(nb * LANES, g.R):
                v = p[i]
                lanes[0] = v if v < lanes[0] or v != v else lanes[0]
        elif kind == K_PROD:
            for i in range(nb):
                for l in range(LANES):
                    lanes[l] = lanes[l] * p[i * LANES + l]
            for i in range(nb * LANES, g.R):
                lanes[0] = lanes[0] * p[i]
        else:
            for i in range(nb):
                for l in range(LANES):
                    lanes[l] = lanes[l] + p[i * LANES + l]
            for i in range(nb * LANES, g.R):
                lanes[0] = lanes[0] + p[i]
    v = lanes[0]
    for l in range(1, LANES):
        if kind == K_MAX:
            v = lanes[l] if lanes[l] > v or lanes[l] != lanes[l] else v
        elif kind == K_MIN:
            v = lanes[l] if lanes[l] < v or lanes[l] != lanes[l] else v
        elif kind == K_PROD:
            v = v * lanes[l]
        else:
            v = v + lanes[l]
    return v


cdef void _lin_run(const num_t *x, num_t *y, const ReduceArgs *a, int tid,
                   int nthreads) noexcept nogil:
    cdef Geometry g
    cdef Py_ssize_t b, e, it, o, c0, w
    cdef num_t ident
    if num_t is float:
        ident = <float>a.ident_f
    else:
        ident = <num_t>a.ident_i
    _geometry(&g, a.dims, a.rank, _axes_mask(a))
    ppl_partition(g.n_outer * g.tiles, tid, nthreads, &b, &e)
    for it in range(b, e):
        o = it // g.tiles
        c0 = (it % g.tiles) * TILE
        w = min(<Py_ssize_t>TILE, g.inner - c0)
        if g.inner == 1:
            y[o] = _lin_contig(x, &g, _kept_offset(&g, o), a.kind, ident)
        else:
            _lin_cols(x, &g, _kept_offset(&g, o) + c0, w, y + o * g.inner + c0, a.kind, ident)
            if num_t is float:
                _run_chain(&a.rc, o * g.inner + c0, w)
    if num_t is float:
        if g.inner == 1:
            _run_chain(&a.rc, b, e - b)


cdef void _lin_f32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ReduceArgs *a = <const ReduceArgs *>p
    _lin_run(<const float *>a.x, <float *>a.y, a, tid, nthreads)


cdef void _lin_i32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ReduceArgs *a = <const ReduceArgs *>p
    _lin_run(<const int32_t *>a.x, <int32_t *>a.y, a, tid, nthreads)


cdef void _lin_i64_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ReduceArgs *a = <const ReduceArgs *>p
    _lin_run(<const int64_t *>a.x, <int64_t *>a.y, a, tid, nthreads)


cdef void _lin_u8_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ReduceArgs *a = <const ReduceArgs *>p
    _lin_run(<const uint8_t *>a.x, <uint8_t *>a.y, a, tid, nthreads)


# -- the float step of the sum family ----------------------------------------------------

cdef inline int _pre_of(int kind) noexcept nogil:
    if kind == K_L1:
        return F_ABS
    if kind == K_L2 or kind == K_SUMSQ:
        return F_SQR
    if kind == K_LSE:
        return F_EXP
    return F_ID


cdef inline float _post(float s, int kind, float scale, float shift) noexcept nogil:
    if kind == K_MEAN:
        return s * scale
    if kind == K_L2:
        return sqrtf(s)
    if kind == K_LOGSUM:
        return logf(s)
    if kind == K_LSE:
        return logf(s) + shift
    return s


cdef inline float _finite_or_zero(float m) noexcept nogil:
    # m - m is 0 for finite m and NaN for +-inf or NaN; keeps exp(x - m) well defined when
    # every element is -inf (or the set is empty) or some is +inf.
    return m if m - m == 0 else 0


cdef void _sum_f32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ReduceArgs *a = <const ReduceArgs *>p
    cdef const float *x = <const float *>a.x
    cdef float *y = <float *>a.y
    cdef float acc[TILE]
    cdef float shift[TILE]
    cdef Geometry g
    cdef Py_ssize_t b, e, it, o, c0, w, j, base
    cdef int f = _pre_of(a.kind)
    cdef float one = 1, m, scale, minus_inf = -INFINITY
    _geometry(&g, a.dims, a.rank, _axes_mask(a))
    scale = one / <float>g.count      # count 0: inf, and 0 * inf gives Mean's NaN
    for j in range(TILE):
        shift[j] = 0
    ppl_partition(g.n_outer * g.tiles, tid, nthreads, &b, &e)
    for it in range(b, e):
        o = it // g.tiles
        c0 = (it % g.tiles) * TILE
        w = min(<Py_ssize_t>TILE, g.inner - c0)
        base = _kept_offset(&g, o) + c0
        if g.inner == 1:
            m = 0
            if a.kind == K_LSE:
                m = _finite_or_zero(_lin_contig(x, &g, base, K_MAX, minus_inf))
            y[o] = _post(_sum_q_contig(x, &g, base, 0, g.Q, f, m), a.kind, scale, m)
        else:
            if a.kind == K_LSE:
                _lin_cols(x, &g, base, w, shift, K_MAX, minus_inf)
                for j in range(w):
                    shift[j] = _finite_or_zero(shift[j])
            _sum_q_cols(x, &g, base, 0, g.Q, w, acc, f, shift)
            for j in range(w):
                y[o * g.inner + c0 + j] = _post(acc[j], a.kind, scale, shift[j])
            _run_chain(&a.rc, o * g.inner + c0, w)
    if g.inner == 1:
        _run_chain(&a.rc, b, e - b)


_IDENTITY = {
    K_MAX: {DT_F32: -np.inf, DT_I32: np.iinfo(np.int32).min, DT_I64: np.iinfo(np.int64).min,
            DT_BOOL: 0},
    K_MIN: {DT_F32: np.inf, DT_I32: np.iinfo(np.int32).max, DT_I64: np.iinfo(np.int64).max,
            DT_BOOL: 1},
    K_PROD: {DT_F32: 1.0, DT_I32: 1, DT_I64: 1},
}


def axes_mask(axes, int rank, bint noop=False):
    """The bit mask of ``axes`` (ints, negative from the end) of a rank-``rank`` tensor;
    None or empty means every axis, or none with ``noop``."""
    if rank > MAXD:
        raise ValueError(f"rank {rank}: pplpy's reductions handle at most {MAXD} dims")
    if axes is None or len(axes) == 0:
        return 0 if noop else int(_all_axes(rank))
    mask = 0
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for rank {rank}")
        mask |= 1 << (a % rank)
    return mask


def make_reduce_step(int kind, int dtype, size_t x, size_t y, dims, mask=None,
                     size_t axes=0, Py_ssize_t n_axes=0, bint noop=False, keep=None, *,
                     post_chain=(), Py_ssize_t channels=0, Py_ssize_t cstride=0,
                     bint blocked=False):
    """The step y = reduce(x) over the axes of ``mask`` (bits of dims), or over the int64
    tensor of ``n_axes`` values at address ``axes`` read when the step runs (negative
    allowed; none means every axis, or none with ``noop``).  ``dims``: x's (physical) dims;
    y holds the kept dims in order.  ``post_chain`` (float32 only): the post-op entries of
    _post_chain_fp32.pxi applied to every output, y laid out as ``channels``, ``cstride``
    and ``blocked`` say (ppl_post_chain_range)."""
    if dtype not in KINDS_OF_DTYPE:
        raise ValueError(f"element type code {dtype}: expected one of {sorted(KINDS_OF_DTYPE)}")
    if kind not in KINDS_OF_DTYPE[dtype]:
        raise ValueError(f"reduction kind {kind} is not available for element type code "
                         f"{dtype} (kinds: {sorted(KINDS_OF_DTYPE[dtype])})")
    dims = [int(d) for d in dims]
    if len(dims) > MAXD:
        raise ValueError(f"rank {len(dims)}: pplpy's reductions handle at most {MAXD} dims")
    if any(d < 0 for d in dims):
        raise ValueError(f"dims {dims}: expected non-negative sizes")
    if (mask is None) == (axes == 0):
        raise ValueError("give either mask or the address of the axes tensor")
    if axes != 0 and n_axes < 0:
        raise ValueError(f"n_axes = {n_axes}: expected a count")
    if y == 0:
        raise ValueError("y must be a valid address")
    if post_chain and dtype != DT_F32:
        raise ValueError("a post-op chain needs a float32 reduction")
    size = 1
    for d in dims:
        size *= d
    if size > 0 and x == 0:
        raise ValueError("x must be a valid address")
    sum_like = dtype == DT_F32 and kind not in (K_MAX, K_MIN, K_PROD)
    cdef Step step
    if sum_like:
        step = new_step(_sum_f32_step, sizeof(ReduceArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_F32:
        step = new_step(_lin_f32_step, sizeof(ReduceArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_I32:
        step = new_step(_lin_i32_step, sizeof(ReduceArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_I64:
        step = new_step(_lin_i64_step, sizeof(ReduceArgs), size >= PARALLEL_MIN, keep)
    else:
        step = new_step(_lin_u8_step, sizeof(ReduceArgs), size >= PARALLEL_MIN, keep)
    cdef ReduceArgs *args = <ReduceArgs *>step.args
    cdef int k
    args.x = <const void *>x
    args.y = <void *>y
    args.rank = len(dims)
    for k in range(args.rank):
        args.dims[k] = dims[k]
    args.kind = kind
    args.mask = <uint64_t>(mask if mask is not None else 0)
    args.axes = <const int64_t *>axes
    args.n_axes = n_axes
    args.noop = noop
    ident = _IDENTITY.get(kind, {}).get(dtype, 0)
    if dtype == DT_F32:
        args.ident_f = float(ident)
    else:
        args.ident_i = int(ident)
    _fill_run_chain(&args.rc, post_chain, y, channels, cstride, blocked, "reduce")
    step.label = "reduce"
    return step


def reduce(str kind, x, y, axes=None, bint noop=False, int num_threads=1,
           bint axes_at_run_time=False):
    """Test wrapper: y = reduce ``kind`` of x over ``axes`` (y's shape: the kept dims)."""
    x = np.ascontiguousarray(x)
    if not y.flags.c_contiguous:
        raise ValueError("y must be C-contiguous")
    dtype = DTYPES[x.dtype]
    if y.dtype != x.dtype:
        raise ValueError(f"y is {y.dtype}, x is {x.dtype}: expected equal types")
    if axes_at_run_time:
        a = np.ascontiguousarray(np.asarray([] if axes is None else axes, np.int64))
        step = make_reduce_step(KINDS[kind], dtype, x.__array_interface__["data"][0],
                                y.__array_interface__["data"][0], x.shape,
                                axes=a.__array_interface__["data"][0] if a.size else 1,
                                n_axes=a.size, noop=noop, keep=(x, y, a))
    else:
        step = make_reduce_step(KINDS[kind], dtype, x.__array_interface__["data"][0],
                                y.__array_interface__["data"][0], x.shape,
                                mask=axes_mask(axes, x.ndim, noop), keep=(x, y))
    run_steps([step], num_threads)
    return y


# ---------------------------------------------------------------------------------------
# ArgMax / ArgMin over one axis: x viewed as (outer, R, inner).

cdef struct ArgArgs:
    const void *x
    int64_t *y
    Py_ssize_t outer, R, inner, tiles
    int is_max, last


cdef void _arg_run(const num_t *x, const ArgArgs *a, int tid, int nthreads) noexcept nogil:
    cdef num_t best[TILE]
    cdef int64_t idx[TILE]
    cdef Py_ssize_t b, e, it, o, c0, w, r, j
    cdef const num_t *p0
    cdef const num_t *p
    cdef num_t v
    cdef bint take
    ppl_partition(a.outer * a.tiles, tid, nthreads, &b, &e)
    for it in range(b, e):
        o = it // a.tiles
        c0 = (it % a.tiles) * TILE
        w = min(<Py_ssize_t>TILE, a.inner - c0)
        p0 = x + o * a.R * a.inner + c0
        for j in range(w):
            best[j] = p0[j]
            idx[j] = 0
        for r in range(1, a.R):
            p = p0 + r * a.inner
            if a.is_max and not a.last:
                for j in range(w):
                    v = p[j]
                    take = v > best[j]
                    best[j] = v if take else best[j]
                    idx[j] = r if take else idx[j]
            elif a.is_max:
                for j in range(w):
                    v = p[j]
                    take = v >= best[j]
                    best[j] = v if take else best[j]
                    idx[j] = r if take else idx[j]
            elif not a.last:
                for j in range(w):
                    v = p[j]
                    take = v < best[j]
                    best[j] = v if take else best[j]
                    idx[j] = r if take else idx[j]
            else:
                for j in range(w):
                    v = p[j]
                    take = v <= best[j]
                    best[j] = v if take else best[j]
                    idx[j] = r if take else idx[j]
        for j in range(w):
            a.y[o * a.inner + c0 + j] = idx[j]


cdef void _arg_f32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ArgArgs *a = <const ArgArgs *>p
    _arg_run(<const float *>a.x, a, tid, nthreads)


cdef void _arg_i32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ArgArgs *a = <const ArgArgs *>p
    _arg_run(<const int32_t *>a.x, a, tid, nthreads)


cdef void _arg_i64_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ArgArgs *a = <const ArgArgs *>p
    _arg_run(<const int64_t *>a.x, a, tid, nthreads)


def make_arg_step(int dtype, size_t x, size_t y, Py_ssize_t outer, Py_ssize_t R,
                  Py_ssize_t inner, bint is_max, bint last, keep=None):
    """y[o, c] = index r of the max (or min) of x[o, r, c]; the first such r, or the last
    with ``last``.  x is (outer, R, inner) float32/int32/int64, y int64 (outer, inner)."""
    if outer < 0 or inner < 0 or R < 1:
        raise ValueError(f"(outer, R, inner) = ({outer}, {R}, {inner}): ArgMax/ArgMin need "
                         "a non-empty reduced axis")
    if x == 0 or y == 0:
        raise ValueError("x and y must be valid addresses")
    parallel = outer * R * inner >= PARALLEL_MIN
    cdef Step step
    if dtype == DT_F32:
        step = new_step(_arg_f32_step, sizeof(ArgArgs), parallel, keep)
    elif dtype == DT_I32:
        step = new_step(_arg_i32_step, sizeof(ArgArgs), parallel, keep)
    elif dtype == DT_I64:
        step = new_step(_arg_i64_step, sizeof(ArgArgs), parallel, keep)
    else:
        raise ValueError(f"element type code {dtype}: ArgMax/ArgMin take float32, int32, int64")
    cdef ArgArgs *args = <ArgArgs *>step.args
    args.x = <const void *>x
    args.y = <int64_t *>y
    args.outer = outer
    args.R = R
    args.inner = inner
    args.tiles = ceil_div(inner, TILE)
    args.is_max = is_max
    args.last = last
    step.label = "argmax" if is_max else "argmin"
    return step


def arg_reduce(x, int axis, bint is_max, bint last=False, int num_threads=1):
    """Test wrapper: np.argmax / np.argmin of x along ``axis`` (keepdims=False)."""
    x = np.ascontiguousarray(x)
    axis = axis % x.ndim
    outer = int(np.prod(x.shape[:axis]))
    inner = int(np.prod(x.shape[axis + 1:]))
    y = np.empty(x.shape[:axis] + x.shape[axis + 1:], np.int64)
    if y.size:
        step = make_arg_step(DTYPES[x.dtype], x.__array_interface__["data"][0],
                             y.__array_interface__["data"][0], outer, x.shape[axis], inner,
                             is_max, last, keep=(x, y))
        run_steps([step], num_threads)
    return y


# ---------------------------------------------------------------------------------------
# CumSum and CumProd along one axis: x viewed as (outer, L, inner); the axis may be read at
# run time.  One loop serves both: ``op`` picks the combination (and its identity, the
# value an exclusive scan starts from).  float64 is taken here (and nowhere else in this
# family): a scan is computed in its input's type, and ONNX's own cases use float64.

CUM_OPS = {"sum": 0, "prod": 1}

cdef enum:
    CUM_SUM = 0
    CUM_PROD = 1
    DT_F64 = 4

ctypedef fused cum_t:
    float
    double
    int32_t
    int64_t


cdef struct CumArgs:
    const void *x
    void *y
    Py_ssize_t dims[MAXD]
    int rank
    int64_t axis
    const void *axis_ptr        # NULL: use axis
    int axis_is64
    int exclusive, reverse
    int op                      # CUM_SUM or CUM_PROD


cdef void _cum_run(const cum_t *x, cum_t *y, const CumArgs *a, int tid,
                   int nthreads) noexcept nogil:
    cdef cum_t acc[TILE]
    cdef cum_t ident = 1 if a.op == CUM_PROD else 0
    cdef Py_ssize_t outer = 1, L = 1, inner = 1, tiles, b, e, it, o, c0, w, k, r, j, off
    cdef int64_t axis = a.axis
    cdef int i
    cdef bint prod = a.op == CUM_PROD
    if a.axis_ptr != NULL:
        axis = (<const int64_t *>a.axis_ptr)[0] if a.axis_is64 else \
            (<const int32_t *>a.axis_ptr)[0]
    if axis < 0:
        axis += a.rank
    if axis < 0 or axis >= a.rank:    # rejected by shape inference; never index out of range
        return
    for i in range(a.rank):
        if i < axis:
            outer *= a.dims[i]
        elif i == axis:
            L = a.dims[i]
        else:
            inner *= a.dims[i]
    tiles = ceil_div(inner, TILE)
    ppl_partition(outer * tiles, tid, nthreads, &b, &e)
    for it in range(b, e):
        o = it // tiles
        c0 = (it % tiles) * TILE
        w = min(<Py_ssize_t>TILE, inner - c0)
        for j in range(w):
            acc[j] = ident
        for k in range(L):
            r = L - 1 - k if a.reverse else k
            off = (o * L + r) * inner + c0
            if a.exclusive:
                for j in range(w):
                    y[off + j] = acc[j]
            if prod:
                for j in range(w):
                    acc[j] = acc[j] * x[off + j]
            else:
                for j in range(w):
                    acc[j] = acc[j] + x[off + j]
            if not a.exclusive:
                for j in range(w):
                    y[off + j] = acc[j]


cdef void _cum_f32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const CumArgs *a = <const CumArgs *>p
    _cum_run(<const float *>a.x, <float *>a.y, a, tid, nthreads)


cdef void _cum_f64_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const CumArgs *a = <const CumArgs *>p
    _cum_run(<const double *>a.x, <double *>a.y, a, tid, nthreads)


cdef void _cum_i32_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const CumArgs *a = <const CumArgs *>p
    _cum_run(<const int32_t *>a.x, <int32_t *>a.y, a, tid, nthreads)


cdef void _cum_i64_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const CumArgs *a = <const CumArgs *>p
    _cum_run(<const int64_t *>a.x, <int64_t *>a.y, a, tid, nthreads)


def make_cumulative_step(int op, int dtype, size_t x, size_t y, dims, int axis=0,
                         size_t axis_address=0, bint axis_is64=True, bint exclusive=False,
                         bint reverse=False, keep=None):
    """y = running sum (``op`` CUM_OPS["sum"]) or product (CUM_OPS["prod"]) of x along
    ``axis`` (or the int32/int64 scalar at ``axis_address``, read when the step runs);
    ``exclusive`` leaves out x itself, ``reverse`` runs from the end."""
    dims = [int(d) for d in dims]
    if op not in (CUM_SUM, CUM_PROD):
        raise ValueError(f"scan op code {op}: expected one of {CUM_OPS}")
    if not 1 <= len(dims) <= MAXD:
        raise ValueError(f"rank {len(dims)}: CumSum/CumProd handle 1 to {MAXD} dims")
    if axis_address == 0 and not -len(dims) <= axis < len(dims):
        raise ValueError(f"axis {axis} is out of range for rank {len(dims)}")
    if x == 0 or y == 0:
        raise ValueError("x and y must be valid addresses")
    size = 1
    for d in dims:
        size *= d
    cdef Step step
    if dtype == DT_F32:
        step = new_step(_cum_f32_step, sizeof(CumArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_F64:
        step = new_step(_cum_f64_step, sizeof(CumArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_I32:
        step = new_step(_cum_i32_step, sizeof(CumArgs), size >= PARALLEL_MIN, keep)
    elif dtype == DT_I64:
        step = new_step(_cum_i64_step, sizeof(CumArgs), size >= PARALLEL_MIN, keep)
    else:
        raise ValueError(f"element type code {dtype}: CumSum/CumProd take float32, float64, "
                         f"int32, int64")
    cdef CumArgs *args = <CumArgs *>step.args
    cdef int k
    args.x = <const void *>x
    args.y = <void *>y
    args.rank = len(dims)
    for k in range(args.rank):
        args.dims[k] = dims[k]
    args.axis = axis
    args.axis_ptr = <const void *>axis_address
    args.axis_is64 = axis_is64
    args.exclusive = exclusive
    args.reverse = reverse
    args.op = op
    step.label = "cumprod" if op == CUM_PROD else "cumsum"
    return step


def _cumulative(int op, x, int axis, bint exclusive, bint reverse, int num_threads):
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    dtype = DT_F64 if x.dtype == np.float64 else DTYPES[x.dtype]
    if x.size:
        step = make_cumulative_step(op, dtype, x.__array_interface__["data"][0],
                                    y.__array_interface__["data"][0], x.shape, axis,
                                    exclusive=exclusive, reverse=reverse, keep=(x, y))
        run_steps([step], num_threads)
    return y


def cumsum(x, int axis, bint exclusive=False, bint reverse=False, int num_threads=1):
    """Test wrapper: ONNX CumSum of x along ``axis``."""
    return _cumulative(CUM_SUM, x, axis, exclusive, reverse, num_threads)


def cumprod(x, int axis, bint exclusive=False, bint reverse=False, int num_threads=1):
    """Test wrapper: ONNX CumProd of x along ``axis``."""
    return _cumulative(CUM_PROD, x, axis, exclusive, reverse, num_threads)
