"""Common sub-expression elimination: two nodes of the same op, attributes and inputs
compute the same values, so the later one's readers read the earlier one's outputs.

Nodes are visited in run order, so after a merge the readers of the merged node are
compared with their renamed inputs and chains merge in one sweep.  Random ops are never
merged (two draws differ); nodes whose attributes cannot be compared (unhashable params)
are left alone.
"""

from pplpy.optimizer.pass_base import GraphPass


def _key(node):
    try:
        key = (node.domain, node.op_type, node.opset, node.param, node.inputs,
               len(node.outputs))
        hash(key)
    except TypeError:
        return None
    return key


class CommonSubexpressionElimination(GraphPass):
    """Nodes equal by op, attributes and inputs are computed once."""

    name = "cse"

    def run(self, graph, ctx):
        seen = {}
        changes = 0
        for node in list(graph.nodes):
            if not node.inputs or (ctx.is_deterministic is not None
                                   and not ctx.is_deterministic(node)):
                continue
            key = _key(node)
            if key is None:
                continue
            first = seen.get(key)
            if first is None:
                seen[key] = node
                continue
            if any(name and (graph.is_graph_output(name) or not theirs)
                   for name, theirs in zip(node.outputs, first.outputs)):
                continue  # a graph output keeps its producer; an output first omits stays
            for mine, theirs in zip(node.outputs, first.outputs):
                if mine:
                    graph.replace_uses(mine, theirs)
            graph.remove_node(node)
            self.details[f"merged {node.op_type}"] += 1
            changes += 1
        return changes
