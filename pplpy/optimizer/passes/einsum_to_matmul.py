"""A matmul-shaped two-operand Einsum as MatMul between Transposes.

    Einsum("bhlk,bhtk->bhlt", Q, K)  ==>  MatMul(Q, Transpose(K, (0, 1, 3, 2)))
    Einsum("bhlt,bhtv->bhlv", P, V)  ==>  MatMul(P, V)

Every label is a batch label (both operands and the output), the contracted label (both
operands, not the output), the row label (the first operand and the output) or the column
label (the second operand and the output), one each of the last three: the operands are
transposed to (batch..., row, k) and (batch..., k, column), multiplied, and the product
transposed to the output's order; identity transposes are left out.  Why: models that write
attention as einsum (CvT's "bhlk,bhtk->bhlt" and "bhlt,bhtv->bhlv") then spell it as the
exporter spells torch.matmul, which recognize_attention turns into one Attention node that
never writes the score matrix; the transposes meet the exporter's own and cancel in
optimize_transposes.  The Einsum kernel already runs such a contraction as a GEMM (no
copies), so the rewrite is for fusion and runs in the "fusion" mode only.

Left alone: an ellipsis, a repeated label, a missing row or column, float types other than
float32, and a contracted dim not known equal in both operands (Einsum broadcasts a size-1
contraction, MatMul does not).  Batch dims broadcast alike in both (numpy's rules, the
operands of one rank).
"""

from pplpy.common.data_type import DataType
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import new_node, rank
from pplpy.oputils.onnx.einsum_equation import parse_equation
from pplpy.params.onnx import TransposeParam

MATMUL_SINCE = 9  # MatMul-9 and on: float32 with numpy broadcasting


def _record(graph, name, dims):
    """A new float32 value's record, as inference would fill it: the recognizers after this
    pass read types and dims."""
    record = graph.value(name)
    record.dtype = DataType.FLOAT32
    record.dims = None if dims is None else tuple(dims)


class EinsumToMatMul(RewriteRule):
    """A two-operand matmul-shaped Einsum becomes MatMul between Transposes."""

    name = "einsum_to_matmul"
    op_types = {("", "Einsum")}

    def condition(self, graph, node, ctx):
        self._plan = None
        if len(node.inputs) != 2 or not all(node.inputs) or "..." in node.param.equation:
            return False
        ranks = [rank(graph, name) for name in node.inputs]
        if any(r is None for r in ranks) or ranks[0] != ranks[1] or graph.opsets.get(
                "", node.opset) < MATMUL_SINCE:
            return False
        if any(graph.values[name].dtype is not DataType.FLOAT32 for name in node.inputs):
            return False
        try:
            (a, b), out = parse_equation(node.param.equation, ranks)
        except ValueError:
            return False
        if len(set(a)) != len(a) or len(set(b)) != len(b):
            return False
        batch = [c for c in out if c in a and c in b]
        ks = [c for c in a if c in b and c not in out]
        ms = [c for c in out if c in a and c not in b]
        ns = [c for c in out if c in b and c not in a]
        if (len(ks) != 1 or len(ms) != 1 or len(ns) != 1
                or len(batch) + 2 != len(out) or len(batch) + 2 != len(a)):
            return False
        k = ks[0]
        ka = graph.values[node.inputs[0]].dims[a.index(k)]
        kb = graph.values[node.inputs[1]].dims[b.index(k)]
        if ka is None or ka != kb or ka == 1:
            return False  # a contraction MatMul could not broadcast
        self._plan = ([a.index(c) for c in batch + ms + ks],
                      [b.index(c) for c in batch + ks + ns],
                      [(batch + ms + ns).index(c) for c in out])
        return True

    def apply(self, graph, node, ctx):
        perm_a, perm_b, perm_out = self._plan
        a = self._transposed(graph, node, node.inputs[0], perm_a)
        b = self._transposed(graph, node, node.inputs[1], perm_b)
        out = node.outputs[0]
        graph.remove_node(node)
        if perm_out == sorted(perm_out):
            new_node(graph, "MatMul", [a, b], [out], node)
        else:
            product = graph.unique_name(f"{node.name}/product")
            dims = graph.values[out].dims
            inverse = [perm_out.index(i) for i in range(len(perm_out))]
            _record(graph, product, None if dims is None else [dims[i] for i in inverse])
            new_node(graph, "MatMul", [a, b], [product], node)
            new_node(graph, "Transpose", [product], [out], node,
                     TransposeParam(perm=tuple(perm_out)))
        self.details["Einsum -> MatMul"] += 1
        return True

    @staticmethod
    def _transposed(graph, node, name, perm):
        """``name`` transposed by ``perm`` (``name`` itself for the identity)."""
        if perm == sorted(perm):
            return name
        out = graph.unique_name(f"{node.name}/{name}_t")
        dims = graph.values[name].dims
        _record(graph, out, [dims[i] for i in perm])
        new_node(graph, "Transpose", [name], [out], node, TransposeParam(perm=tuple(perm)))
        return out
