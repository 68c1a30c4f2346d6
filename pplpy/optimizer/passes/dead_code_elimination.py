"""Dead-code elimination: drop nodes none of whose outputs is read or returned, and
constants nothing reads."""

from pplpy.optimizer.pass_base import GraphPass


class DeadCodeElimination(GraphPass):
    name = "dead_code_elimination"

    def run(self, graph, ctx):
        changes = 0
        live = set(graph.output_names)
        kept = []
        for node in reversed(graph.nodes):
            if any(o in live for o in node.outputs if o):
                kept.append(node)
                live.update(i for i in node.inputs if i)
            else:
                changes += 1
        kept.reverse()
        graph.nodes = kept
        for name in [n for n in graph.constants if n not in live]:
            del graph.constants[name]
            changes += 1
        return changes
