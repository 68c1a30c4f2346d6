# The stateful ops of linear-attention models (Gated DeltaNet, Mamba, RWKV, RetNet), as
# compiled steps: the state a decoder carries from one call to the next is an input and an
# output of the op.
#
# Written once and included by _stateful_fp32_{avx512,fma,sse}.pyx, which define PPL_VLEN,
# so each tier gets its own vector code (the inner loops run along a row of contiguous
# floats, in forms gcc vectorises).
#
#     make_causal_conv_step(...)       CausalConvWithState (opset 27)
#     make_linear_attention_step(...)  LinearAttention (opset 27)
#
# CausalConvWithState.  A work item is one (batch, channel) row.  The row is laid out as
# the padded sequence [past_state (k - 1) | input (L)] in the thread's scratch, then
#
#     y[t] = bias + sum_j w[j] * padded[t + j]        t < L, one pass over y per tap j
#
# and the optional SiLU is the activation table's Swish (alpha 1), the vector function the
# Swish op and the GEMM/conv epilogues use.  present_state is the last k - 1 values of the
# padded row (which reach into past_state when L < k - 1).
#
# LinearAttention.  A work item is one (batch, KV head): its state S (d_k x d_v, float32)
# lives in present_state (or scratch) and is updated token by token, exactly the recurrence
# of the spec:
#
#     S = exp(g_t) * S                           gated rules (g per key row, or per head)
#     v = beta_t * (v_t - S^T k_t)               delta rules
#     S = S + k_t v^T
#     o_t = scale * q_t^T S                      for each query head of this KV head's group
#
# Every loop above runs along a row of S (d_v contiguous floats).  Items write disjoint
# heads of the output and of present_state, so they split over the team with no barrier.

from libc.math cimport sqrtf
from libc.string cimport memcpy, memset

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"


cdef extern from "_activation_fp32.h" nogil:
    enum:
        PPL_ACT_NONE
        PPL_ACT_SWISH
    void ppl_activation(const float *x, float *y, Py_ssize_t n, int code, float p0, float p1)


# ---------------------------------------------------------------------------------------
# CausalConvWithState.

cdef struct CausalConvArgs:
    const float *x          # (B, C, L)
    const float *w          # (C, k)
    const float *bias       # NULL or (C)
    const float *past       # NULL or (B, C, k - 1)
    float *y                # (B, C, L)
    float *present          # NULL or (B, C, k - 1)
    Py_ssize_t B, C, L, k
    int activation          # PPL_ACT_NONE or PPL_ACT_SWISH
    float *scratch          # per thread: L + k - 1 floats
    Py_ssize_t scratch_floats


cdef void _causal_conv_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const CausalConvArgs *a = <const CausalConvArgs *>p
    cdef Py_ssize_t r0, r1, r, c, t, j, L = a.L, k = a.k, km1 = a.k - 1
    cdef float *padded = a.scratch + tid * a.scratch_floats
    cdef float *y
    cdef const float *w
    cdef float wj, b0
    ppl_partition(a.B * a.C, tid, nthreads, &r0, &r1)
    for r in range(r0, r1):
        c = r % a.C
        if km1 > 0:
            if a.past != NULL:
                memcpy(padded, a.past + r * km1, km1 * sizeof(float))
            else:
                memset(padded, 0, km1 * sizeof(float))
        memcpy(padded + km1, a.x + r * L, L * sizeof(float))
        y = a.y + r * L
        w = a.w + c * k
        b0 = a.bias[c] if a.bias != NULL else 0
        for t in range(L):
            y[t] = b0
        for j in range(k):
            wj = w[j]
            for t in range(L):
                y[t] += wj * padded[t + j]
        if a.activation != PPL_ACT_NONE:
            ppl_activation(y, y, L, a.activation, 1, 0)
        if a.present != NULL and km1 > 0:
            memcpy(a.present + r * km1, padded + L, km1 * sizeof(float))


def make_causal_conv_step(size_t x, size_t w, size_t bias, size_t past, size_t y,
                          size_t present, dims, bint silu, int num_threads, keep=None):
    """Step of CausalConvWithState: dims (B, C, L, k); bias, past, present: 0 when absent;
    silu: apply x * sigmoid(x) to the convolution's output."""
    cdef Step step
    cdef CausalConvArgs *a
    cdef Py_ssize_t B, C, L, k
    B, C, L, k = dims
    if min(B, C, L) < 0 or k < 1:
        raise ValueError(f"causal conv dims {dims}: expected B, C, L >= 0 and k >= 1")
    if B * C * L and (x == 0 or y == 0 or w == 0):
        raise ValueError("x, w and y must be given")
    num_threads = max(1, num_threads)
    cdef Py_ssize_t floats = (L + k - 1 + 15) // 16 * 16
    scratch = np.empty((num_threads, floats), np.float32)
    step = new_step(_causal_conv_step, sizeof(CausalConvArgs),
                    B * C > 1 and B * C * L * k > GRAIN, (keep, scratch))
    a = <CausalConvArgs *>step.args
    a.x, a.w = <const float *>x, <const float *>w
    a.bias, a.past = <const float *>bias, <const float *>past
    a.y, a.present = <float *>y, <float *>present
    a.B, a.C, a.L, a.k = B, C, L, k
    a.activation = PPL_ACT_SWISH if silu else PPL_ACT_NONE
    a.scratch = <float *>(<size_t>scratch.ctypes.data)
    a.scratch_floats = floats
    step.label = "causal conv"
    return step


# ---------------------------------------------------------------------------------------
# LinearAttention.

cdef struct LinAttnArgs:
    const float *q          # (B, T, Hq * dk)
    const float *k          # (B, T, Hkv * dk)
    const float *v          # (B, T, Hkv * dv)
    const float *past       # NULL or (B, Hkv, dk, dv)
    const float *decay      # NULL or (B, T, Hkv * decay_width)
    const float *beta       # NULL or (B, T, beta_heads)
    float *y                # (B, T, Hq * dv)
    float *state            # (B, Hkv, dk, dv): present_state, or scratch
    Py_ssize_t B, T, Hq, Hkv, dk, dv
    Py_ssize_t decay_width  # 1 (per head) or dk (per key row)
    Py_ssize_t beta_heads   # Hkv, or 1 (shared by the heads)
    float scale
    float *scratch          # per thread: 2 * dv floats
    Py_ssize_t scratch_floats


cdef void _linear_attention_item(const LinAttnArgs *a, Py_ssize_t item,
                                 float *work) noexcept nogil:
    cdef Py_ssize_t hk = item % a.Hkv, b = item // a.Hkv
    cdef Py_ssize_t dk = a.dk, dv = a.dv, group = a.Hq // a.Hkv
    cdef Py_ssize_t t, d, m, g, hq
    cdef float *S = a.state + item * dk * dv
    cdef float *u = work             # dv: the value written this step
    cdef float *o = work + dv        # dv: one query head's output row
    cdef const float *qt
    cdef const float *kt
    cdef const float *vt
    cdef const float *gt
    cdef float *row
    cdef float f, kd, bt, zero = 0
    if a.past != NULL:
        memcpy(S, a.past + item * dk * dv, dk * dv * sizeof(float))
    else:
        memset(S, 0, dk * dv * sizeof(float))
    for t in range(a.T):
        kt = a.k + (b * a.T + t) * a.Hkv * dk + hk * dk
        vt = a.v + (b * a.T + t) * a.Hkv * dv + hk * dv
        if a.decay != NULL:
            gt = a.decay + (b * a.T + t) * a.Hkv * a.decay_width + hk * a.decay_width
            for d in range(dk):
                f = exp_fp32(gt[d] if a.decay_width > 1 else gt[0])
                row = S + d * dv
                for m in range(dv):
                    row[m] *= f
        if a.beta != NULL:
            bt = a.beta[(b * a.T + t) * a.beta_heads + (hk if a.beta_heads > 1 else 0)]
            for m in range(dv):
                u[m] = zero
            for d in range(dk):
                kd = kt[d]
                row = S + d * dv
                for m in range(dv):
                    u[m] += kd * row[m]
            for m in range(dv):
                u[m] = bt * (vt[m] - u[m])
        else:
            for m in range(dv):
                u[m] = vt[m]
        for d in range(dk):
            kd = kt[d]
            row = S + d * dv
            for m in range(dv):
                row[m] += kd * u[m]
        for g in range(group):
            hq = hk * group + g
            qt = a.q + (b * a.T + t) * a.Hq * dk + hq * dk
            for m in range(dv):
                o[m] = zero
            for d in range(dk):
                kd = qt[d]
                row = S + d * dv
                for m in range(dv):
                    o[m] += kd * row[m]
            row = a.y + (b * a.T + t) * a.Hq * dv + hq * dv
            for m in range(dv):
                row[m] = a.scale * o[m]


cdef void _linear_attention_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const LinAttnArgs *a = <const LinAttnArgs *>p
    cdef Py_ssize_t i0, i1, it
    ppl_partition(a.B * a.Hkv, tid, nthreads, &i0, &i1)
    for it in range(i0, i1):
        _linear_attention_item(a, it, a.scratch + tid * a.scratch_floats)


def make_linear_attention_step(size_t q, size_t k, size_t v, size_t past, size_t decay,
                               size_t beta, size_t y, size_t state, dims,
                               Py_ssize_t decay_width, Py_ssize_t beta_heads, float scale,
                               int num_threads, keep=None):
    """Step of LinearAttention: dims (B, T, Hq, Hkv, dk, dv); Q, K, V, Y packed 3-D
    (B, T, H * d); past / present state (B, Hkv, dk, dv) (state: present_state, or a scratch
    buffer when that output is not wanted); decay: 0 or (B, T, Hkv * decay_width) with
    decay_width 1 or dk; beta: 0 or (B, T, beta_heads) with beta_heads Hkv or 1."""
    cdef Step step
    cdef LinAttnArgs *a
    cdef Py_ssize_t B, T, Hq, Hkv, dk, dv
    B, T, Hq, Hkv, dk, dv = dims
    if min(B, T, dk, dv) < 0 or Hkv < 1 or Hq < 1 or Hq % Hkv:
        raise ValueError(f"linear attention dims {dims}: Hq must be a multiple of Hkv >= 1")
    if decay and decay_width not in (1, dk):
        raise ValueError(f"decay width {decay_width}: expected 1 or {dk}")
    if beta and beta_heads not in (1, Hkv):
        raise ValueError(f"beta heads {beta_heads}: expected 1 or {Hkv}")
    if B * Hkv * dk * dv and state == 0:
        raise ValueError("the state buffer must be given")
    if B * T and (q == 0 or k == 0 or v == 0 or y == 0):
        raise ValueError("Q, K, V and Y must be given")
    num_threads = max(1, num_threads)
    cdef Py_ssize_t floats = (2 * dv + 15) // 16 * 16
    scratch = np.empty((num_threads, max(floats, 16)), np.float32)
    cdef double work = <double>B * T * (Hq + 3 * Hkv) * dk * dv
    step = new_step(_linear_attention_step, sizeof(LinAttnArgs), B * Hkv > 1 and work > GRAIN,
                    (keep, scratch))
    a = <LinAttnArgs *>step.args
    a.q, a.k, a.v = <const float *>q, <const float *>k, <const float *>v
    a.past, a.decay, a.beta = <const float *>past, <const float *>decay, <const float *>beta
    a.y, a.state = <float *>y, <float *>state
    a.B, a.T, a.Hq, a.Hkv, a.dk, a.dv = B, T, Hq, Hkv, dk, dv
    a.decay_width, a.beta_heads = decay_width, beta_heads
    a.scale = scale
    a.scratch = <float *>(<size_t>scratch.ctypes.data)
    a.scratch_floats = max(floats, 16)
    step.label = "linear attention"
    return step


# ---------------------------------------------------------------------------------------
# Test wrappers: build a step on numpy arrays and run it.

def _addr(array):
    return 0 if array is None else array.ctypes.data


def _f32(array):
    return None if array is None else np.ascontiguousarray(array, np.float32)


def causal_conv_fp32(x, w, bias=None, past=None, bint silu=False, int num_threads=1):
    """Test wrapper: x (B, C, L), w (C, 1, k) -> (y, present_state)."""
    x, w, bias, past = _f32(x), _f32(w), _f32(bias), _f32(past)
    B, C, L = x.shape
    k = w.shape[2]
    y = np.empty_like(x)
    present = np.empty((B, C, k - 1), np.float32)
    step = make_causal_conv_step(_addr(x), _addr(w), _addr(bias), _addr(past), _addr(y),
                                 _addr(present), (B, C, L, k), silu, num_threads,
                                 (x, w, bias, past, y, present))
    run_steps([step], num_threads)
    return y, present


def linear_attention_fp32(q, k, v, int q_heads, int kv_heads, past=None, decay=None,
                          beta=None, float scale=0, int num_threads=1):
    """Test wrapper: packed 3-D Q, K, V (B, T, H * d) -> (y, present_state)."""
    q, k, v, past, decay, beta = (_f32(t) for t in (q, k, v, past, decay, beta))
    B, T = q.shape[:2]
    dk, dv = q.shape[2] // q_heads, v.shape[2] // kv_heads
    y = np.empty((B, T, q_heads * dv), np.float32)
    state = np.empty((B, kv_heads, dk, dv), np.float32)
    step = make_linear_attention_step(
        _addr(q), _addr(k), _addr(v), _addr(past), _addr(decay), _addr(beta), _addr(y),
        _addr(state), (B, T, q_heads, kv_heads, dk, dv),
        1 if decay is None else decay.shape[2] // kv_heads,
        kv_heads if beta is None else beta.shape[2], scale or 1 / sqrtf(dk), num_threads,
        (q, k, v, past, decay, beta, y, state))
    run_steps([step], num_threads)
    return y, state
