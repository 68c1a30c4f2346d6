"""Concat -> activation becomes activation -> Concat on each input (issue 7's "Concat
followed by activations"), so each activation can run in its producer's epilogue; likewise
an activation after a Reshape (Flatten, Squeeze, Unsqueeze) of such a producer's output.

    y = Relu(Concat(conv_a, conv_b))   ==>   y = Concat(Relu(conv_a), Relu(conv_b))
    y = Gelu(Reshape(conv, s))         ==>   y = Reshape(Gelu(conv), s)

An element-wise unary function commutes with a Concat: applying it to the parts gives the
parts of the result.  Alone that only splits one pass over memory into several; it pays
because the engine's post-op fusion (fuse_post_ops) then runs each part's activation in its
Conv / Gemm / MatMul / pool epilogue, and the in-place Concat has those producers write
straight into the concatenated buffer: no pass of its own is left.  So the rule fires only
when at least one part comes from such a producer and is read by the Concat alone.

A Reshape only renames positions, so the same holds for one part: SegFormer's Mix-FFN
reshapes its depthwise Conv's output to a sequence and then applies GELU, which ran as a
pass of its own (5% of the model); moved above the Reshape it joins the Conv's epilogue.
"""

from pplpy.common.data_type import DataType
from pplpy.ir.graph import Node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.fuse_eltwise_chains import EPILOGUE_PRODUCERS, UNARY_OPS
from pplpy.optimizer.passes.queries import only_reader


def _float32(graph, name):
    record = graph.values.get(name)
    return record is not None and record.dtype is DataType.FLOAT32


class HoistActivationAboveConcat(RewriteRule):
    """Concat -> unary activation becomes one activation per Concat input."""

    name = "hoist_activations_above_concat"
    op_types = {("", "Concat")}

    def condition(self, graph, node, ctx):
        act = only_reader(graph, node.outputs[0])
        if act is None or act.domain != "" or act.op_type not in UNARY_OPS:
            return False
        if act.inputs[0] != node.outputs[0] or len(act.outputs) != 1:
            return False
        if any(name and not graph.is_constant(name) for name in act.inputs[1:]):
            return False  # a Clip bound computed at run time
        parts = [name for name in node.inputs if name]
        if not all(_float32(graph, name) and not graph.is_constant(name) for name in parts):
            return False
        return any(self._fusable(graph, name) for name in parts)

    @staticmethod
    def _fusable(graph, name):
        """The part comes from an epilogue producer, through activations moved here before
        (a chain moves one activation per round), each read by the next alone."""
        while only_reader(graph, name) is not None:
            producer = graph.producer(name)
            if producer is None:
                return False
            if producer.key in EPILOGUE_PRODUCERS:
                return True
            if producer.domain != "" or producer.op_type not in UNARY_OPS:
                return False
            name = producer.inputs[0]
        return False

    def apply(self, graph, node, ctx):
        act = only_reader(graph, node.outputs[0])
        activated = {}  # a part the Concat reads twice gets one activation
        for index, name in enumerate(node.inputs):
            if not name:
                continue
            if name not in activated:
                out = graph.unique_name(f"{name}/{act.op_type}")
                clone = Node(graph.unique_name(f"{act.name}/{index}"), act.op_type, act.domain,
                             act.opset, (name,) + tuple(act.inputs[1:]), (out,), act.param)
                graph.add_node(clone)
                record, source = graph.value(out), graph.values[name]
                record.dtype, record.dims = source.dtype, source.dims
                activated[name] = out
            graph.set_input(node, index, activated[name])
        # The Concat now writes the activation's output: its readers are unchanged.
        y = act.outputs[0]
        graph.remove_node(act)
        graph.set_output(node, 0, y)
        self.details[f"{act.op_type} before Concat"] += 1
        return True


RESHAPES = {("", "Reshape"), ("", "Flatten"), ("", "Squeeze"), ("", "Unsqueeze")}


def _shape_readers(graph, name, node):
    """The Shape nodes reading ``name`` when every reader but ``node`` is one (they read
    dims only, which an element-wise op keeps), else None."""
    if graph.is_graph_output(name):
        return None
    others = [reader for reader, _ in graph.uses(name) if reader is not node]
    if any(reader.key != ("", "Shape") for reader in others):
        return None
    return others


class HoistActivationAboveReshape(RewriteRule):
    """Reshape (Flatten, Squeeze, Unsqueeze) -> unary activation becomes activation ->
    Reshape, when the Reshape's data comes from an epilogue producer and only the Reshape
    reads it (and Shape nodes: the TorchScript exporter's flatten(2) reads the dims of what
    it reshapes; they then read the activation's output)."""

    name = "hoist_activations_above_reshapes"
    op_types = RESHAPES

    def condition(self, graph, node, ctx):
        act = only_reader(graph, node.outputs[0])
        if (act is None or act.domain != "" or act.op_type not in UNARY_OPS
                or act.inputs[0] != node.outputs[0] or len(act.outputs) != 1
                or len(node.outputs) != 1):
            return False
        if any(name and not graph.is_constant(name) for name in act.inputs[1:]):
            return False
        x = node.inputs[0]
        if not _float32(graph, x) or graph.is_constant(x) or [
                reader for reader, _ in graph.uses(x)].count(node) != 1:
            return False
        shapes = _shape_readers(graph, x, node)
        if shapes is None:
            return False
        if not shapes:
            return HoistActivationAboveConcat._fusable(graph, x)
        producer = graph.producer(x)
        return producer is not None and producer.key in EPILOGUE_PRODUCERS

    def apply(self, graph, node, ctx):
        act = only_reader(graph, node.outputs[0])
        x, y = node.inputs[0], act.outputs[0]
        shapes = _shape_readers(graph, x, node)
        out = graph.unique_name(f"{x}/{act.op_type}")
        graph.remove_node(act)
        graph.add_node(Node(act.name, act.op_type, act.domain, act.opset,
                            (x,) + tuple(act.inputs[1:]), (out,), act.param))
        record, source = graph.value(out), graph.values[x]
        record.dtype, record.dims = source.dtype, source.dims
        graph.set_input(node, 0, out)
        graph.set_output(node, 0, y)
        for shape in shapes:
            graph.set_input(shape, 0, out)
        graph.topological_sort()
        self.details[f"{act.op_type} before {node.op_type}"] += 1
        return True
