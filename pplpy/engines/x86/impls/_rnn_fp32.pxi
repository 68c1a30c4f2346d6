# The recurrence of RNN, GRU and LSTM as compiled steps.
#
# The op runs as up to three steps (the kernel in ops/onnx/rnn.py builds them):
#   1. the input projection xw = X @ W^T of every time step, batch entry and direction at
#      once: one GEMM on gemm_fp32's microkernel (W packed when the kernel is made);
#   2. R^T packed into scratch, only when R is computed at run time (make_pack_r_step);
#   3. the recurrence (make_recurrence_step), below.
#
# Directions and batch entries are independent over the whole sequence, so the recurrence
# is one step whose work items are (direction, block of up to BB batch rows): each item runs
# its own time loop from start to end and no barrier is needed.  Parallelising inside a time
# step (over hidden units) would need a barrier per time step; a batch-1, one-direction LSTM
# therefore runs its recurrence on one thread (see rnn.py).
#
# Per time step an item computes, for each row r of its block (vectorised along the gates):
#     g_r = xw[t_r, r] + Wb + Rb + h_r @ R^T        (R^T packed [H, G*H]: rows stream once
#                                                   per block, not once per batch row)
# then the gate math of the op on g_r, in place, with the activations applied array-wise.
# Written once, included by _rnn_fp32_{avx512,fma,sse}.pyx.

import numpy as np
from libc.stdint cimport int32_t
from libc.string cimport memcpy, memset

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"


cdef enum:
    BB = 4                  # batch rows per work item at most (they share R^T's loads)
    KIND_RNN = 0
    KIND_GRU = 1
    KIND_LSTM = 2

cdef enum:
    ACT_RELU = 0
    ACT_TANH = 1
    ACT_SIGMOID = 2
    ACT_AFFINE = 3
    ACT_LEAKY_RELU = 4
    ACT_THRESHOLDED_RELU = 5
    ACT_SCALED_TANH = 6
    ACT_HARD_SIGMOID = 7
    ACT_ELU = 8
    ACT_SOFTSIGN = 9
    ACT_SOFTPLUS = 10

ACTIVATIONS = {"relu": ACT_RELU, "tanh": ACT_TANH, "sigmoid": ACT_SIGMOID,
               "affine": ACT_AFFINE, "leakyrelu": ACT_LEAKY_RELU,
               "thresholdedrelu": ACT_THRESHOLDED_RELU, "scaledtanh": ACT_SCALED_TANH,
               "hardsigmoid": ACT_HARD_SIGMOID, "elu": ACT_ELU, "softsign": ACT_SOFTSIGN,
               "softplus": ACT_SOFTPLUS}
KINDS = {"RNN": KIND_RNN, "GRU": KIND_GRU, "LSTM": KIND_LSTM}


# ---------------------------------------------------------------------------------------
# Activations, applied to an array in place (one loop per kind, so each vectorises).

cdef inline float tanh_fp32(float x) noexcept nogil:
    """y = tanh(x), Cephes' tanhf: a polynomial near 0, 1 - 2 / (exp(2|x|) + 1) beyond."""
    cdef float ax = x if x >= 0 else -x
    cdef float one = 1, two = 2, z, small, big
    cdef float p4 = -5.70498872745e-3, p3 = 2.06390887954e-2, p2 = -5.37397155531e-2
    cdef float p1 = 1.33314422036e-1, p0 = -3.33332819422e-1, edge = 0.625
    z = x * x
    small = ((((p4 * z + p3) * z + p2) * z + p1) * z + p0) * z * x + x
    big = one - two / (exp_fp32(ax + ax) + one)
    big = big if x >= 0 else -big
    return small if ax < edge else big


cdef inline float sigmoid_fp32(float x) noexcept nogil:
    cdef float one = 1
    return one / (one + exp_fp32(-x))


cdef void _activate(float *x, Py_ssize_t n, int kind, float alpha, float beta, bint has_clip,
                    float clip) noexcept nogil:
    """x = act(clip(x)) in place."""
    cdef Py_ssize_t i
    cdef float v, zero = 0, one = 1, lo = -clip, ax, big = 20
    if has_clip:
        for i in range(n):
            v = x[i]
            v = lo if v < lo else v
            x[i] = clip if v > clip else v
    if kind == ACT_SIGMOID:
        for i in range(n):
            x[i] = sigmoid_fp32(x[i])
    elif kind == ACT_TANH:
        for i in range(n):
            x[i] = tanh_fp32(x[i])
    elif kind == ACT_RELU:
        for i in range(n):
            v = x[i]
            x[i] = v if v > zero else zero
    elif kind == ACT_AFFINE:
        for i in range(n):
            x[i] = alpha * x[i] + beta
    elif kind == ACT_LEAKY_RELU:
        for i in range(n):
            v = x[i]
            x[i] = v if v >= zero else alpha * v
    elif kind == ACT_THRESHOLDED_RELU:
        for i in range(n):
            v = x[i]
            x[i] = v if v > alpha else zero
    elif kind == ACT_SCALED_TANH:
        for i in range(n):
            x[i] = alpha * tanh_fp32(beta * x[i])
    elif kind == ACT_HARD_SIGMOID:
        for i in range(n):
            v = alpha * x[i] + beta
            v = v if v > zero else zero
            x[i] = v if v < one else one
    elif kind == ACT_ELU:
        for i in range(n):
            v = x[i]
            x[i] = v if v >= zero else alpha * (exp_fp32(v) - one)
    elif kind == ACT_SOFTSIGN:
        for i in range(n):
            v = x[i]
            ax = v if v >= zero else -v
            x[i] = v / (one + ax)
    elif kind == ACT_SOFTPLUS:
        # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)): no overflow for large x.
        for i in range(n):
            v = x[i]
            ax = v if v >= zero else -v
            x[i] = (v if v > zero else zero) + log_fp32(one + exp_fp32(-ax))


def activate_fp32(float[::1] x, str name, float alpha=0, float beta=0, clip=None):
    """Test wrapper: x = act(clip(x)) in place, act one of ACTIVATIONS."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r}: expected one of {sorted(ACTIVATIONS)}")
    if x.shape[0]:
        _activate(&x[0], x.shape[0], ACTIVATIONS[name], alpha, beta, clip is not None,
                  0 if clip is None else clip)


# ---------------------------------------------------------------------------------------
# R^T: rt[d, k, j] = R[d, j, k], for R computed at run time.

cdef struct PackRArgs:
    const float *r
    float *rt
    Py_ssize_t dirs, gh, h


cdef void _pack_r_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const PackRArgs *a = <const PackRArgs *>p
    cdef Py_ssize_t i0, i1, it, d, k, j, gh = a.gh, h = a.h
    cdef const float *r
    cdef float *rt
    ppl_partition(a.dirs * h, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        d = it // h
        k = it % h
        r = a.r + d * gh * h + k
        rt = a.rt + (d * h + k) * gh
        for j in range(gh):
            rt[j] = r[j * h]


def make_pack_r_step(size_t r, size_t rt, Py_ssize_t dirs, Py_ssize_t gh, Py_ssize_t h,
                     keep=None):
    """Step writing rt[d, k, j] = r[d, j, k] (r: dirs x gh x h floats)."""
    cdef Step step
    cdef PackRArgs *a
    if r == 0 or rt == 0 or dirs < 1 or gh < 1 or h < 1:
        raise ValueError(f"make_pack_r_step: r, rt must be given, dirs {dirs}, gh {gh}, "
                         f"h {h} >= 1")
    step = new_step(_pack_r_step, sizeof(PackRArgs), dirs * gh * h > GRAIN, keep)
    a = <PackRArgs *>step.args
    a.r = <const float *>r
    a.rt = <float *>rt
    a.dirs, a.gh, a.h = dirs, gh, h
    return step


# ---------------------------------------------------------------------------------------
# The recurrence.

cdef struct RecurArgs:
    int kind
    Py_ssize_t seq, batch, dirs, h, gh
    const float *xw             # (t, b, d) at xw + t * xw_st + b * xw_sb + d * gh
    Py_ssize_t xw_st, xw_sb
    const float *rt             # [dirs, h, gh]
    const float *bias           # [dirs, 2 * gh]: Wb then Rb; NULL: none
    const float *peep           # [dirs, 3 * h]: p_i, p_o, p_f; NULL: none
    const int32_t *lens         # [batch]; NULL: every sequence is seq long
    const float *h0             # (d, b) at + d * s_d + b * s_b; NULL: zeros
    const float *c0
    Py_ssize_t s_d, s_b         # strides of initial_h, initial_c, Y_h and Y_c
    float *y                    # (t, d, b) at + t * y_st + d * y_sd + b * y_sb; NULL: absent
    Py_ssize_t y_st, y_sd, y_sb
    float *yh                   # NULL: absent
    float *yc
    float *scratch              # max_threads slices of scratch_floats
    Py_ssize_t scratch_floats
    int max_threads
    Py_ssize_t bb, nblocks      # rows per item, items per direction
    int act[2][3]
    float alpha[2][3]
    float beta[2][3]
    bint has_clip
    float clip
    bint input_forget
    bint linear_before_reset
    bint reverse                # one direction, run backwards


cdef void _add_matvec(const float *hrows, Py_ssize_t hs, Py_ssize_t nrows, const float *rt,
                      Py_ssize_t ld, Py_ssize_t kdim, Py_ssize_t n, float *out,
                      Py_ssize_t os) noexcept nogil:
    """out[r, j] += sum_k hrows[r, k] * rt[k, j] for r < nrows, j < n (row strides hs, ld,
    os): one pass over rt serves every row."""
    cdef Py_ssize_t k, r, j
    cdef float hk
    cdef const float *w
    cdef float *o
    for k in range(kdim):
        w = rt + k * ld
        for r in range(nrows):
            hk = hrows[r * hs + k]
            o = out + r * os
            for j in range(n):
                o[j] += hk * w[j]


cdef inline Py_ssize_t _length(const RecurArgs *a, Py_ssize_t b) noexcept nogil:
    """sequence_lens[b] clamped to [0, seq] (a step cannot fail on a bad feed)."""
    cdef Py_ssize_t n
    if a.lens == NULL:
        return a.seq
    n = a.lens[b]
    return 0 if n < 0 else (a.seq if n > a.seq else n)


cdef void _recur_item(const RecurArgs *a, Py_ssize_t d, Py_ssize_t b0, Py_ssize_t nb,
                      float *scratch) noexcept nogil:
    cdef Py_ssize_t H = a.h, GH = a.gh, r, s, t, j, steps = 0
    cdef Py_ssize_t lens[BB]
    cdef Py_ssize_t ts[BB]
    cdef bint reverse = d == 1 or a.reverse
    # Scratch: h and c states, gate rows, and a spare row of H per batch row.
    cdef float *hs = scratch
    cdef float *cs = hs + BB * H
    cdef float *g = cs + BB * H
    cdef float *spare = g + BB * GH
    cdef float *gr
    cdef float *hr
    cdef float *cr
    cdef float *y
    cdef const float *xw
    cdef const float *wb = NULL
    cdef const float *rb = NULL
    cdef const float *rt = a.rt + d * H * GH
    cdef const float *pi = NULL
    cdef const float *po = NULL
    cdef const float *pf = NULL
    cdef const int *act = a.act[d]
    cdef const float *alpha = a.alpha[d]
    cdef const float *beta = a.beta[d]
    cdef float one = 1, zero = 0, v, z
    if a.bias != NULL:
        wb = a.bias + d * 2 * GH
        rb = wb + GH
    if a.peep != NULL:
        pi = a.peep + d * 3 * H
        po = pi + H
        pf = po + H
    for r in range(nb):
        lens[r] = _length(a, b0 + r)
        steps = lens[r] if lens[r] > steps else steps
        hr = hs + r * H
        cr = cs + r * H
        if a.h0 != NULL:
            memcpy(hr, a.h0 + d * a.s_d + (b0 + r) * a.s_b, H * sizeof(float))
        else:
            memset(hr, 0, H * sizeof(float))
        if a.c0 != NULL:
            memcpy(cr, a.c0 + d * a.s_d + (b0 + r) * a.s_b, H * sizeof(float))
        else:
            memset(cr, 0, H * sizeof(float))
        if a.y != NULL:    # Y is 0 past the sequence's end
            for t in range(lens[r], a.seq):
                memset(a.y + t * a.y_st + d * a.y_sd + (b0 + r) * a.y_sb, 0, H * sizeof(float))
    for s in range(steps):
        # Row r's time index; a finished row is computed on (at t 0) and its result dropped.
        for r in range(nb):
            if s >= lens[r]:
                ts[r] = 0
            else:
                ts[r] = lens[r] - 1 - s if reverse else s
            xw = a.xw + ts[r] * a.xw_st + (b0 + r) * a.xw_sb + d * GH
            gr = g + r * GH
            if wb != NULL:
                for j in range(GH):
                    gr[j] = xw[j] + wb[j]
                if not (a.kind == KIND_GRU and a.linear_before_reset):
                    for j in range(GH):
                        gr[j] += rb[j]
                else:
                    for j in range(2 * H):
                        gr[j] += rb[j]
            else:
                memcpy(gr, xw, GH * sizeof(float))
        if a.kind == KIND_GRU:
            # z and r gates first: h's input needs r.
            _add_matvec(hs, H, nb, rt, GH, H, 2 * H, g, GH)
            if a.linear_before_reset:
                # spare = R_h h + Rb_h
                for r in range(nb):
                    hr = spare + r * H
                    if rb != NULL:
                        memcpy(hr, rb + 2 * H, H * sizeof(float))
                    else:
                        memset(hr, 0, H * sizeof(float))
                _add_matvec(hs, H, nb, rt + 2 * H, GH, H, H, spare, H)
            for r in range(nb):
                _activate(g + r * GH, 2 * H, act[0], alpha[0], beta[0], a.has_clip, a.clip)
            if a.linear_before_reset:
                for r in range(nb):
                    gr = g + r * GH
                    hr = spare + r * H
                    for j in range(H):
                        gr[2 * H + j] += gr[H + j] * hr[j]
            else:
                for r in range(nb):   # spare = r * h
                    gr = g + r * GH
                    hr = hs + r * H
                    cr = spare + r * H
                    for j in range(H):
                        cr[j] = gr[H + j] * hr[j]
                _add_matvec(spare, H, nb, rt + 2 * H, GH, H, H, g + 2 * H, GH)
        else:
            _add_matvec(hs, H, nb, rt, GH, H, GH, g, GH)
        for r in range(nb):
            if s >= lens[r]:
                continue
            gr = g + r * GH
            hr = hs + r * H
            cr = cs + r * H
            if a.kind == KIND_RNN:
                _activate(gr, H, act[0], alpha[0], beta[0], a.has_clip, a.clip)
                memcpy(hr, gr, H * sizeof(float))
            elif a.kind == KIND_GRU:
                _activate(gr + 2 * H, H, act[1], alpha[1], beta[1], a.has_clip, a.clip)
                for j in range(H):
                    z = gr[j]
                    hr[j] = (one - z) * gr[2 * H + j] + z * hr[j]
            else:
                # Gates i, o, f, c: peepholes on i and f read c(t-1), on o c(t).
                if pi != NULL:
                    for j in range(H):
                        gr[j] += pi[j] * cr[j]
                        gr[2 * H + j] += pf[j] * cr[j]
                _activate(gr, H, act[0], alpha[0], beta[0], a.has_clip, a.clip)
                if a.input_forget:
                    for j in range(H):
                        gr[2 * H + j] = one - gr[j]
                else:
                    _activate(gr + 2 * H, H, act[0], alpha[0], beta[0], a.has_clip, a.clip)
                _activate(gr + 3 * H, H, act[1], alpha[1], beta[1], a.has_clip, a.clip)
                for j in range(H):
                    cr[j] = gr[2 * H + j] * cr[j] + gr[j] * gr[3 * H + j]
                if po != NULL:
                    for j in range(H):
                        gr[H + j] += po[j] * cr[j]
                _activate(gr + H, H, act[0], alpha[0], beta[0], a.has_clip, a.clip)
                # h = o * h_act(c): clip bounds the gates' inputs, not c (as ONNX Runtime).
                memcpy(spare + r * H, cr, H * sizeof(float))
                _activate(spare + r * H, H, act[2], alpha[2], beta[2], False, zero)
                for j in range(H):
                    hr[j] = gr[H + j] * spare[r * H + j]
            if a.y != NULL:
                y = a.y + ts[r] * a.y_st + d * a.y_sd + (b0 + r) * a.y_sb
                memcpy(y, hr, H * sizeof(float))
    for r in range(nb):
        if a.yh != NULL:
            y = a.yh + d * a.s_d + (b0 + r) * a.s_b
            if lens[r] > 0:
                memcpy(y, hs + r * H, H * sizeof(float))
            else:  # an empty sequence has no last state: 0, as in ONNX Runtime
                memset(y, 0, H * sizeof(float))
        if a.yc != NULL:
            y = a.yc + d * a.s_d + (b0 + r) * a.s_b
            if lens[r] > 0:
                memcpy(y, cs + r * H, H * sizeof(float))
            else:
                memset(y, 0, H * sizeof(float))


cdef void _recur_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const RecurArgs *a = <const RecurArgs *>p
    cdef Py_ssize_t i0, i1, it, d, blk, b0
    cdef float *scratch = a.scratch + (tid if tid < a.max_threads else 0) * a.scratch_floats
    ppl_partition(a.dirs * a.nblocks, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        d = it // a.nblocks
        blk = it % a.nblocks
        b0 = blk * a.bb
        _recur_item(a, d, b0, min(a.bb, a.batch - b0), scratch)


def make_recurrence_step(str kind, Py_ssize_t seq, Py_ssize_t batch, Py_ssize_t dirs,
                         Py_ssize_t hidden, size_t xw, Py_ssize_t xw_st, Py_ssize_t xw_sb,
                         size_t rt, *, bint reverse=False, size_t bias=0, size_t peep=0,
                         size_t lens=0, size_t h0=0, size_t c0=0, Py_ssize_t s_d=0,
                         Py_ssize_t s_b=0, size_t y=0, Py_ssize_t y_st=0, Py_ssize_t y_sd=0,
                         Py_ssize_t y_sb=0, size_t yh=0, size_t yc=0, activations=(),
                         clip=None, bint input_forget=False, bint linear_before_reset=False,
                         int num_threads=1, keep=None):
    """Step of the recurrence of ``kind`` (RNN, GRU, LSTM) given the input projection xw.

    Offsets and strides are in floats.  xw: (t, b, d) at xw + t*xw_st + b*xw_sb + d*G*H, the
    G*H gate inputs X[t, b] @ W[d]^T.  rt: R^T per direction [dirs, H, G*H].  bias: [dirs,
    2*G*H] (Wb, Rb); peep: [dirs, 3*H]; lens: int32 [batch]; h0, c0, yh, yc: (d, b) at
    d*s_d + b*s_b; y: (t, d, b) at t*y_st + d*y_sd + b*y_sb.  A zero address: absent.
    ``reverse`` runs a single direction backwards (direction 1 of two always is).
    activations: per direction, (code, alpha, beta) for each of the op's 1, 2 or 3 slots."""
    cdef Step step
    cdef RecurArgs *a
    cdef int gates
    cdef Py_ssize_t bb, d, i
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected RNN, GRU or LSTM")
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    slots = {"RNN": 1, "GRU": 2, "LSTM": 3}[kind]
    if seq < 0 or batch < 1 or dirs not in (1, 2) or hidden < 1:
        raise ValueError(f"seq {seq}, batch {batch}, dirs {dirs}, hidden {hidden}: expected "
                         f"seq >= 0, batch >= 1, dirs 1 or 2, hidden >= 1")
    if rt == 0 or (seq > 0 and xw == 0):
        raise ValueError("xw and rt must be given")
    if len(activations) != dirs or any(len(acts) != slots for acts in activations):
        raise ValueError(f"activations: expected {dirs} direction(s) of {slots} "
                         f"(code, alpha, beta), got {activations!r}")
    if kind != "LSTM" and (c0 or yc or peep or input_forget):
        raise ValueError(f"{kind} has no cell state, peepholes or input_forget")
    if (yh or yc or h0 or c0) and (s_b < hidden or (dirs > 1 and s_d < hidden)):
        raise ValueError(f"strides (s_d {s_d}, s_b {s_b}) of the states: expected >= {hidden}")
    if y and (y_sb < hidden or (dirs > 1 and y_sd < hidden) or (seq > 1 and y_st < hidden)):
        raise ValueError(f"strides of Y {(y_st, y_sd, y_sb)}: expected >= {hidden}")
    # Rows per item: up to BB (they share R^T's loads), fewer when that leaves threads idle.
    bb = max(1, min(<Py_ssize_t>BB, (batch * dirs) // max(1, num_threads)))
    nblocks = (batch + bb - 1) // bb
    per_thread = 2 * BB * hidden + BB * gates * hidden + BB * hidden
    per_thread = (per_thread + 15) // 16 * 16
    scratch = np.empty(max(1, num_threads) * per_thread, np.float32)
    cdef float[::1] scratch_v = scratch
    parallel = dirs * nblocks > 1 and seq * batch * dirs * gates * hidden * hidden > GRAIN
    step = new_step(_recur_step, sizeof(RecurArgs), parallel, (keep, scratch))
    a = <RecurArgs *>step.args
    a.kind = KINDS[kind]
    a.seq, a.batch, a.dirs, a.h, a.gh = seq, batch, dirs, hidden, gates * hidden
    a.xw = <const float *>xw
    a.xw_st, a.xw_sb = xw_st, xw_sb
    a.rt = <const float *>rt
    a.bias = <const float *>bias
    a.peep = <const float *>peep
    a.lens = <const int32_t *>lens
    a.h0 = <const float *>h0
    a.c0 = <const float *>c0
    a.s_d, a.s_b = s_d, s_b
    a.y = <float *>y
    a.y_st, a.y_sd, a.y_sb = y_st, y_sd, y_sb
    a.yh = <float *>yh
    a.yc = <float *>yc
    a.scratch = &scratch_v[0]
    a.scratch_floats = per_thread
    a.max_threads = max(1, num_threads)
    a.bb, a.nblocks = bb, nblocks
    for d in range(2):
        for i in range(3):
            a.act[d][i], a.alpha[d][i], a.beta[d][i] = ACT_TANH, 0, 0
    for d in range(dirs):
        for i, (code, al, be) in enumerate(activations[d]):
            if not 0 <= code <= ACT_SOFTPLUS:
                raise ValueError(f"activation code {code}: expected 0..{ACT_SOFTPLUS}")
            a.act[d][i], a.alpha[d][i], a.beta[d][i] = code, al, be
    a.has_clip = clip is not None
    a.clip = 0 if clip is None else clip
    a.input_forget = input_forget
    a.linear_before_reset = linear_before_reset
    a.reverse = reverse and dirs == 1
    return step


def _address(array):
    return 0 if array is None else array.__array_interface__["data"][0]


def rnn_fp32(str kind, X, W, R, B=None, lens=None, h0=None, c0=None, P=None, *,
             str direction="forward", activations=(), clip=None, bint input_forget=False,
             bint linear_before_reset=False, bint pack_r_step=False, int num_threads=1):
    """Test wrapper: (Y, Y_h, Y_c) of ``kind`` on layout-0 float32 arrays, with xw = X @ W^T
    from numpy and R^T packed by numpy or, with ``pack_r_step``, by make_pack_r_step.
    activations: per direction, (name, alpha, beta) per slot."""
    f32 = lambda v: None if v is None else np.ascontiguousarray(v, np.float32)
    X, W, R, B, h0, c0, P = (f32(v) for v in (X, W, R, B, h0, c0, P))
    lens = None if lens is None else np.ascontiguousarray(lens, np.int32)
    seq, batch, _ = X.shape
    dirs, gh, hidden = R.shape
    xw = np.ascontiguousarray(np.einsum("tbi,dgi->tbdg", X, W), np.float32)
    y = np.full((seq, dirs, batch, hidden), np.nan, np.float32)
    yh = np.full((dirs, batch, hidden), np.nan, np.float32)
    yc = np.full((dirs, batch, hidden), np.nan, np.float32) if kind == "LSTM" else None
    codes = [[(ACTIVATIONS[n.lower()], al, be) for n, al, be in acts] for acts in activations]
    steps = []
    if pack_r_step:
        rt = np.full((dirs, hidden, gh), np.nan, np.float32)
        steps.append(make_pack_r_step(_address(R), _address(rt), dirs, gh, hidden, R))
    else:
        rt = np.ascontiguousarray(R.transpose(0, 2, 1))
    keep = (X, xw, rt, B, lens, h0, c0, P, y, yh, yc)
    steps.append(make_recurrence_step(
        kind, seq, batch, dirs, hidden, _address(xw), batch * dirs * gh, dirs * gh,
        _address(rt), reverse=direction == "reverse", bias=_address(B), peep=_address(P),
        lens=_address(lens), h0=_address(h0), c0=_address(c0), s_d=batch * hidden,
        s_b=hidden, y=_address(y), y_st=dirs * batch * hidden, y_sd=batch * hidden,
        y_sb=hidden, yh=_address(yh), yc=_address(yc), activations=codes, clip=clip,
        input_forget=input_forget, linear_before_reset=linear_before_reset,
        num_threads=num_threads, keep=keep))
    run_steps(steps, num_threads)
    return y, yh, yc
