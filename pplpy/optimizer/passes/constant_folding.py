"""Constant folding: a node whose inputs are all constants is computed once, at build time,
by an engine's own kernels, and its outputs become constants.

The light model-zoo networks build their weights with ConstantOfShape from constant shapes;
folding turns them into plain weights that Conv can pack.
"""

from pplpy.errors import InputError
from pplpy.optimizer.pass_base import GraphPass


class ConstantFolding(GraphPass):
    """A node whose inputs are all constants is computed now; its outputs become constants."""

    name = "constant_folding"

    def run(self, graph, ctx):
        if ctx.evaluate is None:
            return 0
        changes = 0
        graph_outputs = set(graph.output_names)
        for node in list(graph.nodes):
            present = [name for name in node.inputs if name]
            if not all(name in graph.constants for name in present):
                continue
            if any(o in graph_outputs for o in node.outputs):
                continue  # keep the node: a graph output must be produced by a node
            if ctx.is_deterministic is not None and not ctx.is_deterministic(node):
                continue  # a random op: folding would freeze one draw
            values = [graph.constants[name] if name else None for name in node.inputs]
            try:
                outputs = ctx.evaluate(node, values)
            except InputError:
                # Its constants meet bad data (a Loop's Gather past its table): the node stays,
                # and each run reports it, as ONNX Runtime loads such a model and fails it then.
                self.details[f"left {node.op_type} (bad data at run time)"] += 1
                continue
            if outputs is None:
                continue
            for name, value in zip(node.outputs, outputs):
                if name:
                    graph.add_constant(name, value)
            graph.remove_nodes([node])
            self.details[f"folded {node.op_type}"] += 1
            changes += 1
        return changes
