"""Dead-code elimination: drop nodes none of whose outputs is read or returned, and
constants nothing reads.

A worklist over the value records: a node is dead when no output has a consumer and none
is a graph output; removing it may make its producers dead in turn.  O(n) in all.
"""

from pplpy.optimizer.pass_base import GraphPass


class DeadCodeElimination(GraphPass):
    """Nodes whose outputs nobody reads, and unread constants, are removed."""

    name = "dead_code_elimination"

    def run(self, graph, ctx):
        outputs = set(graph.output_names)

        def dead(node):
            return not any(name and (name in outputs or graph.consumers(name))
                           for name in node.outputs)

        changes = 0
        work = [node for node in graph.nodes if dead(node)]
        while work:
            node = work.pop()
            if node not in graph or not dead(node):
                continue
            producers = {graph.producer(name) for name in node.inputs if name}
            graph.remove_node(node)
            changes += 1
            work.extend(p for p in producers if p is not None and p in graph and dead(p))
        for name in [n for n in graph.constants if not graph.consumers(n) and n not in outputs]:
            del graph.constants[name]
            changes += 1
        return changes
