# Attention (opset 23-25) and RotaryEmbedding (23) as compiled steps of the run plan.
#
# Written once and included by _attention_fp32_{avx512,fma,sse}.pyx after each defines
# PPL_VLEN, so each tier gets its own vector code.
#
#     make_attention_step(...)    Y = softmax(softcap(Q K^T * scale) + bias) V, flash-style
#     make_rows_copy_step(...)    strided copy of rows (the KV cache: present = past ++ new)
#     make_rotary_step(...)       rotate pairs of a head's leading dims by (cos, sin)
#
# Attention.  A work item is (batch b, query head h, block of up to QROWS query rows); items
# are independent (each writes its own rows of Y and of the optional QK output) and claimed
# by the team's shares as the step runs (ppl_next_items), one step, no barrier.  Inside an
# item the keys are taken kb at a time (all of them when that is at most KB_ONE_BLOCK, else
# KB), with a running maximum m and sum l per row (flash attention):
#
#     S    = Q_blk K_j^T * scale                      brgemm: rows x kb scores in scratch
#     s    = softcap(S) + bias_j                      per row, in place
#     m'   = max(m, max s);  l = l * exp(m - m') + sum exp(s - m');  acc *= exp(m - m')
#     acc += exp(s - m') V_j                          brgemm, accumulating into acc
#
# and Y = acc / l at the end.  Both products run on the brgemm microkernel of GEMM and
# convolution (_brgemm_fp32.h): Q is its A operand as it lies in memory (row stride q_ss),
# the probabilities are the A of the second product, and K^T and V are packed into its
# PPL_NB-wide panels.  A thread packs the K and V of a KV head once and keeps them while its
# next items read the same head (its items are consecutive: the other query blocks of the
# head, and the query heads sharing it under grouped-query attention); when one head's K
# and V would not fit in WHOLE_KV_FLOATS, each key block is packed as it is used.  The row
# work (max, exp and sum, the final scaling: _rows_fp32.h; softcap: _attention_fp32.h) is
# vector code.
#
# bias_j is the attention mask (additive float, or bool: False -> -inf; keys past the
# mask's length are masked), the causal and sliding-window frontiers (offset-aligned: query
# i attends key j iff j <= i + offset) and the per-batch valid length (nonpad_kv_seqlen).
# Key blocks that no row of the item may attend (past the causal frontier, before the
# window, past the valid length; the leading and trailing keys the mask closes to every row:
# padding, or a causal mask an exporter wrote as a float mask, _open_keys) are skipped,
# unless the QK output asks for every score.  A NaN score makes its row NaN, as in softmax.
# A row whose scores are -inf everywhere gives Y = 0, as the spec's fully-masked-row rule
# says.  Q, K, V, Y are addressed through (batch, head, seq) strides with unit stride along
# the head size, so the 3-D (B, S, H*D) and 4-D (B, H, S, D) forms need no transpose; a
# query head h reads KV head h / (Hq / Hkv) (grouped-query attention).

from libc.math cimport INFINITY, NAN
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy, memset

import numpy as np

from pplpy.runtime.step cimport (Step, new_step, ppl_claim_size, ppl_fault, ppl_fault_record,
                                  ppl_item_queue, ppl_next_items, ppl_partition, set_fault)
from pplpy.engines.x86.impls.aligned import aligned_empty
from pplpy.engines.x86.impls.fault_text import valid_indices
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"
include "_brgemm_fp32.pxi"

cdef extern from "_attention_fp32.h" nogil:
    float ppl_row_max(const float *s, Py_ssize_t n)
    float ppl_row_exp_sum(const float *x, float *y, Py_ssize_t n, float m)
    void ppl_row_softmax_out(const float *x, float *y, Py_ssize_t n, float m, float inv)
    void ppl_attn_row_softcap(float *s, Py_ssize_t n, float c)
    void ppl_row_scale(const float *x, float *y, Py_ssize_t n, float f)
    void ppl_attn_prefetch(const float *p, Py_ssize_t n)
    Py_ssize_t ppl_attn_first_open(const float *m, Py_ssize_t n)
    Py_ssize_t ppl_attn_last_open(const float *m, Py_ssize_t n)
    Py_ssize_t ppl_attn_first_true(const uint8_t *m, Py_ssize_t n)
    Py_ssize_t ppl_attn_last_true(const uint8_t *m, Py_ssize_t n)


cdef enum:
    QROWS = 64              # query rows per work item at most
    KB = 128                # keys per score block: a multiple of PPL_NB at every tier ...
    KB_ONE_BLOCK = 256      # ... unless all of them (rounded up to PPL_NB) are at most this
    S_FLOATS = QROWS * KB   # the score block (query rows x keys) at most: 32 KB, L1 (64 KB,
                            # 64-row blocks of 224 keys: 1.57 against 1.55 ms at ViT's size)
    CAUSAL_QROWS = 32       # query rows per work item at most under a causal mask
    WHOLE_KV_FLOATS = 1 << 20   # one KV head's packed K and V kept whole up to this (4 MB)
    PACK_AHEAD = 8          # keys ahead whose K and V slices _pack_kv asks for
    MAX_PIECES = 16         # k = 256 at most as a batch of PPL_CB-long pieces
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
    float scale
    float softcap               # <= 0: none
    Py_ssize_t qrows, nqb, items
    Py_ssize_t kb               # keys per score block, the row stride of the scores
    Py_ssize_t dvp              # Dv rounded up to whole panels: the row stride of acc
    bint whole                  # K and V packed whole per KV head (else per key block)
    Py_ssize_t kv_rows          # rows of a packed V panel: T rounded up to PPL_NB, or kb
    Py_ssize_t s_off, acc_off, ml_off, kp_off, vp_off   # a thread's scratch, in floats
    float *scratch
    Py_ssize_t scratch_floats
    int max_threads
    Py_ssize_t claim              # items a share claims at a time (ppl_next_items)
    ppl_item_queue queue


cdef void _pack_kv(const AttnArgs *a, const float *kh, const float *vh, Py_ssize_t j0,
                   Py_ssize_t n, float *kp, float *vp) noexcept nogil:
    """Keys j0 .. j0 + n of one KV head as brgemm B panels: kp[p, d, j] = K[j0 + p*NB + j, d]
    (zero past n), vp[pv, j, e] = V[j0 + j, pv*NB + e] (zero past Dv; kv_rows rows a panel).
    Key by key, K and V together, each key's two slices asked for PACK_AHEAD keys ahead:
    they are rows of the projection's output (a packed QKV's rows are 9 KB apart at
    BERT's size), and the copy waited on each row in turn (ViT-B/16: 64% of the pack's
    samples in `perf` on one load).  Measured: the BERT-size op 0.65-0.67 -> 0.63-0.64 ms,
    the ViT-size one 1.57-1.60 -> 1.54-1.55."""
    cdef Py_ssize_t p, j, jj, d, e, pv, nk, ne, key
    cdef float zero = 0
    cdef float *panel
    cdef const float *src
    for key in range(min(n, <Py_ssize_t>PACK_AHEAD)):
        ppl_attn_prefetch(kh + (j0 + key) * a.k_ss, a.D)
        ppl_attn_prefetch(vh + (j0 + key) * a.v_ss, a.Dv)
    for p in range((n + PPL_NB - 1) // PPL_NB):
        panel = kp + p * a.D * PPL_NB
        nk = min(<Py_ssize_t>PPL_NB, n - p * PPL_NB)
        for j in range(nk):
            jj = p * PPL_NB + j
            if jj + PACK_AHEAD < n:
                ppl_attn_prefetch(kh + (j0 + jj + PACK_AHEAD) * a.k_ss, a.D)
                ppl_attn_prefetch(vh + (j0 + jj + PACK_AHEAD) * a.v_ss, a.Dv)
            src = kh + (j0 + jj) * a.k_ss
            for d in range(a.D):
                panel[d * PPL_NB + j] = src[d]
            src = vh + (j0 + jj) * a.v_ss
            for pv in range(a.dvp // PPL_NB):
                ne = min(<Py_ssize_t>PPL_NB, a.Dv - pv * PPL_NB)
                memcpy(vp + (pv * a.kv_rows + jj) * PPL_NB, src + pv * PPL_NB,
                       ne * sizeof(float))
                for e in range(ne, PPL_NB):
                    vp[(pv * a.kv_rows + jj) * PPL_NB + e] = zero
        for d in range(a.D):
            for j in range(nk, PPL_NB):
                panel[d * PPL_NB + j] = zero


cdef inline void _mask_range(float *s, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """s[lo:hi] = -inf (an empty or reversed range does nothing)."""
    cdef Py_ssize_t j
    cdef float ninf = -INFINITY
    for j in range(max(<Py_ssize_t>0, lo), hi):
        s[j] = ninf


cdef void _apply_bias(const AttnArgs *a, Py_ssize_t b, Py_ssize_t h, Py_ssize_t i,
                      Py_ssize_t j0, Py_ssize_t nj, Py_ssize_t offset, Py_ssize_t valid,
                      float *s) noexcept nogil:
    """s[j] += bias of query row i and key j0 + j, for j < nj (see the top of the file)."""
    cdef Py_ssize_t j, lim, p = i + offset
    cdef float ninf = -INFINITY
    cdef const uint8_t *mb
    cdef const float *mf
    if a.mask_kind != MASK_NONE:
        lim = min(nj, max(<Py_ssize_t>0, a.mask_len - j0))
        if a.mask_kind == MASK_FLOAT:
            mf = <const float *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq + j0
            for j in range(lim):
                s[j] = s[j] + mf[j]
        else:
            mb = <const uint8_t *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq + j0
            for j in range(lim):
                s[j] = s[j] if mb[j] != 0 else ninf
        _mask_range(s, lim, nj)
    if a.causal:
        _mask_range(s, p - j0 + 1, nj)
    if a.left >= 0:
        _mask_range(s, 0, min(p - a.left - j0, nj))
    if a.right >= 0:
        _mask_range(s, p + a.right - j0 + 1, nj)
    if valid >= 0:
        _mask_range(s, valid - j0, nj)


cdef void _open_keys(const AttnArgs *a, Py_ssize_t b, Py_ssize_t h, Py_ssize_t i0,
                     Py_ssize_t i1, Py_ssize_t offset, Py_ssize_t *j_lo,
                     Py_ssize_t *j_hi) noexcept nogil:
    """Narrow the keys [j_lo, j_hi) an item scores to those its mask leaves open to at least
    one of its rows i0 .. i1 - 1: the leading and trailing keys the mask closes to every row
    (left and right padding; the keys past the diagonal of a causal mask that an exporter
    spelled as a float mask) are not scored.  Exact: a closed key's probability is 0 either
    way, since its score plus -FLT_MAX (or -inf) lies at least 2e31 below an open key's
    (scores far below that assumed).  A float row that has no open key keeps the whole range
    for the item: softmax averages over such a row's keys at -FLT_MAX."""
    cdef Py_ssize_t i, p, lo, hi, first, last, rows_end = i1
    cdef Py_ssize_t lo_all = j_hi[0], hi_all = j_lo[0]
    cdef const float *mf
    cdef const uint8_t *mb
    if a.m_sq == 0 and not a.causal and a.left < 0 and a.right < 0:
        rows_end = i0 + 1   # every row reads one mask row over the same keys
    for i in range(i0, rows_end):
        p = i + offset
        lo, hi = j_lo[0], j_hi[0]   # the mask's length and the valid keys are in j_hi
        if a.causal:
            hi = min(hi, p + 1)
        if a.left >= 0:
            lo = max(lo, p - a.left)
        if a.right >= 0:
            hi = min(hi, p + a.right + 1)
        if lo >= hi:        # no key at all: Y = 0 however many are scored
            continue
        if a.mask_kind == MASK_FLOAT:
            mf = <const float *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq + lo
            first = ppl_attn_first_open(mf, hi - lo)
            if first == hi - lo:
                return
            last = ppl_attn_last_open(mf, hi - lo)
        else:
            mb = <const uint8_t *>a.mask + b * a.m_sb + h * a.m_sh + i * a.m_sq + lo
            first = ppl_attn_first_true(mb, hi - lo)
            if first == hi - lo:    # every key -inf: Y = 0 however many are scored
                continue
            last = ppl_attn_last_true(mb, hi - lo)
        lo_all = min(lo_all, lo + first)
        hi_all = max(hi_all, lo + last + 1)
    if lo_all >= hi_all:    # no row has an open key: every row's output is 0
        j_hi[0] = j_lo[0]
        return
    j_lo[0] = max(j_lo[0], lo_all // PPL_NB * PPL_NB)   # whole packing: a panel start
    j_hi[0] = min(j_hi[0], hi_all)


cdef inline void _product(int mm, int nv, const float *a, Py_ssize_t lda, const float *panel,
                          Py_ssize_t k, float *c, Py_ssize_t ldc,
                          const ppl_epilogue *ep) noexcept nogil:
    """C[mm x nv] = epilogue(A[mm x k] . panel[k x NB]) on the brgemm, the k steps cut into
    a batch of PPL_CB-long pieces when k allows: the microkernel's fully unrolled case."""
    cdef const float *a_list[MAX_PIECES]
    cdef const float *b_list[MAX_PIECES]
    cdef Py_ssize_t i, n = k // PPL_CB
    if k % PPL_CB != 0 or n > MAX_PIECES or n == 0:
        ppl_brgemm(mm, nv, 1, &a, &panel, k, lda, c, ldc, PPL_CB, ep)
        return
    for i in range(n):
        a_list[i] = a + i * PPL_CB
        b_list[i] = panel + i * PPL_CB * PPL_NB
    ppl_brgemm(mm, nv, n, a_list, b_list, PPL_CB, lda, c, ldc, PPL_CB, ep)


cdef void _attention_item(const AttnArgs *a, Py_ssize_t item, float *work,
                          Py_ssize_t *packed_head) noexcept nogil:
    """Rows of one (batch, head, query block); packed_head names the KV head whose K and V
    the thread's scratch holds (whole packing), -1 for none."""
    cdef Py_ssize_t D = a.D, Dv = a.Dv, dvp = a.dvp
    cdef Py_ssize_t qb = item % a.nqb, bh = item // a.nqb
    cdef Py_ssize_t h = bh % a.Hq, b = bh // a.Hq
    cdef Py_ssize_t hk = h // (a.Hq // a.Hkv)
    cdef Py_ssize_t i0 = qb * a.qrows, i1 = min(i0 + a.qrows, a.Sq), nr = i1 - i0
    cdef float *s = work + a.s_off          # nr x kb scores, then probabilities
    cdef float *acc = work + a.acc_off      # nr x dvp
    cdef float *m = work + a.ml_off         # running maxima
    cdef float *l = m + QROWS               # running sums
    cdef float *kp = work + a.kp_off
    cdef float *vp = work + a.vp_off
    cdef const float *kh = a.k + b * a.k_sb + hk * a.k_sh
    cdef const float *vh = a.v + b * a.v_sb + hk * a.v_sh
    cdef const float *q0 = a.q + b * a.q_sb + h * a.q_sh + i0 * a.q_ss
    cdef Py_ssize_t offset = a.offset, valid = -1, j_lo = 0, j_hi = a.T, last
    cdef Py_ssize_t j0, nj, p, pv, r, r0, voff, tile, e
    # near-equal tiles (50 rows: 13 + 13 + 12 + 12, not 14 + 14 + 14 + 8): the first
    # `taller` have one row more
    cdef Py_ssize_t ntiles = (nr + PPL_MR - 1) // PPL_MR
    cdef Py_ssize_t tile_rows = nr // ntiles
    cdef Py_ssize_t taller = nr - tile_rows * ntiles
    cdef int mm, nv
    cdef float zero = 0, one = 1, ninf = -INFINITY, c = a.softcap, mb, alpha, inv
    cdef float *row
    cdef float *qkrow
    cdef float *yrow
    cdef const float *b_ptr
    cdef const float *kblk
    cdef ppl_epilogue ep_s, ep_pv
    memset(&ep_s, 0, sizeof(ep_s))
    ep_s.alpha = a.scale
    ep_pv = ep_s
    ep_pv.alpha = one
    ep_pv.accumulate = 1

    if a.kv_len != NULL:
        valid = <Py_ssize_t>a.kv_len[b]
        if a.offset_from_kv_len:
            offset = valid - a.Sq
    if a.qk == NULL:  # keys no row of the item may attend need not be scored
        last = i1 - 1 + offset
        if a.causal:
            j_hi = min(j_hi, last + 1)
        if a.right >= 0:
            j_hi = min(j_hi, last + a.right + 1)
        if valid >= 0:
            j_hi = min(j_hi, valid)
        if a.mask_kind != MASK_NONE:
            j_hi = min(j_hi, a.mask_len)
        if a.left >= 0:
            j_lo = max(<Py_ssize_t>0, i0 + offset - a.left)
        j_lo = j_lo // PPL_NB * PPL_NB      # whole packing reads panels from a panel start
        if a.mask_kind != MASK_NONE and j_lo < j_hi:
            _open_keys(a, b, h, i0, i1, offset, &j_lo, &j_hi)
    if a.whole and j_lo < j_hi and packed_head[0] != b * a.Hkv + hk:
        _pack_kv(a, kh, vh, 0, a.T, kp, vp)
        packed_head[0] = b * a.Hkv + hk
    memset(acc, 0, nr * dvp * sizeof(float))
    for r in range(nr):
        m[r] = ninf
        l[r] = zero

    j0 = j_lo
    while j0 < j_hi:
        nj = min(a.kb, j_hi - j0)
        if a.whole:
            kblk = kp + (j0 // PPL_NB) * D * PPL_NB
            voff = j0
        else:
            _pack_kv(a, kh, vh, j0, nj, kp, vp)
            kblk = kp
            voff = 0
        # S = Q_blk K_j^T * scale, one panel of keys at a time (it stays in L1).
        for p in range((nj + PPL_NB - 1) // PPL_NB):
            nv = <int>min(<Py_ssize_t>PPL_NB, nj - p * PPL_NB)
            b_ptr = kblk + p * D * PPL_NB
            r0 = 0
            for tile in range(ntiles):
                mm = <int>(tile_rows + (1 if tile < taller else 0))
                _product(mm, nv, q0 + r0 * a.q_ss, a.q_ss, b_ptr, D,
                         s + r0 * a.kb + p * PPL_NB, a.kb, &ep_s)
                r0 += mm
        # Online softmax, row by row: the scores become exp(s - m).
        for r in range(nr):
            row = s + r * a.kb
            if c > 0:
                ppl_attn_row_softcap(row, nj, c)
            qkrow = NULL
            if a.qk != NULL:
                qkrow = a.qk + ((b * a.Hq + h) * a.Sq + i0 + r) * a.T + j0
                if a.qk_mode <= 1:
                    memcpy(qkrow, row, nj * sizeof(float))
            _apply_bias(a, b, h, i0 + r, j0, nj, offset, valid, row)
            if qkrow != NULL and a.qk_mode >= 2:
                memcpy(qkrow, row, nj * sizeof(float))
            mb = ppl_row_max(row, nj)
            if mb != mb or m[r] != m[r]:    # a NaN score: the row's output is NaN
                m[r] = NAN
                memset(row, 0, nj * sizeof(float))
                continue
            if not (mb > ninf):     # every key of the block masked: adds nothing
                memset(row, 0, nj * sizeof(float))
                continue
            if mb > m[r]:
                if m[r] > ninf:
                    alpha = exp_fp32(m[r] - mb)
                    l[r] = l[r] * alpha
                    ppl_row_scale(acc + r * dvp, acc + r * dvp, Dv, alpha)
                m[r] = mb
            l[r] = l[r] + ppl_row_exp_sum(row, row, nj, m[r])
        # acc += P V_j, one panel of value columns at a time.
        for pv in range(dvp // PPL_NB):
            nv = <int>min(<Py_ssize_t>PPL_NB, Dv - pv * PPL_NB)
            b_ptr = vp + (pv * a.kv_rows + voff) * PPL_NB
            r0 = 0
            for tile in range(ntiles):
                mm = <int>(tile_rows + (1 if tile < taller else 0))
                _product(mm, nv, s + r0 * a.kb, a.kb, b_ptr, nj,
                         acc + r0 * dvp + pv * PPL_NB, dvp, &ep_pv)
                r0 += mm
        j0 += nj

    for r in range(nr):
        yrow = a.y + b * a.y_sb + h * a.y_sh + (i0 + r) * a.y_ss
        qkrow = NULL
        if a.qk != NULL and a.qk_mode == 3:
            qkrow = a.qk + ((b * a.Hq + h) * a.Sq + i0 + r) * a.T
        if m[r] != m[r]:    # a NaN score: Y and the probabilities NaN, as softmax gives
            for e in range(Dv):
                yrow[e] = NAN
            if qkrow != NULL:
                for e in range(a.T):
                    qkrow[e] = NAN
        elif m[r] > ninf:
            inv = one / l[r]
            ppl_row_scale(acc + r * dvp, yrow, Dv, inv)
            if qkrow != NULL:
                ppl_row_softmax_out(qkrow, qkrow, a.T, m[r], inv)
        else:               # no key attended: Y = 0 (and probabilities 0)
            memset(yrow, 0, Dv * sizeof(float))
            if qkrow != NULL:
                memset(qkrow, 0, a.T * sizeof(float))


cdef void _attention_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const AttnArgs *a = <const AttnArgs *>p
    cdef Py_ssize_t i0, i1, it, packed_head = -1
    if nthreads > a.max_threads:  # a larger team than the scratch was made for
        if tid >= a.max_threads:
            return
        nthreads = a.max_threads
    cdef float *work = a.scratch + tid * a.scratch_floats
    cdef int calls = 0
    while ppl_next_items(<ppl_item_queue *>&a.queue, a.items, a.claim, tid, nthreads, &calls,
                         &i0, &i1):
        for it in range(i0, i1):
            _attention_item(a, it, work, &packed_head)


cdef inline Py_ssize_t _round16(Py_ssize_t n) noexcept:
    return (n + 15) // 16 * 16


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
    cdef Py_ssize_t dvp = (Dv + PPL_NB - 1) // PPL_NB * PPL_NB
    cdef Py_ssize_t t_pad = (T + PPL_NB - 1) // PPL_NB * PPL_NB
    # Keys up to KB_ONE_BLOCK are scored in one block, with query blocks short enough that
    # the scores stay in S_FLOATS: no rescaling of the running sums, one maximum and one sum
    # per row.  ViT-B/16's 197 keys had gone in blocks of 128 and 69; as one block of 224
    # (query blocks of 33 rows), its attention op 1.72-1.78 -> 1.65-1.68 ms, best of a
    # 2-second loop, three rounds alternating (Zen 4, avx512).  Longer rows go KB keys at a
    # time.
    cdef Py_ssize_t kb = KB if t_pad > KB_ONE_BLOCK else max(t_pad, <Py_ssize_t>PPL_NB)
    cdef Py_ssize_t qmax = min(<Py_ssize_t>QROWS, max(<Py_ssize_t>PPL_MR, S_FLOATS // kb))
    # Under a causal mask an item scores keys only up to its last row's position: shorter
    # query blocks leave more of the triangle unscored (S = 128, one key block: 64-row
    # blocks score 3/4 of the S x S scores, 32-row ones 5/8).  A GPT-2-size op (12 heads of
    # 64, S = 128): 0.557-0.560 -> 0.488-0.491 ms, best of a 2-second loop, three rounds
    # alternating (Zen 4, avx512); 16 rows 0.470-0.497, 24 rows 0.508-0.510.
    if causal:
        qmax = min(qmax, <Py_ssize_t>CAUSAL_QROWS)
    # Query blocks of equal size, at most qmax rows.
    cdef Py_ssize_t nqb = (Sq + qmax - 1) // qmax
    cdef Py_ssize_t qrows = (Sq + nqb - 1) // nqb
    cdef bint whole = t_pad * (D + dvp) <= WHOLE_KV_FLOATS
    cdef Py_ssize_t kv_rows = t_pad if whole else kb
    cdef Py_ssize_t s_off = 0
    cdef Py_ssize_t acc_off = s_off + _round16(qrows * kb)
    cdef Py_ssize_t ml_off = acc_off + _round16(qrows * dvp)
    cdef Py_ssize_t kp_off = ml_off + 2 * QROWS
    cdef Py_ssize_t vp_off = kp_off + _round16(kv_rows * D)
    cdef Py_ssize_t floats = vp_off + _round16(kv_rows * dvp)
    scratch_array = aligned_empty((num_threads, floats), np.float32)  # floats % 16 == 0
    scratch = scratch_array
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
    a.scale = scale
    a.softcap = softcap
    a.qrows, a.nqb, a.items = qrows, nqb, B * Hq * nqb
    a.kb = kb
    step.work_items = a.items
    a.dvp, a.whole, a.kv_rows = dvp, whole, kv_rows
    a.s_off, a.acc_off, a.ml_off, a.kp_off, a.vp_off = s_off, acc_off, ml_off, kp_off, vp_off
    a.scratch = &scratch[0, 0]
    a.scratch_floats = floats
    a.max_threads = num_threads
    # Items (query blocks) are claimed as the step runs (ppl_next_items); a share keeps its
    # packed K and V for its next claim of the same head.
    a.claim = _claim_chunk(ppl_claim_size(a.items, num_threads))
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
    ppl_fault fault                 # a position id out of range, fed at run time


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
                ppl_fault_record(<ppl_fault *>&a.fault, a.pos[b * a.S + s])
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
    from the end; a row out of range gives zeros and makes the run raise an InputError)."""
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
    if pos != 0:
        set_fault(step, &a.fault, f"position id {{value}} is out of range for caches of "
                  f"{positions} rows ({valid_indices(positions)})")
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
