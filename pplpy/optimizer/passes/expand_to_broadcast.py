"""Expand and Tile whose only readers broadcast anyway are dropped (Glow's "Expand/Tile into
broadcasting"): Add(Expand(x, s), y) is Add(x, y) when y already has the expanded shape.

The rewrite needs both shapes: for every reader, broadcasting the unexpanded input with the
reader's other inputs must give the same output shape as before.  A Tile is an Expand when
every tiled axis of its input has size 1.
"""

import numpy as np

from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import constant, int_list, static_dims

BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum",
                          "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                          "Or", "Xor", "Where", "Mod", "PRelu"})


def _broadcast(shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def _is_expand(graph, node):
    """True when ``node`` (Expand, or Tile of size-1 axes) only broadcasts its input."""
    if node.op_type == "Expand":
        return True
    dims = static_dims(graph, node.inputs[0])
    repeats = constant(graph, node.inputs[1]) if node.opset >= 6 and len(node.inputs) > 1 \
        else None
    if dims is None or repeats is None:
        return False
    return all(r == 1 or d == 1 for d, r in zip(dims, int_list(repeats)))


class ExpandToBroadcast(RewriteRule):
    """Expand (or a Tile that only broadcasts) before broadcasting ops is removed."""

    name = "expand_to_broadcast"
    op_types = {("", "Expand"), ("", "Tile")}

    def condition(self, graph, node, ctx):
        out = node.outputs[0]
        uses = graph.uses(out)
        if not uses or graph.is_graph_output(out) or not _is_expand(graph, node):
            return False
        src = static_dims(graph, node.inputs[0])
        if src is None:
            return False
        # A reader may read the expanded value at several inputs (Add(e, e), Sum(e, y, e)):
        # all of them become the unexpanded input at once, so check them together.
        readers = {}
        for reader, index in uses:
            readers.setdefault(id(reader), (reader, []))[1].append(index)
        for reader, indices in readers.values():
            if reader.domain != "" or reader.op_type not in BROADCASTING:
                return False
            if reader.op_type == "PRelu" and indices != [0]:
                return False  # the slope broadcasts to X only one way
            shapes = [static_dims(graph, name) for name in reader.inputs]
            if any(s is None for s in shapes):
                return False
            before = _broadcast(shapes)
            for index in indices:
                shapes[index] = src
            if before is None or _broadcast(shapes) != before:
                return False
        return True

    def apply(self, graph, node, ctx):
        graph.replace_uses(node.outputs[0], node.inputs[0])
        graph.remove_node(node)
        self.details[f"{node.op_type} into broadcasting"] += 1
        return True
