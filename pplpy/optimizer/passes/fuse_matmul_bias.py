"""A transformer projection, MatMul(A, W) then Add of a bias, as one node when A is 3-D or
more.

    Add(bias, MatMul(A, W))   A (..., M, K), W constant (K, N), bias constant (N,)
                                                 ==>  pplpy::MatMulBias(A, W, bias)

``fold_into_gemm`` turns the 2-D case into a Gemm; ONNX's Gemm takes only 2-D A, so the
exporter's (batch, seq, hidden) projections kept a separate Add: one more pass over the
output, and the activation after it (BERT's Gelu) could not fuse into the MatMul's epilogue
because the Add stood between them.  pplpy's MatMulBias runs the product as one gemm with
the leading dims folded into M and the bias in the epilogue, where the engine's post-op
fusion then adds the activation.  Runs after fold_into_gemm, so a per-column scale after
the MatMul is already folded into W; the pipeline runs fold_into_gemm again afterwards,
which folds a scale or shift after the bias into W and the bias.

HF's GPT-2 writes its projections through 2-D Gemms: ``unflatten_gemm`` turns them into
the MatMul + Add this pass takes.
"""

import numpy as np

from pplpy.optimizer.passes.pattern_rule import PatternRule, dims_of, is_float32, other, producer


def bias_vector(graph, name, n, out_rank):
    """The bias as an (n,) vector when it broadcasts along the last axis only, else None."""
    value = graph.constants.get(name)
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > out_rank:
        return None
    if value.ndim == 0 or value.shape[-1] not in (1, n) or any(d != 1 for d in value.shape[:-1]):
        return None
    return np.broadcast_to(value.reshape(-1), (n,)).astype(np.float32)


class FuseMatMulBias(PatternRule):
    """MatMul (3-D or more A, constant 2-D B) + constant bias along the last axis."""

    name = "fuse_matmul_bias"
    op_types = {("", "Add")}

    def apply(self, graph, add, ctx):
        for src in add.inputs:
            matmul = producer(graph, src, "MatMul")
            if matmul is None or other(add, src) is None or add.inputs[0] == add.inputs[1]:
                continue
            a, w = matmul.inputs
            weight = graph.constants.get(w)
            a_dims = dims_of(graph, a)
            if (weight is None or weight.ndim != 2 or a_dims is None or len(a_dims) < 3
                    or weight.dtype != np.float32 or not is_float32(graph, a)):
                continue
            # A bias along the last axis of rank <= A's never changes the product's shape.
            bias = bias_vector(graph, other(add, src), weight.shape[1], len(a_dims))
            out = add.outputs[0]
            if bias is None or not self.can_replace(graph, [matmul, add], out):
                continue
            node = self.new_node(graph, "MatMulBias", 1,
                                 [a, w, self.new_constant(graph, "bias", bias)], [out],
                                 domain="pplpy")
            return self.replace(graph, [matmul, add], out, [node], "MatMul+Add->MatMulBias")
        return False
