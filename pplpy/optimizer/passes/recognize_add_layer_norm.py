"""A residual Add feeding a LayerNormalization over the last axis, as one node.

    S = Add(A, B);  Y = LayerNormalization(S, Scale, Bias, axis=-1)
                                    ==>  Y[, S] = pplpy::AddLayerNormalization(A, B, Scale, Bias)

Every transformer layer normalises a residual sum: BERT (post-LN) reads only the norm,
GPT-2 and other pre-LN models also carry the sum on as the next residual.  Unfused, the
Add writes S to memory and the norm reads it back twice (statistics, then output); fused,
each row of A + B is formed once and normalised while in cache, and S is written only when
something else reads it (it is then the node's second output, under the Add's name).

Matched only when A and B have the same known shape (a broadcasting Add stays: the kernel
reads both as rows of the same length), the norm is over the last axis only with stash_type
1, its Mean / InvStdDev outputs are unused, and Scale and Bias are constants.  Runs after
recognize_layer_norm, so decomposed norms are LayerNormalization nodes by then.
"""

from pplpy.optimizer.passes.pattern_rule import PatternRule, dims_of, is_float32, producer
from pplpy.params.x86 import AddLayerNormalizationParam


def _same_shape(graph, a, b):
    da, db = dims_of(graph, a), dims_of(graph, b)
    return (da is not None and da == db and len(da) >= 1
            and all(d is not None for d in da))


class RecognizeAddLayerNorm(PatternRule):
    """Add (same-shape operands) -> LayerNormalization (last axis, constant weights)."""

    name = "recognize_add_layer_norm"
    op_types = {("", "LayerNormalization")}

    def apply(self, graph, norm, ctx):
        x = norm.inputs[0]
        add = producer(graph, x, "Add")
        if add is None or not is_float32(graph, x):
            return False
        a, b = add.inputs
        dims = dims_of(graph, x)
        p = norm.param
        if (not _same_shape(graph, a, b) or dims_of(graph, a) != dims
                or p.axis not in (-1, len(dims) - 1) or p.stash_type != 1):
            return False
        weights = [name for name in norm.inputs[1:3] if name]
        if not norm.inputs[1] or any(name not in graph.constants for name in weights):
            return False
        if any(name and (graph.is_graph_output(name) or graph.consumers(name))
               for name in norm.outputs[1:]):
            return False  # Mean / InvStdDev are read
        y = norm.outputs[0]
        if not (graph.is_graph_output(y) or graph.consumers(y)):
            return False
        outputs = [y]
        if graph.is_graph_output(x) or any(r is not norm for r in graph.consumers(x)):
            outputs.append(x)  # the sum is read elsewhere: the second output
        node = self.new_node(graph, "AddLayerNormalization", 1, [a, b, *weights], outputs,
                             AddLayerNormalizationParam(epsilon=float(p.epsilon)),
                             domain="pplpy")
        what = "Add+LayerNormalization->AddLayerNormalization" + (
            " (sum kept)" if len(outputs) > 1 else "")
        return self.replace(graph, [add, norm], y, [node], what)
