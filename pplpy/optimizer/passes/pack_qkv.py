"""Self-attention's Q, K and V from one packed tensor: pplpy::PackedAttention.

    Split(X, axis=-1) -> Q, K, V;  Y = Attention(Q, K, V[, mask])
                                   ==>  Y = pplpy::PackedAttention(X[, mask])
    MatMulBias(A, Wq, bq), MatMulBias(A, Wk, bk), MatMulBias(A, Wv, bv) -> Q, K, V; Attention
        ==>  X = MatMulBias(A, [Wq Wk Wv], [bq bk bv]);  Y = pplpy::PackedAttention(X[, mask])

for an Attention in the 3-D form (what recognize_attention writes for the exporter's head
splits) with no cache, no valid-length input and only Y read.  GPT-2 projects Q, K and V with
one MatMul and splits the result: the Split wrote a copy of all three (its 12 nodes 1.0-1.2
ms per run of GPT-2-small at one thread on the 2-core EPYC, `pplnn --enable-profiling`),
which the attention now reads in place through strides (PackedAttention took what Attention
took).  BERT and ViT project the same input three times: one GEMM with three times the
columns copies its input once instead of three times and is one step of the plan instead of
three, with three times the panels for a thread team to share; at one thread the one and
the three take the same time (128 x 768 x 2304 4.08 ms against 3 x 1.35, warm weights).
Matched only when every Q, K, V is read by the Attention alone, the widths fit the heads,
and (for the three projections) the MatMulBias nodes carry no post-op; a MatMul of the same
input with a constant weight counts as a projection with a zero bias (T5 has no biases,
Whisper's key projection none).  Runs after
fuse_matmul_bias, which writes those MatMulBias nodes.
"""

import dataclasses

import numpy as np

from pplpy.optimizer.passes.pattern_rule import (
    PatternRule,
    dims_of,
    is_float32,
    only_reader,
    producer,
)
from pplpy.params.onnx import ReshapeParam
from pplpy.params.x86 import PackedAttentionParam

RESHAPE_OPSET = 14
HEAD_SWAP = (0, 2, 1, 3)  # (B, S, H, d) <-> (B, H, S, d)


def _split_sizes(graph, split, width):
    """The widths a Split along the last axis of a 3-D value gives its three outputs, or
    None when it is not such a Split."""
    x_dims = dims_of(graph, split.inputs[0])
    if (x_dims is None or len(x_dims) != 3 or x_dims[2] != width or len(split.outputs) != 3
            or split.param.axis not in (2, -1)):
        return None
    sizes = [dims_of(graph, name) for name in split.outputs]
    if any(d is None or len(d) != 3 or not isinstance(d[2], int) for d in sizes):
        return None
    return tuple(d[2] for d in sizes)


class PackQKV(PatternRule):
    """Attention (3-D, self-attention) whose Q, K, V come from one Split or from three
    projections of one input."""

    name = "pack_qkv"
    op_types = {("", "Attention")}

    def apply(self, graph, attn, ctx):
        p = attn.param
        inputs = list(attn.inputs) + [""] * (4 - len(attn.inputs))
        q, k, v, mask = inputs[:4]
        if (any(inputs[4:]) or any(attn.outputs[1:]) or not (q and k and v)
                or p.qk_matmul_output_mode != 0):
            return False
        dims = [dims_of(graph, name) for name in (q, k, v)]
        if any(d is not None and len(d) == 4 for d in dims):  # (the 4-D form)
            return self._heads_interleaved(graph, attn, q, k, v, mask)
        if any(d is None or len(d) != 3 or not is_float32(graph, name)
               for d, name in zip(dims, (q, k, v))):
            return False
        if not (dims[0][:2] == dims[1][:2] == dims[2][:2]):
            return False  # cross-attention: keys of another length
        sizes = tuple(d[2] for d in dims)
        if not all(isinstance(w, int) for w in sizes):
            return False
        if any(len(set(graph.consumers(name))) != 1 or graph.is_graph_output(name)
               for name in (q, k, v)):
            return False
        producers = [graph.producer(name) for name in (q, k, v)]
        param = PackedAttentionParam(**{f.name: getattr(p, f.name)
                                        for f in dataclasses.fields(p)},
                                     qkv_hidden_sizes=sizes)
        new_inputs = [None] + ([mask] if mask else [])
        split = producers[0]
        if (split is not None and split.domain == "" and split.op_type == "Split"
                and all(node is split for node in producers)
                and list(split.outputs) == [q, k, v]
                and _split_sizes(graph, split, sum(sizes)) == sizes):
            new_inputs[0] = split.inputs[0]
            node = self.new_node(graph, "PackedAttention", 1, new_inputs, [attn.outputs[0]],
                                 param, domain="pplpy")
            return self.replace(graph, [split, attn], attn.outputs[0], [node],
                                "Split+Attention->PackedAttention")
        projections = self._projections(graph, producers)
        if projections is None:
            return False
        a, weights, biases = projections
        packed = self.new_node(
            graph, "MatMulBias", 1,
            [a, self.new_constant(graph, "qkv_weight", np.concatenate(weights, axis=1)),
             self.new_constant(graph, "qkv_bias", np.concatenate(biases))], None,
            domain="pplpy")
        new_inputs[0] = packed.outputs[0]
        node = self.new_node(graph, "PackedAttention", 1, new_inputs, [attn.outputs[0]], param,
                             domain="pplpy")
        return self.replace(graph, [*producers, attn], attn.outputs[0], [packed, node],
                            "3 MatMulBias+Attention->MatMulBias+PackedAttention")

    def _heads_interleaved(self, graph, attn, q, k, v, mask):
        """Attention (4-D form) whose Q, K, V are Transpose(0, 2, 1, 3) of the three parts
        of one Split along the last axis of X (B, S, H, dq + dk + dv), its output read by one
        Transpose(0, 2, 1, 3) back (LeViT): PackedAttention on X viewed (B, S, H * width)
        with heads_interleaved, its output viewed (B, S, H, dv) (both views are Reshapes,
        which the plan runs in place)."""
        if any(only_reader(graph, name, "Attention") is not attn for name in (q, k, v)):
            return False
        transposes = [producer(graph, name, "Transpose") for name in (q, k, v)]
        if any(t is None or tuple(t.param.perm or ()) != HEAD_SWAP for t in transposes):
            return False
        parts = [t.inputs[0] for t in transposes]
        split = producer(graph, parts[0], "Split")
        if (split is None or list(split.outputs) != parts or split.param.axis not in (3, -1)
                or any(only_reader(graph, name, "Transpose") is not t
                       for name, t in zip(parts, transposes))):
            return False
        x = split.inputs[0]
        x_dims, part_dims = dims_of(graph, x), [dims_of(graph, name) for name in parts]
        if (x_dims is None or len(x_dims) != 4 or not is_float32(graph, x)
                or any(d is None or len(d) != 4 for d in part_dims)):
            return False
        heads, widths = x_dims[2], [d[3] for d in part_dims]
        if not all(isinstance(w, int) for w in [heads, *widths]) or x_dims[3] != sum(widths):
            return False
        back = only_reader(graph, attn.outputs[0], "Transpose")
        if back is None or tuple(back.param.perm or ()) != HEAD_SWAP:
            return False
        p = attn.param
        if (p.q_num_heads not in (None, heads) or p.kv_num_heads not in (None, heads)):
            return False
        fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
        fields.update(q_num_heads=heads, kv_num_heads=heads)
        param = PackedAttentionParam(**fields, heads_interleaved=1,
                                     qkv_hidden_sizes=tuple(heads * w for w in widths))
        packed = self.new_node(graph, "Reshape", RESHAPE_OPSET, [x, self.new_constant(
            graph, "shape", np.array([0, 0, heads * sum(widths)], np.int64))], None,
            ReshapeParam())
        node = self.new_node(graph, "PackedAttention", 1,
                             [packed.outputs[0]] + ([mask] if mask else []), None, param,
                             domain="pplpy")
        unpacked = self.new_node(graph, "Reshape", RESHAPE_OPSET, [node.outputs[0], (
            self.new_constant(graph, "shape", np.array([0, 0, heads, widths[2]], np.int64)))],
            [back.outputs[0]], ReshapeParam())
        return self.replace(graph, [split, *transposes, attn, back], back.outputs[0],
                            [packed, node, unpacked],
                            "Split+Transposes+Attention+Transpose->PackedAttention")

    @staticmethod
    def _projections(graph, producers):
        """(A, [W], [bias]) when the three producers project one input A with constant
        float32 weights: post-op-free pplpy::MatMulBias nodes, or MatMuls (a projection
        without a bias, as T5's and Whisper's keys have: a zero bias), else None."""
        def projection(node):
            """(A, W, bias) of one producer, or None."""
            if node is None:
                return None
            if node.domain == "pplpy" and node.op_type == "MatMulBias" and node.param is None:
                return node.inputs[0], graph.constants.get(node.inputs[1]), \
                    graph.constants.get(node.inputs[2])
            if node.domain == "" and node.op_type == "MatMul":
                w = graph.constants.get(node.inputs[1])
                a_dims = dims_of(graph, node.inputs[0])
                if w is None or w.ndim != 2 or a_dims is None or len(a_dims) != 3:
                    return None
                return node.inputs[0], w, np.zeros(w.shape[1], np.float32)
            return None

        found = [projection(node) for node in producers]
        if any(f is None for f in found) or len(set(producers)) != 3:
            return None
        if len({a for a, _, _ in found}) != 1:
            return None
        weights = [w for _, w, _ in found]
        biases = [b for _, _, b in found]
        if any(w is None or w.ndim != 2 or w.dtype != np.float32 for w in weights):
            return None
        if len({w.shape[0] for w in weights}) != 1 or any(
                b is None or b.shape != (w.shape[1],) for b, w in zip(biases, weights)):
            return None
        return found[0][0], weights, [b.astype(np.float32) for b in biases]
