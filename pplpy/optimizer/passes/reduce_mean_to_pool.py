"""ReduceMean over every spatial axis of an (N, C, ...) tensor is GlobalAveragePool (Glow),
which the engine runs in N16CX next to convolutions instead of falling back to NDARRAY.

    ReduceMean(x, axes=[2, 3], keepdims=1)  ==>  GlobalAveragePool(x)
    ReduceMean(x, axes=[2, 3], keepdims=0)  ==>  Reshape(GlobalAveragePool(x), [0, 0])
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import constant, int_list, new_node, rank
from pplpy.params.onnx import ReshapeParam


def reduce_axes(graph, node):
    """The axes a Reduce* node reduces (normalised), or None when unknown or all."""
    r = rank(graph, node.inputs[0])
    if r is None:
        return None
    if node.opset >= 18:
        if len(node.inputs) < 2 or not node.inputs[1]:
            return None
        value = constant(graph, node.inputs[1])
        if value is None:
            return None
        axes = int_list(value)
    else:
        axes = node.param.axes
        if axes is None:
            return None
    return sorted(a + r if a < 0 else a for a in axes)


class ReduceMeanToGlobalPool(RewriteRule):
    """ReduceMean over the spatial axes of an image becomes GlobalAveragePool."""

    name = "reduce_mean_to_global_pool"
    op_types = {("", "ReduceMean")}

    def condition(self, graph, node, ctx):
        r = rank(graph, node.inputs[0])
        record = graph.values.get(node.inputs[0])
        return (r is not None and r >= 3 and reduce_axes(graph, node) == list(range(2, r))
                and record.dtype is DataType.FLOAT32)

    def apply(self, graph, node, ctx):
        graph.remove_node(node)
        if node.param.keepdims:
            new_node(graph, "GlobalAveragePool", [node.inputs[0]], node.outputs, node)
        else:
            pooled = graph.unique_name(f"{node.outputs[0]}/pooled")
            new_node(graph, "GlobalAveragePool", [node.inputs[0]], [pooled], node)
            shape = graph.unique_name(f"{node.name}/shape")
            graph.add_constant(shape, np.zeros(2, np.int64))
            new_node(graph, "Reshape", [pooled, shape], node.outputs, node, ReshapeParam())
        self.details["ReduceMean -> GlobalAveragePool"] += 1
        return True
