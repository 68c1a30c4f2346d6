# Attention (opset 23-25) and RotaryEmbedding (23) as compiled steps of the run plan.
#
# Written once and included by _attention_fp32_{avx512,fma,sse}.pyx, so each tier gets its
# own vector code.
#
#     make_attention_step(...)    Y = softmax(softcap(Q K^T * scale) + bias) V, flash-style
#     make_rows_copy_step(...)    strided copy of rows (the KV cache: present = past ++ new)
#     make_rotary_step(...)       rotate pairs of a head's leading dims by (cos, sin)
#
# Attention.  A work item is (batch b, query head h, block of up to QB query rows); items
# are independent (each writes its own rows of Y and of the optional QK output) and split
# over the team with ppl_partition, no barrier.  Inside an item the keys are taken KB at a
# time, with a running maximum m and sum l per row (flash attention): for every key block
#
#     s    = softcap(q . k_j * scale) + bias_j          KB scores, never the whole matrix
#     m'   = max(m, max s);  acc = acc * exp(m - m') + sum_j exp(s_j - m') v_j
#     l    = l * exp(m - m') + sum_j exp(s_j - m')
#
# and Y = acc / l at the end.  The item copies its query rows (times sqrt(scale), as the
# reference scales both Q and K) into its scratch, and each key block transposed (D x KB,
# times sqrt(scale)), so the scores of a row are KB independent sums vectorised along the
# keys; the P V update is vectorised along the value head size.  bias_j is the attention
# mask (additive float, or bool: False -> -inf; keys past the mask's length are masked),
# the causal and sliding-window frontiers (offset-aligned: query i attends key j iff
# j <= i + offset) and the per-batch valid length (nonpad_kv_seqlen).  A block whose scores
# are all -inf is skipped; a row whose bias is -inf everywhere gives Y = 0, as the spec's
# fully-masked-row rule says.  Q, K, V, Y are addressed through (batch, head, seq) strides
# with unit stride along the head size, so the 3-D (B, S, H*D) and 4-D (B, H, S, D) forms
# need no transpose; a query head h reads KV head h / (Hq / Hkv) (grouped-query attention).

from libc.math cimport sqrtf, INFINITY
from libc.stdint cimport int64_t, uint8_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"


cdef enum:
    QB = 16         # query rows per work item
    KB = 64         # keys per block
    MASK_NONE = 0
    MASK_BOOL = 1
    MASK_FLOAT = 2


cdef struct AttnArgs:
    const float *q
    const float *k
    const float *v
    float *y
    float *qk                   # NULL, or (B, Hq, Sq, T) contiguous
    int qk_mode                 # 0/1: after softcap, 2: after the bias, 3: after softmax
    Py_ssize_t B, Hq, Hkv, Sq, T, D, Dv
    Py_ssize_t q_sb, q_sh, q_ss
    Py_ssize_t k_sb, k_sh, k_ss
    Py_ssize_t v_sb, v_sh, v_ss
    Py_ssize_t y_sb, y_sh, y_ss
    const void *mask
    int mask_kind
    Py_ssize_t m_sb, m_sh, m_sq, mask_len
    const int64_t *kv_len       # NULL, or the valid keys per batch entry
    bint causal
    bint offset_from_kv_len     # causal/window offset = kv_len[b] - Sq (external cache)
    Py_ssize_t offset           # otherwise this (the internal cache's past length)
    Py_ssize_t left, right      # sliding window (-1: unbounded)
    float sqrt_scale
    float softcap               # <= 0: none
    Py_ssize_t nqb, items
    float *scratch
    Py_ssize_t scratch_floats


cdef inline float _tanh(float x) noexcept nogil:
    """tanh(x) = 1 - 2 / (exp(2x) + 1), with the vectorisable exp."""
    cdef float one = 1, two = 2
    return one - two / (exp_fp32(two * x) + one)


cdef void _key_bias(const AttnArgs *a, Py_ssize_t b, Py_ssize_t h, Py_ssize_t i,
                    Py_ssize_t j0, Py_ssize_t nj, Py_ssize_t offset, Py_ssize_t valid,
                    float *bias) noexcept nogil:
    """bias[j - j0] for keys j0 .. j0 + nj of query row i; -inf beyond nj up to KB."""
    cdef Py_ssize_t j, p, lim
    cdef float zero = 0, ninf = -INFINITY
    cdef const uint8_t *mb
    cdef const float *mf
    for j in range(KB):
        bias[j] = zero if j < nj else ninf
    if a.mask_kind == MASK_BOOL:
        mb = <const uint8_t *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq
        for j in range(nj):
            if j0 + j >= a.mask_len or mb[j0 + j] == 0:
                bias[j] = ninf
    elif a.mask_kind == MASK_FLOAT:
        mf = <const float *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq
        for j in range(nj):
            if j0 + j >= a.mask_len:
                bias[j] = ninf
            else:
                bias[j] = bias[j] + mf[j0 + j]
    p = i + offset
    if a.causal:
        lim = p - j0 + 1          # keys j0 + j with j < lim are allowed
        for j in range(max(<Py_ssize_t>0, lim), nj):
            bias[j] = ninf
    if a.left >= 0:
        lim = p - a.left - j0     # keys before p - left are masked
        for j in range(0, min(lim, nj)):
            bias[j] = ninf
    if a.right >= 0:
        lim = p + a.right - j0 + 1
        for j in range(max(<Py_ssize_t>0, lim), nj):
            bias[j] = ninf
    if valid >= 0:
        for j in range(max(<Py_ssize_t>0, valid - j0), nj):
            bias[j] = ninf


cdef void _attention_item(const AttnArgs *a, Py_ssize_t item, float *work) noexcept nogil:
    cdef Py_ssize_t D = a.D, Dv = a.Dv, T = a.T
    cdef Py_ssize_t qb = item % a.nqb, bh = item // a.nqb
    cdef Py_ssize_t h = bh % a.Hq, b = bh // a.Hq
    cdef Py_ssize_t hk = h // (a.Hq // a.Hkv)
    cdef Py_ssize_t i0 = qb * QB, i1 = min(i0 + QB, a.Sq), nr = i1 - i0
    cdef Py_ssize_t j0, nj, j, d, r, e, offset, valid = -1
    cdef float *qs = work                      # nr x D
    cdef float *kt = work + QB * D             # D x KB
    cdef float *acc = kt + D * KB              # nr x Dv
    cdef float s[KB]
    cdef float bias[KB]
    cdef float m[QB]
    cdef float l[QB]
    cdef bint allowed[QB]
    cdef float zero = 0, one = 1, ninf = -INFINITY
    cdef float qd, mb, mnew, alpha, pj, total, inv, c = a.softcap, ic
    cdef const float *src
    cdef const float *vrow
    cdef float *arow
    cdef float *qkrow
    cdef float *yrow
    cdef const float *kbase = a.k + b * a.k_sb + hk * a.k_sh
    cdef const float *vbase = a.v + b * a.v_sb + hk * a.v_sh

    offset = a.offset
    if a.kv_len != NULL:
        valid = <Py_ssize_t>a.kv_len[b]
        if a.offset_from_kv_len:
            offset = valid - a.Sq
    for r in range(nr):
        src = a.q + b * a.q_sb + h * a.q_sh + (i0 + r) * a.q_ss
        for d in range(D):
            qs[r * D + d] = src[d] * a.sqrt_scale
        for e in range(Dv):
            acc[r * Dv + e] = zero
        m[r] = ninf
        l[r] = zero
        allowed[r] = False
    ic = one / c if c > 0 else zero

    j0 = 0
    while j0 < T:
        nj = min(<Py_ssize_t>KB, T - j0)
        for j in range(nj):
            src = kbase + (j0 + j) * a.k_ss
            for d in range(D):
                kt[d * KB + j] = src[d] * a.sqrt_scale
        for j in range(nj, KB):
            for d in range(D):
                kt[d * KB + j] = zero
        for r in range(nr):
            for j in range(KB):
                s[j] = zero
            for d in range(D):
                qd = qs[r * D + d]
                for j in range(KB):
                    s[j] += qd * kt[d * KB + j]
            if c > 0:
                for j in range(KB):
                    s[j] = c * _tanh(s[j] * ic)
            qkrow = NULL
            if a.qk != NULL:
                qkrow = a.qk + ((b * a.Hq + h) * a.Sq + i0 + r) * T + j0
                if a.qk_mode <= 1:
                    for j in range(nj):
                        qkrow[j] = s[j]
            _key_bias(a, b, h, i0 + r, j0, nj, offset, valid, bias)
            mb = ninf
            for j in range(KB):
                s[j] = s[j] + bias[j]
                if bias[j] > ninf:
                    allowed[r] = True
                mb = s[j] if s[j] > mb else mb
            if qkrow != NULL and a.qk_mode >= 2:
                for j in range(nj):
                    qkrow[j] = s[j]
            if not (mb > ninf):
                continue        # every key of the block masked (or NaN): adds nothing
            mnew = mb if mb > m[r] else m[r]
            alpha = exp_fp32(m[r] - mnew)
            m[r] = mnew
            total = zero
            for j in range(KB):
                s[j] = exp_fp32(s[j] - mnew)
                total += s[j]
            l[r] = l[r] * alpha + total
            arow = acc + r * Dv
            if alpha != one:
                for e in range(Dv):
                    arow[e] *= alpha
            for j in range(nj):
                pj = s[j]
                vrow = vbase + (j0 + j) * a.v_ss
                for e in range(Dv):
                    arow[e] += pj * vrow[e]
        j0 += KB

    for r in range(nr):
        yrow = a.y + b * a.y_sb + h * a.y_sh + (i0 + r) * a.y_ss
        arow = acc + r * Dv
        if allowed[r] and l[r] > zero:
            inv = one / l[r]
            for e in range(Dv):
                yrow[e] = arow[e] * inv
        else:
            for e in range(Dv):
                yrow[e] = zero
        if a.qk != NULL and a.qk_mode == 3:
            qkrow = a.qk + ((b * a.Hq + h) * a.Sq + i0 + r) * T
            if allowed[r] and l[r] > zero:
                inv = one / l[r]
                mnew = m[r]
                for j in range(T):
                    qkrow[j] = exp_fp32(qkrow[j] - mnew) * inv
            else:
                for j in range(T):
                    qkrow[j] = zero


cdef void _attention_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const AttnArgs *a = <const AttnArgs *>p
    cdef Py_ssize_t i0, i1, it
    cdef float *work = a.scratch + tid * a.scratch_floats
    ppl_partition(a.items, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        _attention_item(a, it, work)


def make_attention_step(size_t q, size_t k, size_t v, size_t y, size_t qk, int qk_mode,
                        dims, q_strides, k_strides, v_strides, y_strides,
                        size_t mask, int mask_kind, mask_strides, Py_ssize_t mask_len,
                        size_t kv_len, bint causal, bint offset_from_kv_len,
                        Py_ssize_t offset, Py_ssize_t left, Py_ssize_t right, float scale,
                        float softcap, int num_threads, keep=None):
    """Step of Y = softmax(softcap(Q K^T * scale) + bias) V (see the top of this file).

    dims: (B, Hq, Hkv, Sq, T, D, Dv); *_strides: (batch, head, seq) in elements, unit stride
    along the head size; mask: 0 or its address, mask_kind 1 bool / 2 float32, its strides
    (batch, head, query) with unit stride along keys and mask_len keys; kv_len: 0 or B int64
    valid key counts; qk: 0 or a (B, Hq, Sq, T) output.  ``keep`` holds what they point into."""
    cdef Step step
    cdef AttnArgs *a
    cdef Py_ssize_t B, Hq, Hkv, Sq, T, D, Dv
    cdef float[:, ::1] scratch
    B, Hq, Hkv, Sq, T, D, Dv = dims
    if q == 0 or k == 0 or v == 0 or y == 0:
        raise ValueError("Q, K, V and Y must be given")
    if min(B, Hq, Hkv, Sq, D, Dv) < 1 or T < 0 or Hq % Hkv != 0:
        raise ValueError(f"attention dims {dims}: expected positive sizes, Hq % Hkv == 0")
    if mask_kind not in (MASK_NONE, MASK_BOOL, MASK_FLOAT) or (mask_kind and mask == 0):
        raise ValueError(f"mask kind {mask_kind} with address {mask}")
    if not 0 <= qk_mode <= 3:
        raise ValueError(f"qk_matmul_output_mode {qk_mode}: expected 0..3")
    num_threads = max(1, num_threads)
    cdef Py_ssize_t floats = QB * D + D * KB + QB * Dv
    floats = (floats + 15) // 16 * 16
    scratch_array = np.empty((num_threads, floats), np.float32)
    scratch = scratch_array
    cdef Py_ssize_t nqb = (Sq + QB - 1) // QB
    cdef double work = <double>B * Hq * Sq * T * (D + Dv)
    step = new_step(_attention_step, sizeof(AttnArgs), B * Hq * nqb > 1 and work > GRAIN,
                    (keep, scratch_array))
    a = <AttnArgs *>step.args
    a.q, a.k, a.v = <const float *>q, <const float *>k, <const float *>v
    a.y = <float *>y
    a.qk = <float *>qk
    a.qk_mode = qk_mode
    a.B, a.Hq, a.Hkv, a.Sq, a.T, a.D, a.Dv = B, Hq, Hkv, Sq, T, D, Dv
    a.q_sb, a.q_sh, a.q_ss = q_strides
    a.k_sb, a.k_sh, a.k_ss = k_strides
    a.v_sb, a.v_sh, a.v_ss = v_strides
    a.y_sb, a.y_sh, a.y_ss = y_strides
    a.mask = <const void *>mask
    a.mask_kind = mask_kind
    a.m_sb, a.m_sh, a.m_sq = mask_strides if mask_kind else (0, 0, 0)
    a.mask_len = mask_len
    a.kv_len = <const int64_t *>kv_len
    a.causal = causal
    a.offset_from_kv_len = offset_from_kv_len
    a.offset = offset
    a.left, a.right = left, right
    a.sqrt_scale = sqrtf(scale)
    a.softcap = softcap
    a.nqb = nqb
    a.items = B * Hq * nqb
    a.scratch = &scratch[0, 0]
    a.scratch_floats = floats
    return step


# ---------------------------------------------------------------------------------------
# Rows copy: dst[b, h, s, :] = src[b, h, s, :] for a (B, H, S) grid of rows of n floats, each
# side with its own (batch, head, seq) strides.  Writes the KV cache (present = past ++ new,
# in two steps into disjoint rows of present) and a 3-D K or V as 4-D.

cdef struct RowsCopyArgs:
    const float *src
    float *dst
    Py_ssize_t B, H, S, n
    Py_ssize_t s_sb, s_sh, s_ss, d_sb, d_sh, d_ss


cdef void _rows_copy_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RowsCopyArgs *a = <const RowsCopyArgs *>p
    cdef Py_ssize_t r0, r1, r, s, bh, h, b, e
    cdef const float *src
    cdef float *dst
    ppl_partition(a.B * a.H * a.S, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        s = r % a.S
        bh = r // a.S
        h = bh % a.H
        b = bh // a.H
        src = a.src + b * a.s_sb + h * a.s_sh + s * a.s_ss
        dst = a.dst + b * a.d_sb + h * a.d_sh + s * a.d_ss
        for e in range(a.n):
            dst[e] = src[e]


def make_rows_copy_step(size_t src, size_t dst, dims, src_strides, dst_strides, keep=None):
    """Step copying a (B, H, S) grid of rows of n floats: dims (B, H, S, n)."""
    cdef Step step
    cdef RowsCopyArgs *a
    if src == 0 or dst == 0 or len(dims) != 4 or min(dims) < 0:
        raise ValueError(f"rows copy of dims {dims}")
    step = new_step(_rows_copy_step, sizeof(RowsCopyArgs),
                    dims[0] * dims[1] * dims[2] > 1 and int(np.prod(dims)) > GRAIN, keep)
    a = <RowsCopyArgs *>step.args
    a.src, a.dst = <const float *>src, <float *>dst
    a.B, a.H, a.S, a.n = dims
    a.s_sb, a.s_sh, a.s_ss = src_strides
    a.d_sb, a.d_sh, a.d_ss = dst_strides
    return step


# ---------------------------------------------------------------------------------------
# RotaryEmbedding.  One row is one (batch b, position s, head h) vector of D values; its
# first R (rotary_embedding_dim) are rotated pairwise by the (cos, sin) of its position,
# the rest copied:
#
#     x1, x2 = x[:R/2], x[R/2:R]           (interleaved: x[0:R:2], x[1:R:2])
#     y1 = cos * x1 - sin * x2;  y2 = sin * x1 + cos * x2
#
# The caches are read at row position_ids[b, s] of a (P, R/2) table, or, without
# position_ids, at (b, s) of a (B, S, R/2) table given with strides (0 where broadcast).

cdef struct RotaryArgs:
    const float *x
    float *y
    const float *cos
    const float *sin
    const int64_t *pos          # NULL, or (B, S)
    Py_ssize_t B, S, H, D, R
    Py_ssize_t P                    # rows of the caches (position ids index them)
    Py_ssize_t x_sb, x_ss, x_sh     # unit stride along D; y has the same layout
    Py_ssize_t c_sb, c_ss, c_sp     # cache strides: batch, seq (no pos) / position row
    bint interleaved


cdef void _rotary_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RotaryArgs *a = <const RotaryArgs *>p
    cdef Py_ssize_t r0, r1, r, h, bs, s, b, e, half = a.R // 2, off
    cdef const float *x
    cdef float *y
    cdef const float *cs
    cdef const float *sn
    cdef float x1, x2
    ppl_partition(a.B * a.S * a.H, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        h = r % a.H
        bs = r // a.H
        s = bs % a.S
        b = bs // a.S
        x = a.x + b * a.x_sb + s * a.x_ss + h * a.x_sh
        y = a.y + b * a.x_sb + s * a.x_ss + h * a.x_sh
        if a.pos != NULL:
            off = a.pos[b * a.S + s]
            if off < 0:
                off += a.P          # numpy's negative indexing, as the reference reads it
            if off < 0 or off >= a.P:
                for e in range(a.D):
                    y[e] = 0        # no such position: zeros rather than a stray read
                continue
            off = off * a.c_sp
        else:
            off = b * a.c_sb + s * a.c_ss
        cs = a.cos + off
        sn = a.sin + off
        if a.interleaved:
            for e in range(half):
                x1 = x[2 * e]
                x2 = x[2 * e + 1]
                y[2 * e] = cs[e] * x1 - sn[e] * x2
                y[2 * e + 1] = sn[e] * x1 + cs[e] * x2
        else:
            for e in range(half):
                x1 = x[e]
                x2 = x[half + e]
                y[e] = cs[e] * x1 - sn[e] * x2
                y[half + e] = sn[e] * x1 + cs[e] * x2
        for e in range(a.R, a.D):
            y[e] = x[e]


def make_rotary_step(size_t x, size_t y, size_t cos, size_t sin, size_t pos, dims,
                     x_strides, cache_strides, Py_ssize_t positions, bint interleaved,
                     keep=None):
    """Step of RotaryEmbedding (see above): dims (B, S, H, D, R); x_strides (batch, seq,
    head) of x and y; cache_strides (batch, seq, position row) of cos and sin; pos: 0 or
    the (B, S) int64 position ids into the caches' ``positions`` rows (negative ones count
    from the end; a row out of range gives zeros)."""
    cdef Step step
    cdef RotaryArgs *a
    B, S, H, D, R = dims
    if x == 0 or y == 0 or cos == 0 or sin == 0:
        raise ValueError("x, y, cos and sin must be given")
    if R % 2 or R > D or R < 0:
        raise ValueError(f"rotary dims {dims}: R must be even and at most D")
    step = new_step(_rotary_step, sizeof(RotaryArgs), B * S * H > 1 and B * S * H * D > GRAIN,
                    keep)
    a = <RotaryArgs *>step.args
    a.x, a.y = <const float *>x, <float *>y
    a.cos, a.sin = <const float *>cos, <const float *>sin
    a.pos = <const int64_t *>pos
    a.B, a.S, a.H, a.D, a.R = B, S, H, D, R
    a.P = positions
    a.x_sb, a.x_ss, a.x_sh = x_strides
    a.c_sb, a.c_ss, a.c_sp = cache_strides
    a.interleaved = interleaved
    return step


# ---------------------------------------------------------------------------------------
# Test wrappers: build a step on numpy arrays and run it.

def _addr(array):
    return 0 if array is None else array.__array_interface__["data"][0]


def _strides(array, n):
    """The element strides of the first n dims of a float32/int array."""
    return tuple(s // array.itemsize for s in array.strides[:n])


def attention_fp32(q, k, v, mask=None, kv_len=None, bint causal=False, Py_ssize_t offset=0,
                   float scale=0, float softcap=0, Py_ssize_t left=-1, Py_ssize_t right=-1,
                   int qk_mode=-1, int num_threads=1):
    """Test wrapper: 4-D float32 Q (B, Hq, Sq, D), K, V (B, Hkv, T, D / Dv); mask (B, Hq,
    Sq, <= T) bool or float32 (broadcast views allowed); returns Y (and the QK output when
    qk_mode >= 0)."""
    for t in (q, k, v):
        if t.dtype != np.float32 or t.ndim != 4 or t.strides[3] != 4:
            raise ValueError("expected 4-D float32 Q, K, V with unit stride along the head")
    B, Hq, Sq, D = q.shape
    Hkv, T, Dv = k.shape[1], k.shape[2], v.shape[3]
    y = np.zeros((B, Hq, Sq, Dv), np.float32)
    qk = np.zeros((B, Hq, Sq, T), np.float32) if qk_mode >= 0 else None
    kind, mstrides, mlen = MASK_NONE, (0, 0, 0), 0
    if mask is not None:
        kind = MASK_BOOL if mask.dtype == np.bool_ else MASK_FLOAT
        mstrides, mlen = _strides(mask, 3), mask.shape[3]
    lens = None if kv_len is None else np.ascontiguousarray(kv_len, np.int64)
    step = make_attention_step(
        _addr(q), _addr(k), _addr(v), _addr(y), _addr(qk), max(qk_mode, 0),
        (B, Hq, Hkv, Sq, T, D, Dv), _strides(q, 3), _strides(k, 3), _strides(v, 3),
        _strides(y, 3), _addr(mask), kind, mstrides, mlen, _addr(lens), causal, False,
        offset, left, right, scale if scale > 0 else 1 / np.sqrt(D), softcap, num_threads,
        (q, k, v, y, qk, mask, lens))
    run_steps([step], num_threads)
    return y if qk is None else (y, qk)


def rotary_fp32(x, cos, sin, pos=None, bint interleaved=False, Py_ssize_t rotary_dim=0,
                int num_threads=1):
    """Test wrapper: x (B, S, H, D) float32 (any strides with unit stride along D); cos/sin
    (P, R/2) with pos (B, S), or (B, S, R/2) without."""
    B, S, H, D = x.shape
    R = rotary_dim or D
    y = np.empty_like(x)
    cos = np.ascontiguousarray(cos, np.float32)
    sin = np.ascontiguousarray(sin, np.float32)
    if pos is not None:
        pos = np.ascontiguousarray(pos, np.int64)
        cstrides, P = (0, 0, cos.strides[0] // 4), cos.shape[0]
    else:
        cstrides, P = (cos.strides[0] // 4, cos.strides[1] // 4, 0), 0
    step = make_rotary_step(_addr(x), _addr(y), _addr(cos), _addr(sin), _addr(pos),
                            (B, S, H, D, R), _strides(x, 3), cstrides, P, interleaved,
                            (x, y, cos, sin, pos))
    run_steps([step], num_threads)
    return y
