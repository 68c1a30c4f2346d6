"""LinearAttention (opset 27): the recurrent (linear) attention of Gated DeltaNet, RetNet,
GLA and RWKV-style layers, for prefill (T > 1) and decode (T = 1) alike.

Q, K, V (and decay, beta) come packed 3-D, (B, T, H * d); the recurrent state is 4-D,
(B, H_kv, d_k, d_v), carried from ``past_state`` (zeros when omitted) to ``present_state``.
``update_rule`` picks the recurrence (see ``_stateful_fp32.pxi``): linear, gated (decay),
delta (beta) or gated_delta (both); a query head h reads KV head h / (Hq / Hkv).  The
result is the sequential recurrence itself, in float32: ``chunk_size`` (a tuning hint for
chunked prefill on GPUs) does not change it and is not used.
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.causal_conv import address, optional
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import LinearAttentionParam

# update_rule -> (takes decay, takes beta)
_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
          "gated_delta": (True, True)}
_NAMES = ("query", "key", "value", "past_state", "decay", "beta")


class LinearAttentionKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        q, k, v = io.inputs[:3]
        past, decay, beta = (optional(io.inputs, i) for i in (3, 4, 5))
        y, present = io.outputs[0], optional(io.outputs, 1)
        B, T, _ = q.shape.dims
        Hq, Hkv = p.q_num_heads, p.kv_num_heads
        dk, dv = q.shape.dims[2] // Hq, v.shape.dims[2] // Hkv
        keep = [s.array for s in (*io.inputs, *io.outputs) if s is not None]
        if present is not None:
            state = present.address
        else:  # the state is still needed while the recurrence runs
            scratch = np.empty((B, Hkv, dk, dv), np.float32)
            keep.append(scratch)
            state = scratch.ctypes.data
        decay_width = decay.shape.dims[2] // Hkv if decay is not None else 1
        beta_heads = beta.shape.dims[2] if beta is not None else Hkv
        scale = p.scale if p.scale != 0 else 1.0 / math.sqrt(dk)
        step = self.impl("stateful_fp32").make_linear_attention_step(
            address(q), address(k), address(v), address(past), address(decay), address(beta),
            address(y), state, (B, T, Hq, Hkv, dk, dv), decay_width, beta_heads, float(scale),
            io.num_threads, tuple(keep))
        step.label = self.node.name
        return step


@op("", "LinearAttention", since=27, param=LinearAttentionParam)
class LinearAttentionOp(X86OptKernel):
    """output, present_state = the linear-attention recurrence over T tokens; float32."""

    def infer_type(self, in_types):
        p = self.param
        if p.update_rule not in _RULES:
            raise self.unsupported(f"update_rule {p.update_rule!r}: expected one of "
                                   f"{', '.join(map(repr, _RULES))}")
        if p.q_num_heads < 1 or p.kv_num_heads < 1 or p.q_num_heads % p.kv_num_heads:
            raise self.unsupported(f"q_num_heads {p.q_num_heads} must be a positive multiple "
                                   f"of kv_num_heads {p.kv_num_heads}")
        wants_decay, wants_beta = _RULES[p.update_rule]
        for index, wanted in ((4, wants_decay), (5, wants_beta)):
            if self.input_present(index) != wanted:
                verb = "needs" if wanted else "takes no"
                raise self.unsupported(f"update_rule {p.update_rule!r} {verb} input "
                                       f"{_NAMES[index]}")
        for index, data_type in enumerate(in_types):
            if data_type is not None and data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {_NAMES[index]} is {data_type}; pplpy's "
                                       "LinearAttention runs on float32")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        p = self.param
        Hq, Hkv = p.q_num_heads, p.kv_num_heads
        shapes = [tuple(s) if s is not None else None for s in in_shapes] + [None] * 6
        q, k, v, past, decay, beta = shapes[:6]
        for name, dims, heads in (("query", q, Hq), ("key", k, Hkv), ("value", v, Hkv)):
            if len(dims) != 3:
                raise self.shape_error(f"{name} must be packed 3-D (B, T, H * d), got rank "
                                       f"{len(dims)}", in_shapes)
            if dims[2] % heads:
                raise self.shape_error(f"{name}'s last dim {dims[2]} is not a multiple of its "
                                       f"{heads} heads", in_shapes)
        B, T = q[:2]
        if k[:2] != (B, T) or v[:2] != (B, T):
            raise self.shape_error("query, key and value must share (B, T)", in_shapes)
        dk, dv = q[2] // Hq, v[2] // Hkv
        if k[2] != Hkv * dk:
            raise self.shape_error(f"key's last dim must be {Hkv} heads x {dk} (query's head "
                                   f"size), got {k[2]}", in_shapes)
        state = (B, Hkv, dk, dv)
        if past is not None and past != state:
            raise self.shape_error(f"past_state must be {list(state)}, got {list(past)}",
                                   in_shapes)
        if decay is not None and (len(decay) != 3 or decay[:2] != (B, T)
                                  or decay[2] not in (Hkv, Hkv * dk)):
            raise self.shape_error(f"decay must be ({B}, {T}, {Hkv}) or ({B}, {T}, "
                                   f"{Hkv * dk}), got {list(decay)}", in_shapes)
        if beta is not None and (len(beta) != 3 or beta[:2] != (B, T)
                                 or beta[2] not in (Hkv, 1)):
            raise self.shape_error(f"beta must be ({B}, {T}, {Hkv}) or ({B}, {T}, 1), got "
                                   f"{list(beta)}", in_shapes)
        return [(B, T, Hq * dv), state][:len(self.node.outputs)]

    def create_kernel(self):
        return LinearAttentionKernel(self)
