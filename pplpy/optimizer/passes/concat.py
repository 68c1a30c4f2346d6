"""Concat optimisation (Glow): nested Concats on one axis merge, and a Concat of slices that
tile a tensor along that axis is the tensor.

    Concat(Concat(a, b), c)                       ==>  Concat(a, b, c)
    Concat(Slice(x, 0:k), Slice(x, k:n)), n = dim ==>  x
    Concat(Slice(x, i:j), Slice(x, j:k))          ==>  Slice(x, i:k)   (constant bounds)
"""

import numpy as np

from pplpy.ir.graph import bypass_node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import constant, int_list, new_node, only_reader, rank


def _axis(graph, node):
    r = rank(graph, node.outputs[0]) or rank(graph, node.inputs[0])
    axis = node.param.axis
    if axis < 0:
        if r is None:
            return None
        axis += r
    return axis


def slice_range(graph, node, axis):
    """(source, start, end) of a Slice that takes [start, end) of ``source`` along ``axis``
    with step 1 and nothing else, bounds clamped to the dim; None otherwise."""
    if node is None or node.key != ("", "Slice") or len(node.outputs) != 1:
        return None
    dims = graph.values[node.inputs[0]].dims
    if dims is None or not isinstance(dims[axis], int):
        return None
    if node.opset < 10:
        p = node.param
        starts, ends, axes = p.starts, p.ends, p.axes
        steps = None
    else:
        values = [constant(graph, n) if i < len(node.inputs) and n else None
                  for i, n in enumerate((node.inputs + ("",) * 5)[1:5])]
        if values[0] is None or values[1] is None:
            return None
        starts, ends = int_list(values[0]), int_list(values[1])
        axes = int_list(values[2]) if values[2] is not None else None
        steps = int_list(values[3]) if values[3] is not None else None
        if (node.inputs + ("",) * 5)[3] and axes is None:
            return None  # axes computed at run time
        if (node.inputs + ("",) * 5)[4] and steps is None:
            return None
    if axes is None:
        axes = list(range(len(starts)))
    axes = [a + len(dims) if a < 0 else a for a in axes]
    if axes != [axis] or (steps is not None and list(steps) != [1]):
        return None
    n = dims[axis]
    start, end = int(starts[0]), int(ends[0])
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return node.inputs[0], start, end


class OptimizeConcats(RewriteRule):
    """Nested Concats on one axis merge; a Concat of adjacent slices is one slice or the
    source itself."""

    name = "optimize_concats"
    op_types = {("", "Concat")}

    def apply(self, graph, node, ctx):
        axis = _axis(graph, node)
        if axis is None:
            return False
        return self._merge_nested(graph, node, axis) or self._join_slices(graph, node, axis)

    def _merge_nested(self, graph, node, axis):
        inputs, merged = [], False
        for name in node.inputs:
            inner = graph.producer(name)
            if (inner is not None and inner.key == ("", "Concat") and inner is not node
                    and only_reader(graph, name) is node and _axis(graph, inner) == axis):
                inputs.extend(inner.inputs)
                merged = True
            else:
                inputs.append(name)
        if not merged:
            return False
        old = list(node.inputs)
        graph.remove_node(node)
        new_node(graph, "Concat", inputs, node.outputs, node, node.param)
        for name in old:  # the inner Concats lost their only reader
            inner = graph.producer(name)
            if inner is not None and not graph.consumers(name) \
                    and not graph.is_graph_output(name):
                graph.remove_node(inner)
        self.details["merged Concats"] += 1
        return True

    def _join_slices(self, graph, node, axis):
        ranges = [slice_range(graph, graph.producer(name), axis) for name in node.inputs]
        if len(ranges) < 2 or any(r is None for r in ranges):
            return False
        if any(only_reader(graph, name) is not node for name in node.inputs):
            return False
        source = ranges[0][0]
        if any(r[0] != source for r in ranges):
            return False
        if any(start > end for _, start, end in ranges):
            return False  # an empty slice (end before start) breaks the start-to-end join
        if any(a[2] != b[1] for a, b in zip(ranges, ranges[1:])):
            return False  # not adjacent
        start, end = ranges[0][1], ranges[-1][2]
        full = graph.values[source].dims[axis]
        if not (start == 0 and end == full) and graph.opsets.get("", 1) < 10:
            return False  # a Slice with bound inputs needs opset 10
        slices = [graph.producer(name) for name in node.inputs]
        like = slices[0]
        graph.remove_node(node)
        for s in slices:
            graph.remove_node(s)
        if start == 0 and end == full:
            new_node(graph, "Identity", [source], node.outputs, node)
            identity = graph.producer(node.outputs[0])
            bypass_node(graph, identity)
            self.details["Concat of slices -> source"] += 1
        else:
            bounds = []
            for base, v in (("starts", start), ("ends", end), ("axes", axis)):
                name = graph.unique_name(f"{like.name}/{base}")
                graph.add_constant(name, np.asarray([v], np.int64))
                bounds.append(name)
            new_node(graph, "Slice", [source, *bounds], node.outputs, like)
            self.details["Concat of slices -> one Slice"] += 1
        return True
