"""FlexAttention (ai.onnx.preview opset 1): scaled dot-product attention over rank-4 Q, K,
V with two optional user subgraphs, as PyTorch's flex_attention:

    scores = Q K^T * scale;  scores = score_mod(scores)
    probs = softmax(scores); probs = prob_mod(probs);  Y = probs V

A query head h reads KV head h / (Hq / Hkv).  Without modifiers this is the Attention op's
flash-style step (``_attention_fp32.pxi``: no score matrix at all).  With them the scores
must exist as a tensor for the subgraph to see, so the node becomes five phases, each a
piece pplpy already has: a batched GEMM (Q K^T), the score_mod subgraph, the Softmax step,
the prob_mod subgraph, a batched GEMM (probs V).  A subgraph is a small ONNX model of its
own (the node's opset imports), loaded with pplpy when the node is and run on one thread
in a Python step over the scores buffer; it may use any op pplpy supports, and one it cannot
run makes the node unsupported at load.
"""

import math

import numpy as np
import onnx
from onnx import AttributeProto, helper

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.attention import _head_view
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import PplError, ShapeError
from pplpy.models.onnx.registry import generic_parse
from pplpy.params.onnx import FlexAttentionParam
from pplpy.runtime.step import PythonStep

_FLOAT = 1  # TensorProto.FLOAT: the only softmax precision pplpy computes in
_MODS = ("score_mod", "prob_mod")


def parse_flex_attention(node_proto, opset, opsets):
    """FlexAttentionParam, each modifier subgraph stored as a serialized one-graph model
    that imports the node's model's opsets (what its nodes mean)."""
    graphs, plain = {}, onnx.NodeProto()
    plain.CopyFrom(node_proto)
    del plain.attribute[:]
    for attr in node_proto.attribute:
        if attr.type == AttributeProto.GRAPH and attr.name in _MODS:
            imports = [helper.make_opsetid(domain, version) for domain, version in opsets.items()]
            graphs[attr.name] = helper.make_model(attr.g, opset_imports=imports,
                                                  producer_name="pplpy").SerializeToString()
        else:
            plain.attribute.append(attr)
    return generic_parse(FlexAttentionParam, plain, overrides=graphs)


parse_flex_attention.takes_graphs = True


class ModGraph:
    """One modifier subgraph as a pplpy runtime: x -> f(x), same shape, float32, in place."""

    def __init__(self, name, model_bytes, isa):
        import pplpy  # the subgraph is a model like any other

        self.name = name
        model = onnx.load_from_string(model_bytes)
        if len(model.graph.input) != 1 or len(model.graph.output) != 1:
            raise ValueError(f"{name} must have one input and one output, has "
                             f"{len(model.graph.input)} and {len(model.graph.output)}")
        self.runtime = pplpy.load(model_bytes, num_threads=1, max_isa=isa)
        self.input = self.runtime.input_names[0]
        self.output = self.runtime.output_names[0]

    def apply(self, buffer):
        out = self.runtime.run({self.input: buffer})[self.output]
        if out.shape != buffer.shape or out.dtype != np.float32:
            raise ShapeError(f"{self.name} must return float32 {list(buffer.shape)}, returned "
                             f"{out.dtype} {list(out.shape)}")
        np.copyto(buffer, out)


class FlexAttentionKernel(X86Kernel):
    def __init__(self, op, mods):
        super().__init__(op)
        self.mods = mods  # name -> ModGraph

    def make_step(self, io):
        if not self.has_work(io):
            return None
        q, k, v = io.inputs[:3]
        y = io.outputs[0]
        B, Hq, L, D = q.shape.dims
        _, Hkv, S, _ = k.shape.dims
        Dv = v.shape.dims[3]
        p = self.param
        scale = p.scale if p.scale is not None else 1.0 / math.sqrt(D)
        keep = tuple(s.array for s in (*io.inputs, *io.outputs) if s is not None)
        if not self.mods or S == 0:
            views = [_head_view(tuple(s.shape.dims), None)[1] for s in (q, k, v, y)]
            step = self.impl("attention_fp32").make_attention_step(
                q.address, k.address, v.address, y.address, 0, 0, (B, Hq, Hkv, L, S, D, Dv),
                *views, 0, 0, (0, 0, 0), 0, 0, False, False, 0, -1, -1, float(scale), 0.0,
                io.num_threads, keep)
            step.label = self.node.name
            return step
        return self._phases(io, (B, Hq, Hkv, L, S, D, Dv), float(scale), keep)

    def _phases(self, io, dims, scale, keep):
        """Q K^T, score_mod, softmax, prob_mod, probs V: steps with barriers between."""
        q, k, v = io.inputs[:3]
        y = io.outputs[0]
        B, Hq, Hkv, L, S, D, Dv = dims
        gemm = self.impl("gemm_fp32")
        scores = np.empty((B, Hq, L, S), np.float32)
        keep = keep + (scores,)
        heads = np.arange(B * Hq)
        kv_heads = (heads // Hq) * Hkv + (heads % Hq) // (Hq // Hkv)
        addr = scores.ctypes.data
        steps = [gemm.make_gemm_step(
            q.address, k.address, addr, L, D, S, io.num_threads, batch=B * Hq,
            a_offsets=heads * L * D, b_offsets=kv_heads * S * D, b_packed=False, trans_b=True,
            alpha=scale, keep=keep)]
        steps += self._mod_step("score_mod", scores)
        steps.append(self.impl("norm_fp32").make_softmax_step(addr, addr, B * Hq * L, S, 1))
        steps += self._mod_step("prob_mod", scores)
        steps.append(gemm.make_gemm_step(
            addr, v.address, y.address, L, S, Dv, io.num_threads, batch=B * Hq,
            a_offsets=heads * L * S, b_offsets=kv_heads * S * Dv, b_packed=False, keep=keep))
        for step in steps:
            step.label = self.node.name
        return steps

    def _mod_step(self, name, buffer):
        mod = self.mods.get(name)
        if mod is None:
            return []
        node = self.node

        def run():
            try:
                mod.apply(buffer)
            except PplError as exc:  # the subgraph refused the scores it was given
                raise ShapeError(f"{node.describe()}: {name}: {exc}") from exc

        return [PythonStep(run, label=f"{node.name}:{name}")]


# Closed at 1, the preview domain's only opset so far: a later one may change the op.
@op("ai.onnx.preview", "FlexAttention", since=1, until=1, param=FlexAttentionParam,
    parse=parse_flex_attention)
class FlexAttentionOp(X86OptKernel):
    """Y = prob_mod(softmax(score_mod(Q K^T * scale))) V; float32 Q, K, V; NDARRAY."""

    _mods = None

    def mods(self):
        """The modifier subgraphs as pplpy runtimes, loaded once (UnsupportedOpError naming
        this node when one cannot be)."""
        if self._mods is None:
            mods = {}
            for name in _MODS:
                model_bytes = getattr(self.param, name)
                if model_bytes is None:
                    continue
                try:
                    mods[name] = ModGraph(name, model_bytes, self.options.isa)
                except (PplError, ValueError) as exc:
                    raise self.unsupported(f"its {name} subgraph cannot run in pplpy: "
                                           f"{exc}") from exc
            self._mods = mods
        return self._mods

    def infer_type(self, in_types):
        for name, data_type in zip("QKV", in_types):
            if data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {name} is {data_type}; pplpy's FlexAttention "
                                       "runs on float32")
        if self.param.softmax_precision not in (None, _FLOAT):
            raise self.unsupported(f"softmax_precision={self.param.softmax_precision}: pplpy "
                                   "computes the softmax in float32 (1)")
        self.mods()
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        q, k, v = (tuple(s) for s in in_shapes[:3])
        for name, dims in zip("QKV", (q, k, v)):
            if len(dims) != 4:
                raise self.shape_error(f"{name} must be rank 4 (batch, heads, sequence, head "
                                       f"size), got rank {len(dims)}", in_shapes)
        if not q[0] == k[0] == v[0]:
            raise self.shape_error("Q, K and V must have the same batch size", in_shapes)
        if q[3] != k[3]:
            raise self.shape_error(f"Q's head size {q[3]} differs from K's {k[3]}", in_shapes)
        if k[1:3] != v[1:3]:
            raise self.shape_error("K and V must have the same heads and sequence length",
                                   in_shapes)
        if k[1] < 1 or q[1] % k[1]:
            raise self.shape_error(f"{q[1]} query heads are not a multiple of {k[1]} KV heads",
                                   in_shapes)
        return [(q[0], q[1], q[2], v[3])]

    def create_kernel(self):
        return FlexAttentionKernel(self, self.mods())
