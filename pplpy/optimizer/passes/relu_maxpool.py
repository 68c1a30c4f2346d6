"""Relu -> MaxPool becomes MaxPool -> Relu (Glow's pool optimisation): max commutes with a
monotone function, and the Relu then runs on the pooled, smaller tensor.

Not when the Relu's input comes from a Conv, Gemm or MatMul: there the Relu costs nothing,
because the engine runs it as the producer's post-op, and moving it below the pool would
make it a pass over memory of its own.
"""

from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import only_reader

POST_OP_PRODUCERS = frozenset({("", "Conv"), ("", "Gemm"), ("", "MatMul")})


class SwapReluMaxPool(RewriteRule):
    """Relu -> MaxPool becomes MaxPool -> Relu, unless the Relu is a producer's post-op."""

    name = "swap_relu_maxpool"
    op_types = {("", "Relu")}

    def condition(self, graph, node, ctx):
        pool = only_reader(graph, node.outputs[0])
        if pool is None or pool.key != ("", "MaxPool") or len(pool.outputs) != 1:
            return False  # MaxPool's Indices output would change meaning
        producer = graph.producer(node.inputs[0])
        if producer is not None and producer.key in POST_OP_PRODUCERS:
            return False
        return True

    def apply(self, graph, node, ctx):
        pool = only_reader(graph, node.outputs[0])
        x, relu_out, pooled = node.inputs[0], node.outputs[0], pool.outputs[0]
        # x -> MaxPool -> relu_out -> Relu -> pooled: the names move with the computation.
        graph.set_input(pool, 0, x)
        graph.set_output(pool, 0, relu_out)
        graph.set_input(node, 0, relu_out)
        graph.set_output(node, 0, pooled)
        graph.values[relu_out].dims = None  # now the pooled shape: refreshed by inference
        self.details["MaxPool before Relu"] += 1
        return True
