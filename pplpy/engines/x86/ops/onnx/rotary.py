"""RotaryEmbedding (23): rotate pairs of each head's leading dims by the (cos, sin) of its
position.

    x1, x2 = x[..., :R/2], x[..., R/2:R]      (interleaved: x[..., 0:R:2], x[..., 1:R:2])
    y1 = cos * x1 - sin * x2;   y2 = sin * x1 + cos * x2;   y[..., R:] = x[..., R:]

X is 4-D (B, H, S, D) or 3-D (B, S, H * D) with ``num_heads``; R is
``rotary_embedding_dim`` (0: D).  With ``position_ids`` (B, S) the caches are tables
(P, R/2) read at each id; without, the caches are (B, S, R/2) (size-1 dims broadcast).  One
compiled step, rows (b, s, h) split across the team.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import RotaryEmbeddingParam


def _geometry(dims, num_heads):
    """(B, S, H, D) and the element strides (batch, seq, head) of a contiguous X."""
    if len(dims) == 4:
        b, h, s, d = dims
        return (b, s, h, d), (h * s * d, d, s * d)
    b, s, hidden = dims
    d = hidden // num_heads
    return (b, s, num_heads, d), (s * hidden, hidden, d)


class RotaryKernel(X86Kernel):
    def __init__(self, op_ctx):
        super().__init__(op_ctx)
        # Constant caches (the usual case) are copied once; the raw weights are dropped.
        self.caches = {}
        for index in (1, 2):
            value = op_ctx.constant(index)
            if value is not None:
                self.caches[index] = np.ascontiguousarray(value, np.float32)
        self.packed_inputs = tuple(self.caches)

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        pos = io.inputs[3] if len(io.inputs) > 3 else None
        (B, S, H, D), x_str = _geometry(tuple(x.shape.dims), self.param.num_heads)
        R = self.param.rotary_embedding_dim or D
        keep = [x.array, y.array]
        addresses = []
        for index in (1, 2):
            if index in self.caches:
                array = self.caches[index]
                keep.append(array)
                addresses.append(array.ctypes.data)
                dims = array.shape
            else:
                keep.append(io.inputs[index].array)
                addresses.append(io.inputs[index].address)
                dims = tuple(io.inputs[index].shape.dims)
        if pos is not None:
            keep.append(pos.array)
            c_str, positions = (0, 0, dims[-1]), dims[0]
        else:
            full = (1,) * (3 - len(dims)) + tuple(dims)
            c_str = (0 if full[0] == 1 else full[1] * full[2],
                     0 if full[1] == 1 else full[2], 0)
            positions = 0
        return self.impl("attention_fp32").make_rotary_step(
            x.address, y.address, addresses[0], addresses[1],
            pos.address if pos is not None else 0, (B, S, H, D, R), x_str, c_str, positions,
            bool(self.param.interleaved), tuple(keep))


@op("", "RotaryEmbedding", since=23, param=RotaryEmbeddingParam)
class RotaryEmbeddingOp(X86OptKernel):
    """Rotary position embedding of float32 X with float32 caches; NDARRAY."""

    def infer_type(self, in_types):
        for index, data_type in enumerate(in_types):
            if data_type is None or not self.input_present(index):
                continue
            want = DataType.INT64 if index == 3 else DataType.FLOAT32
            if data_type is not want:
                name = ("X", "cos_cache", "sin_cache", "position_ids")[index]
                raise self.unsupported(f"input {name} is {data_type}; pplpy's "
                                       f"RotaryEmbedding takes {want} there")
        return [DataType.FLOAT32]

    def infer_shape(self, in_shapes, in_values):
        p = self.param
        x = tuple(in_shapes[0])
        if len(x) not in (3, 4):
            raise self.shape_error("X must be 3-D (B, S, H*D) or 4-D (B, H, S, D)", in_shapes)
        if len(x) == 3:
            if p.num_heads <= 0 or x[2] % p.num_heads:
                raise self.shape_error(f"3-D X needs num_heads dividing its hidden size "
                                       f"{x[2]} (num_heads={p.num_heads})", in_shapes)
        elif p.num_heads and p.num_heads != x[1]:
            raise self.shape_error(f"num_heads={p.num_heads} differs from X's {x[1]} heads",
                                   in_shapes)
        (B, S, H, D), _ = _geometry(x, p.num_heads)
        R = p.rotary_embedding_dim or D
        if R % 2 or R > D:
            raise self.shape_error(f"rotary_embedding_dim {R} must be even and at most the "
                                   f"head size {D}", in_shapes)
        cos, sin = tuple(in_shapes[1]), tuple(in_shapes[2])
        if cos != sin:
            raise self.shape_error("cos_cache and sin_cache differ in shape", in_shapes)
        pos = in_shapes[3] if len(in_shapes) > 3 else None
        if pos is not None:
            if tuple(pos) != (B, S) or len(cos) != 2 or cos[1] != R // 2:
                raise self.shape_error(f"with position_ids [{B}, {S}] the caches must be "
                                       f"[positions, {R // 2}]", in_shapes)
        else:
            full = (1,) * (3 - len(cos)) + cos
            if len(cos) > 3 or full[0] not in (1, B) or full[1] not in (1, S) \
                    or full[2] != R // 2:
                raise self.shape_error(f"without position_ids the caches must be "
                                       f"[{B}, {S}, {R // 2}]", in_shapes)
        return [x]

    def create_kernel(self):
        return RotaryKernel(self)
