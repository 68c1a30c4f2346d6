"""pplpy::PackedAttention: Attention (opset 23) over Q, K and V packed side by side in one
tensor, as one projection GEMM writes them.

    QKV (B, S, Wq + Wk + Wv), [attn_mask]  ->  Y (B, S, q_num_heads * head_size of V)

with ``qkv_hidden_sizes`` = (Wq, Wk, Wv) and Q = QKV[..., :Wq], K = QKV[..., Wq:Wq + Wk],
V = QKV[..., Wq + Wk:] in Attention's 3-D form (``q_num_heads`` / ``kv_num_heads`` heads);
with ``heads_interleaved``, QKV viewed as (B, S, H, (Wq + Wk + Wv) / H) holds each head's q,
k and v side by side instead (LeViT).
The optimiser's ``pack_qkv`` writes it for self-attention: where the model projects Q, K and
V with one MatMul and splits the result (GPT-2), the Split's three copies go; where it has
three projections of the same input (BERT, ViT), they become one GEMM with three times the
columns, and then the same; where it splits a per-head view of one projection and transposes
the parts to (B, H, S, d) (LeViT), the Split and the Transposes go.  The kernel is
Attention's: it reads each head of Q, K and V through strides, here the packed row's width,
so nothing is copied apart.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.attention import AttentionKernel, AttentionOp, HeadView
from pplpy.params.x86 import PackedAttentionParam


class PackedAttentionKernel(AttentionKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        qkv = io.inputs[0]
        mask = io.inputs[1] if len(io.inputs) > 1 else None
        b, s, width = qkv.shape.dims
        views, offset = [], 0
        for size, heads in zip(p.qkv_hidden_sizes, (p.q_num_heads, p.kv_num_heads,
                                                     p.kv_num_heads)):
            head = size // heads
            if p.heads_interleaved:  # head h's part starts h * (width / heads) in
                views.append(HeadView(qkv.address + 4 * offset, (b, heads, s, head),
                                      (s * width, width // heads, width)))
                offset += head
            else:
                views.append(HeadView(qkv.address + 4 * offset, (b, heads, s, head),
                                      (s * width, head, width)))
                offset += size
        return self.attention_steps(io, views, mask, None, None, None)


@op("pplpy", "PackedAttention", since=1, param=PackedAttentionParam)
class PackedAttentionOp(AttentionOp):
    """(QKV[, attn_mask]) -> Y; float32 QKV, bool or float32 mask; NDARRAY."""

    def _split_shapes(self, qkv, in_shapes):
        """Q's, K's and V's 3-D shapes within the packed ``qkv`` shape."""
        p = self.param
        sizes = tuple(p.qkv_hidden_sizes)
        if len(sizes) != 3 or min(sizes) < 1:
            raise self.shape_error(f"qkv_hidden_sizes must be three positive widths, got "
                                   f"{list(sizes)}", in_shapes)
        if not p.q_num_heads or not p.kv_num_heads:
            raise self.shape_error("PackedAttention needs the q_num_heads and kv_num_heads "
                                   "attributes", in_shapes)
        if len(qkv) != 3 or qkv[2] != sum(sizes):
            raise self.shape_error(f"QKV must be 3-D (batch, sequence, {sum(sizes)}): the "
                                   f"widths {list(sizes)} side by side", in_shapes)
        if p.heads_interleaved and (p.q_num_heads != p.kv_num_heads
                                    or any(size % p.q_num_heads for size in sizes)):
            raise self.shape_error(f"heads_interleaved needs as many K / V heads as query "
                                   f"heads ({p.kv_num_heads} and {p.q_num_heads}) and widths "
                                   f"{list(sizes)} that split into them", in_shapes)
        return [(qkv[0], qkv[1], size) for size in sizes]

    def infer_type(self, in_types):
        if len(in_types) > 2:
            raise self.unsupported("PackedAttention takes QKV and an optional attn_mask only")
        for index, data_type in enumerate(in_types):
            if data_type is None or not self.input_present(index):
                continue
            ok = (DataType.FLOAT32,) if index == 0 else (DataType.FLOAT32, DataType.BOOL)
            if data_type not in ok:
                raise self.unsupported(f"{('QKV', 'attn_mask')[index]} is {data_type}; "
                                       f"pplpy's PackedAttention takes "
                                       f"{' or '.join(str(t) for t in ok)} there")
        return AttentionOp.infer_type(self, [DataType.FLOAT32] * 3)

    def infer_shape(self, in_shapes, in_values):
        q, k, v = self._split_shapes(tuple(in_shapes[0]), in_shapes)
        mask = in_shapes[1] if len(in_shapes) > 1 else None
        return AttentionOp.infer_shape(self, [q, k, v, mask], in_values)

    def create_kernel(self):
        return PackedAttentionKernel(self)
