"""Sum of two inputs is Add; Sum of one input is its input (Glow's canonicalisation of
variadic ops to their binary form).

    Sum(a, b)  ==>  Add(a, b)
    Sum(a)     ==>  a

Sum broadcasts as Add does (multidirectionally, from Sum-8 and Add-7) and takes a subset of
Add's element types, so the rewrite holds for any shapes.  Why: the engine's post-op fusion
knows Add, not Sum, so a residual Sum after a Conv (ShuffleNet's units) stays a pass over
memory of its own, and so does the Relu after it; as an Add both fold into the Conv's
epilogue.  Sums of three or more inputs are left alone: no model this was measured on has
one after a fusing producer.
"""

from pplpy.ir.graph import bypass_node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import new_node

# Sum-6 requires equal shapes and has no broadcasting; from Sum-8 on it broadcasts as Add.
FIRST_BROADCASTING_SUM = 8


class SumToAdd(RewriteRule):
    """Sum of one or two inputs becomes its input or an Add."""

    name = "sum_to_add"
    op_types = {("", "Sum")}

    def condition(self, graph, node, ctx):
        return node.opset >= FIRST_BROADCASTING_SUM and 1 <= len(node.inputs) <= 2 and all(
            node.inputs)

    def apply(self, graph, node, ctx):
        if len(node.inputs) == 1:
            if not bypass_node(graph, node):
                return False
            self.details["Sum(x) -> x"] += 1
            return True
        graph.remove_node(node)
        new_node(graph, "Add", list(node.inputs), list(node.outputs), node)
        self.details["Sum(a, b) -> Add"] += 1
        return True
