"""A projection an exporter wrote through 2-D, back to the MatMul + Add of its N-D input.

    Reshape(Gemm(Reshape(A, (-1, K)), W, c), A's leading dims + (N,))
                                    ==>  Add(MatMul(A, W'), c')       (W', c': transB,
                                                                       alpha, beta folded)

HF's GPT-2 (its ``Conv1D``) writes every projection this way, and the dynamo exporter
flattens the attention's head merge straight to 2-D in front of the output projection:
A = Transpose(Y, (0, 2, 1, 3)) of (B, S, H, d), flattened to (-1, H*d).  There the dims
after A's leading ones multiply to K, and a Reshape to (B, S, H*d) stays in front of the
MatMul.  Back in N-D, ``fuse_matmul_bias`` makes the MatMul and Add one MatMulBias whose
epilogue takes the activation after them (a GELU stood after the second Reshape, where no
epilogue could take it), and ``recognize_attention`` finds the head merge it knows.
Runs before the recognizers; in fusion builds only (an unfused build runs the graph as it
was written).
"""

import numpy as np

from pplpy.optimizer.passes.fuse_matmul_bias import bias_vector
from pplpy.optimizer.passes.pattern_rule import (PatternRule, dims_of, is_float32,
                                                  only_reader, producer, same_dim)
from pplpy.params.onnx import ReshapeParam

ADD_OPSET = 14
MATMUL_OPSET = 13
RESHAPE_OPSET = 14


def _bias(graph, gemm, n):
    """Gemm's C times beta as an (n,) vector; zeros without C or with beta 0 (ONNX ignores C
    then: an inf in it must not give NaN); None for a C that is not one value per column."""
    if len(gemm.inputs) < 3 or not gemm.inputs[2] or gemm.param.beta == 0:
        return np.zeros(n, np.float32)
    column = bias_vector(graph, gemm.inputs[2], n, 2)
    return None if column is None else column * np.float32(gemm.param.beta)


class UnflattenGemm(PatternRule):
    """Reshape / Gemm / Reshape of an N-D A to [Reshape] / MatMul / Add."""

    name = "unflatten_gemm"
    op_types = {("", "Gemm")}

    def apply(self, graph, gemm, ctx):
        p = gemm.param
        inner = producer(graph, gemm.inputs[0], "Reshape")
        outer = only_reader(graph, gemm.outputs[0], "Reshape")
        weight = graph.constants.get(gemm.inputs[1])
        if (inner is None or outer is None or weight is None or weight.ndim != 2
                or weight.dtype != np.float32 or p.transA):
            return False
        a = inner.inputs[0]
        a_dims, flat, out_dims = (dims_of(graph, name) for name in
                                  (a, inner.outputs[0], outer.outputs[0]))
        weight = (weight.T if p.transB else weight) * np.float32(p.alpha)
        k, n = weight.shape
        if (a_dims is None or flat is None or out_dims is None or len(flat) != 2
                or len(out_dims) < 3 or out_dims[-1] != n or not is_float32(graph, a)):
            return False
        lead = len(out_dims) - 1  # A's leading dims, then dims whose product is K
        tail = a_dims[lead:]
        if (not tail or not all(isinstance(d, int) for d in tail) or int(np.prod(tail)) != k
                or not all(same_dim(x, y) for x, y in zip(a_dims[:lead], out_dims[:lead]))):
            return False
        bias = _bias(graph, gemm, n)
        matched, out = [inner, gemm, outer], outer.outputs[0]
        if bias is None or not self.can_replace(graph, matched, out):
            return False
        new_nodes = []
        if len(tail) > 1:
            merge = self.new_node(graph, "Reshape", RESHAPE_OPSET,
                                  [a, self.new_constant(graph, "shape", np.array(
                                      [0] * lead + [k], np.int64))], None, ReshapeParam())
            new_nodes.append(merge)
            a = merge.outputs[0]
            # its dims now, for the passes before the next inference (fuse_matmul_bias wants
            # a known 3-D A)
            record = graph.value(a)
            record.dtype, record.dims = graph.values[inner.inputs[0]].dtype, tuple(
                a_dims[:lead]) + (k,)
        weight = self.new_constant(graph, "weight", np.ascontiguousarray(weight))
        if not bias.any():  # no C (or beta 0): the product alone
            new_nodes.append(self.new_node(graph, "MatMul", MATMUL_OPSET, [a, weight], [out]))
            return self.replace(graph, matched, out, new_nodes, "Reshape+Gemm+Reshape->MatMul")
        product = self.new_node(graph, "MatMul", MATMUL_OPSET, [a, weight], None)
        new_nodes += [product,
                      self.new_node(graph, "Add", ADD_OPSET,
                                    [product.outputs[0], self.new_constant(graph, "bias", bias)],
                                    [out])]
        return self.replace(graph, matched, out, new_nodes, "Reshape+Gemm+Reshape->MatMul+Add")
