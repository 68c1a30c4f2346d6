"""A gated MLP's fused gate-and-up projection, split after the GEMM, becomes two GEMMs.

    h = MatMul(x, W)   W constant (K, 2I)
    gate, up = Split(h, axis=-1)                          ==>   gate = MatMul(x, W[:, :I])
    y = Mul(up, Swish(gate))                                    up   = MatMul(x, W[:, I:])

Phi-3 writes its SwiGLU MLP this way (``gate_up_proj`` then ``chunk(2)``).  The Split
copied both halves and the activation and the product ran as a chain of their own; as two
MatMuls of the same total work, the engine's post-op fusion runs the activation and the
product (a binary post-op reading the other MatMul's output) in the gate GEMM's epilogue,
as it does for Llama's separate gate and up projections.  Exact: each output column of a
MatMul depends on its own column of W only.

Fires when the Split (along the last axis, two outputs, sizes known) is the MatMul's only
reader, each half is read by one node, and one half by a unary activation: a Split of a
projection read otherwise (GPT-2's Q, K, V for pack_qkv) is left alone.
"""

import numpy as np

from pplpy.optimizer.passes.fuse_eltwise_chains import UNARY_OPS
from pplpy.optimizer.passes.pattern_rule import PatternRule, dims_of, is_float32, producer
from pplpy.optimizer.passes.queries import constant, only_reader


def _split_sizes(graph, split, width):
    """The two sizes the Split cuts ``width`` into, or None when not known or not two."""
    if len(split.outputs) != 2 or not all(split.outputs):
        return None
    p = split.param
    sizes = None
    if len(split.inputs) > 1 and split.inputs[1]:
        value = constant(graph, split.inputs[1])
        sizes = None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    elif p is not None and p.split is not None:
        sizes = [int(v) for v in p.split]
    elif width % 2 == 0:  # num_outputs 2, or equal parts by default
        sizes = [width // 2, width // 2]
    if sizes is None or len(sizes) != 2 or sum(sizes) != width or min(sizes) <= 0:
        return None
    return sizes


class SplitGatedProjection(PatternRule):
    """MatMul (constant B) -> Split into two along the last axis, one half activated: two
    MatMuls on B's column blocks."""

    name = "split_gated_projection"
    op_types = {("", "Split")}

    def apply(self, graph, split, ctx):
        h = split.inputs[0]
        matmul = producer(graph, h, "MatMul")
        weight = None if matmul is None else constant(graph, matmul.inputs[1])
        dims = dims_of(graph, h)
        if (weight is None or weight.ndim != 2 or weight.dtype != np.float32 or dims is None
                or only_reader(graph, h) is not split or not is_float32(graph, matmul.inputs[0])):
            return False
        axis = split.param.axis if split.param is not None else 0
        if axis % len(dims) != len(dims) - 1:
            return False
        sizes = _split_sizes(graph, split, weight.shape[1])
        readers = [only_reader(graph, name) for name in split.outputs]
        if sizes is None or None in readers or not any(
                r.domain == "" and r.op_type in UNARY_OPS | {"Swish", "Gelu"} for r in readers):
            return False
        # (h is read by the Split alone and no half is a graph output: only_reader said so)
        x, cut = matmul.inputs[0], sizes[0]
        nodes = []
        for name, block in zip(split.outputs, (weight[:, :cut], weight[:, cut:])):
            w = self.new_constant(graph, "weight", block)
            nodes.append(self.new_node(graph, "MatMul", matmul.opset, [x, w], [name]))
        return self.replace(graph, [split, matmul], None, nodes, "MatMul+Split->2 MatMul")
