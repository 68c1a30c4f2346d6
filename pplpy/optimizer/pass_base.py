"""What a graph pass is.

A ``RewriteRule`` (after ONNX Runtime's) names the op types it targets, has a cheap
``condition`` and an ``apply`` that edits the graph and says whether it changed anything.
A ``GraphPass`` works on the whole graph at once (dead-code elimination) and returns the
number of changes.  Both run through the PassManager.

Rules never change a node's ``param`` in place: the engine made each node's op context
before the rewrites, from the param it had then.  A rule that needs other attributes removes
the node and adds a new one (``passes/queries.new_node``).  New nodes may be appended
anywhere: the pass manager sorts the graph after every pass that changed it.
"""

from collections import Counter


class PassContext:
    """What passes may use besides the graph: ``evaluate(node, inputs) -> outputs`` runs a
    node on constant inputs with an engine's kernels (None disables folding);
    ``is_deterministic(node)`` is False for random ops; ``fusion`` False marks a build that
    keeps layers apart (pplnn --disable-fusion); ``supports(domain, op_type, opset)`` says
    whether the engine runs an op a rewrite would create (None: only standard ONNX ops
    that the graph already uses are safe to create); ``conv_algorithm(param, x_dims,
    w_dims)`` names the algorithm the engine would run a Conv with (None: the engine does
    not say, and rewrites that depend on it stay off)."""

    def __init__(self, evaluate=None, is_deterministic=None, fusion=True, supports=None,
                 conv_algorithm=None):
        self.evaluate = evaluate
        self.is_deterministic = is_deterministic  # node -> False for random ops
        self.fusion = fusion
        self.supports = supports
        self.conv_algorithm = conv_algorithm

    def can_create(self, domain, op_type, opset):
        return self.supports is not None and bool(self.supports(domain, op_type, opset))


class Pass:
    """What every pass has: a name (its id in pipelines) and ``details``, its own account of
    what it changed ("merged Mul": 2), which the pass manager puts in the pass log."""

    name = "pass"

    def __init__(self):
        self.details = Counter()


class RewriteRule(Pass):
    name = "rule"
    op_types = None  # set of op types, or None for every node
    # True for a rule whose new nodes may read values produced later in the node list (it
    # adds them at the end): the graph is sorted again after a sweep that changed it.
    sorts_after = False

    def condition(self, graph, node, ctx):
        return True

    def apply(self, graph, node, ctx):
        """Edit the graph; return True if it changed."""
        return False

    def run(self, graph, ctx):
        changes = 0
        for node in graph.nodes:
            if node not in graph:  # removed by an earlier apply in this sweep
                continue
            if self.op_types is not None and (node.domain, node.op_type) not in self.op_types:
                continue
            if self.condition(graph, node, ctx) and self.apply(graph, node, ctx):
                changes += 1
        if changes and self.sorts_after:
            graph.topological_sort()
        return changes


class GraphPass(Pass):
    name = "graph_pass"

    def run(self, graph, ctx):
        """Edit the graph; return the number of changes."""
        return 0
