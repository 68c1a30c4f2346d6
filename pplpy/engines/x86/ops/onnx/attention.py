"""Attention (opsets 23, 24 and 25): scaled dot-product attention with its cache and masks.

    Y = softmax(softcap(Q K^T * scale) + bias) V          per (batch, query head)

Q, K, V come 4-D, (B, H, S, head_size), or 3-D, (B, S, H * head_size) with ``q_num_heads``
and ``kv_num_heads``; a query head h reads KV head h / (Hq / Hkv) (grouped-query
attention).  ``bias`` gathers the attention mask (additive float32, or bool where False
masks; a mask shorter than the keys masks the rest), ``is_causal`` (offset-aligned, the
offset being the past length or, with ``nonpad_kv_seqlen``, nonpad - Sq), the sliding
window of opset 25 and ``nonpad_kv_seqlen`` (opset 24).  ``past_key``/``past_value`` are
prepended to K/V (``present_*`` outputs, always 4-D).  The optional ``qk_matmul_output``
is the scores after softcap (modes 0 and 1, as the reference computes them), after the
bias (2) or after the softmax (3).

The kernel is one flash-style step (``_attention_fp32.pxi``): work items are (batch, head,
block of query rows), keys are taken a block at a time with a running max and sum, so the
score matrix is never materialised (except as the requested QK output); both products of a
block run on the brgemm microkernel of GEMM and convolution, over K and V packed once per
KV head and thread.  A past cache is first copied into ``present`` (one step; the attention
reads it after a barrier).
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import AttentionParam

_FLOAT = 1
_DOUBLE = 11


def _elem_strides(dims):
    """Row-major element strides of ``dims``."""
    strides, step = [], 1
    for d in reversed(dims):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _head_view(dims, heads):
    """(B, H, S, head) and the (batch, head, seq) element strides of a contiguous Q/K/V/Y of
    logical ``dims``: 4-D as is, 3-D (B, S, H * head) read per head."""
    if len(dims) == 4:
        b, h, s, e = dims
        return (b, h, s, e), (h * s * e, s * e, e)
    b, s, hidden = dims
    e = hidden // heads
    return (b, heads, s, e), (s * hidden, e, hidden)


class HeadView:
    """Where the attention reads one of Q, K, V: the address of its first element, its
    (B, H, S, head_size) dims and its (batch, head, seq) element strides (unit stride along
    the head size)."""

    def __init__(self, address, dims, strides):
        self.address, self.dims, self.strides = address, dims, strides


class AttentionKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        ins = list(io.inputs) + [None] * (7 - len(io.inputs))
        views = [HeadView(s.address, *_head_view(tuple(s.shape.dims), heads))
                 for s, heads in zip(ins[:3], (p.q_num_heads, p.kv_num_heads,
                                                p.kv_num_heads))]
        return self.attention_steps(io, views, *ins[3:])

    def attention_steps(self, io, views, mask, past_k, past_v, nonpad):
        """The steps of Y = attention(Q, K, V) with Q, K, V read through ``views``
        (HeadView); the other inputs are io's slots (or None)."""
        p = self.param
        impl = self.impl("attention_fp32")
        outs = list(io.outputs) + [None] * (4 - len(io.outputs))
        q, k, v = views
        (B, Hq, Sq, D), q_str = q.dims, q.strides
        (_, Hkv, Skv, _), k_str = k.dims, k.strides
        (_, _, _, Dv), v_str = v.dims, v.strides
        P = past_k.shape.dims[2] if past_k is not None else 0
        T = P + Skv
        keep = [s.array for s in list(io.inputs) + outs if s is not None]
        steps = []

        # K and V as the attention reads them: the inputs themselves, or present (past ++
        # new) written first, into the output or into scratch.
        def cache(new, new_str, past, out, width):
            if past is None and out is None:
                return new.address, new_str
            dims4 = (B, Hkv, T, width)
            if out is not None:
                dst = out.address
            else:
                scratch = np.empty(dims4, np.float32)
                keep.append(scratch)
                dst = scratch.ctypes.data
            d_str = _elem_strides(dims4)[:3]
            if past is not None and P > 0:
                steps.append(impl.make_rows_copy_step(
                    past.address, dst, (B, Hkv, P, width), _elem_strides((B, Hkv, P, width))[:3],
                    d_str, tuple(keep)))
            if Skv > 0:
                steps.append(impl.make_rows_copy_step(
                    new.address, dst + 4 * P * width, (B, Hkv, Skv, width), new_str, d_str,
                    tuple(keep)))
            return dst, d_str

        k_addr, k_str = cache(k, k_str, past_k, outs[1], D)
        v_addr, v_str = cache(v, v_str, past_v, outs[2], Dv)
        if outs[0] is None or outs[0].shape.element_count == 0:
            return steps or None

        y = outs[0]
        y_str = _head_view(tuple(y.shape.dims), Hq)[1]
        mask_kind, mask_str, mask_len, mask_addr = 0, (0, 0, 0), 0, 0
        if mask is not None:
            md = tuple(mask.shape.dims)
            mask_kind = 1 if mask.shape.data_type is DataType.BOOL else 2
            full = (1,) * (4 - len(md)) + md
            st = _elem_strides(full)
            mask_str = tuple(0 if full[i] == 1 else st[i] for i in range(3))
            # A mask shorter than the keys is padded (the keys past it masked), never
            # broadcast along the keys, even from a length of 1: so says the reference.
            mask_len = full[3]
            mask_addr = mask.address if mask.shape.element_count else 0
            if mask_addr == 0:
                mask_kind, mask_len = 2, 0  # an empty mask: every key past it is masked
                empty = np.zeros(1, np.float32)
                keep.append(empty)
                mask_addr = empty.ctypes.data
        kv_len = nonpad.address if nonpad is not None else 0
        scale = p.scale if p.scale is not None else 1.0 / math.sqrt(D)
        qk = outs[3]
        steps.append(impl.make_attention_step(
            q.address, k_addr, v_addr, y.address, qk.address if qk is not None else 0,
            p.qk_matmul_output_mode, (B, Hq, Hkv, Sq, T, D, Dv), q_str, k_str, v_str, y_str,
            mask_addr, mask_kind, mask_str, mask_len, kv_len, bool(p.is_causal),
            nonpad is not None and past_k is None, P, p.left_window_size,
            p.right_window_size, float(scale), float(p.softcap), io.num_threads, tuple(keep)))
        return steps


@op("", "Attention", since=23, param=AttentionParam)
class AttentionOp(X86OptKernel):
    """Scaled dot-product attention; float32 Q/K/V, bool or float32 mask; NDARRAY."""

    def infer_type(self, in_types):
        names = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
        for index, data_type in enumerate(in_types):
            if data_type is None or not self.input_present(index):
                continue
            if index == 3:
                ok = (DataType.FLOAT32, DataType.BOOL)
            elif index == 6:
                ok = (DataType.INT64,)
            else:
                ok = (DataType.FLOAT32,)
            if data_type not in ok:
                raise self.unsupported(
                    f"input {names[index]} is {data_type}; pplpy's Attention takes "
                    f"{' or '.join(str(t) for t in ok)} there")
        p = self.param
        if p.softmax_precision not in (None, _FLOAT, _DOUBLE):
            raise self.unsupported(f"softmax_precision={p.softmax_precision}: pplpy computes "
                                   "the softmax in float32 (1)")
        if p.qk_matmul_output_mode not in (0, 1, 2, 3):
            raise self.unsupported(f"qk_matmul_output_mode={p.qk_matmul_output_mode}: "
                                   "expected 0, 1, 2 or 3")
        if self.input_present(4) != self.input_present(5):
            raise self.unsupported("past_key and past_value must be given together")
        if self.input_present(6) and self.input_present(4):
            raise self.unsupported("nonpad_kv_seqlen cannot be combined with past_key")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        p = self.param
        shapes = list(in_shapes) + [None] * (7 - len(in_shapes))
        q, k, v = (tuple(s) for s in shapes[:3])
        if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
            raise self.shape_error("Q, K and V must all be 3-D or all 4-D", in_shapes)
        if len(q) == 3:
            if not p.q_num_heads or not p.kv_num_heads:
                raise self.shape_error("3-D Q, K, V need the q_num_heads and kv_num_heads "
                                       "attributes", in_shapes)
            for dims, heads, name in ((q, p.q_num_heads, "Q"), (k, p.kv_num_heads, "K"),
                                      (v, p.kv_num_heads, "V")):
                if dims[2] % heads:
                    raise self.shape_error(f"{name}'s hidden size {dims[2]} is not a multiple "
                                           f"of its {heads} heads", in_shapes)
        (B, Hq, Sq, D), _ = _head_view(q, p.q_num_heads)
        (Bk, Hkv, Skv, Dk), _ = _head_view(k, p.kv_num_heads)
        (Bv, Hv, Sv, Dv), _ = _head_view(v, p.kv_num_heads)
        if not B == Bk == Bv:
            raise self.shape_error("Q, K and V must have the same batch size", in_shapes)
        if D != Dk:
            raise self.shape_error(f"Q's head size {D} differs from K's {Dk}", in_shapes)
        if Hkv != Hv or Skv != Sv:
            raise self.shape_error("K and V must have the same heads and sequence length",
                                   in_shapes)
        if Hkv < 1 or Hq % Hkv:
            raise self.shape_error(f"{Hq} query heads are not a multiple of {Hkv} KV heads",
                                   in_shapes)
        P = 0
        if shapes[4] is not None:
            pk, pv = tuple(shapes[4]), tuple(shapes[5])
            if len(pk) != 4 or pk[:2] != (B, Hkv) or pk[3] != D:
                raise self.shape_error(f"past_key must be [{B}, {Hkv}, past, {D}]", in_shapes)
            if len(pv) != 4 or pv[:3] != pk[:3] or pv[3] != Dv:
                raise self.shape_error(f"past_value must be [{B}, {Hkv}, {pk[2]}, {Dv}]",
                                       in_shapes)
            P = pk[2]
        T = P + Skv
        if shapes[3] is not None:
            m = tuple(shapes[3])
            if not 1 <= len(m) <= 4 or m[-1] > T:
                raise self.shape_error(f"attn_mask must have rank 1-4 and at most {T} keys",
                                       in_shapes)
            full = (1,) * (4 - len(m)) + m
            for dim, want, name in zip(full[:3], (B, Hq, Sq), ("batch", "heads", "queries")):
                if dim not in (1, want):
                    raise self.shape_error(f"attn_mask's {name} dim {dim} does not broadcast "
                                           f"to {want}", in_shapes)
        if shapes[6] is not None and tuple(shapes[6]) != (B,):
            raise self.shape_error(f"nonpad_kv_seqlen must be [{B}]", in_shapes)
        y = (B, Hq, Sq, Dv) if len(q) == 4 else (B, Sq, Hq * Dv)
        out = [y, (B, Hkv, T, D), (B, Hkv, T, Dv), (B, Hq, Sq, T)]
        return out[:len(self.node.outputs)]

    def create_kernel(self):
        return AttentionKernel(self)
