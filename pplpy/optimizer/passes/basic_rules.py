"""Clean-up rules every model benefits from before an engine sees it."""

from pplpy.ir.graph import bypass_node
from pplpy.optimizer.pass_base import RewriteRule


class ConstantToInitializer(RewriteRule):
    """A Constant node becomes a graph constant (its value lives in its param)."""

    name = "constant_to_initializer"
    op_types = {("", "Constant")}

    def apply(self, graph, node, ctx):
        if graph.is_graph_output(node.outputs[0]):
            return False  # a graph output must be produced by a node
        graph.remove_node(node)
        graph.add_constant(node.outputs[0], node.param.value.array)
        return True


class RemoveIdentity(RewriteRule):
    """Identity passes its input through: readers read the input instead."""

    name = "remove_identity"
    op_types = {("", "Identity")}

    def apply(self, graph, node, ctx):
        return bypass_node(graph, node)


class RemoveInferenceDropout(RewriteRule):
    """Dropout in inference is the identity.  Applies when training_mode is absent or a
    constant false and the mask output is unused (an engine op produces the mask otherwise)."""

    name = "remove_inference_dropout"
    op_types = {("", "Dropout")}

    def condition(self, graph, node, ctx):
        if len(node.inputs) > 2 and node.inputs[2]:
            training = graph.constants.get(node.inputs[2])
            if training is None or bool(training.reshape(-1)[0]):
                return False
        if len(node.outputs) > 1 and node.outputs[1]:
            mask = node.outputs[1]
            if graph.is_graph_output(mask) or graph.consumers(mask):
                return False
        return True

    def apply(self, graph, node, ctx):
        return bypass_node(graph, node)
