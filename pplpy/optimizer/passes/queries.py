"""Small questions the graph passes ask of a graph, and the one way they make a node."""

import numpy as np

from pplpy.ir.graph import Node


def constant(graph, name):
    """The constant array named ``name`` (None when it is computed at run time or absent)."""
    return graph.constants.get(name) if name else None


def only_reader(graph, name):
    """The node reading ``name`` when it is the only use and ``name`` is no graph output."""
    uses = graph.uses(name)
    if len(uses) != 1 or graph.is_graph_output(name):
        return None
    return uses[0][0]


def static_dims(graph, name):
    """``name``'s dims as ints when all are known, else None."""
    record = graph.values.get(name)
    dims = record.dims if record is not None else None
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return tuple(dims)


def rank(graph, name):
    record = graph.values.get(name)
    return None if record is None or record.dims is None else len(record.dims)


def int_list(array):
    """A constant 1-D int array as a list of Python ints."""
    return [int(v) for v in np.asarray(array).reshape(-1)]


def new_node(graph, op_type, inputs, outputs, like, param=None):
    """Add a default-domain node named after ``like``, at the model's opset."""
    node = Node(graph.unique_name(f"{like.name}/{op_type}"), op_type, "",
                graph.opsets.get("", like.opset), inputs, outputs, param)
    return graph.add_node(node)


def new_value(graph, base):
    return graph.unique_name(base)


def shape_constant(graph, dims, like):
    """A new int64 constant holding ``dims`` (a Reshape's shape input)."""
    name = graph.unique_name(f"{like.name}/shape")
    graph.add_constant(name, np.asarray(dims, np.int64))
    return name


def unsqueeze_axes(graph, node):
    """An Unsqueeze node's axes as a list (the attribute, or the constant input from opset
    13), else None."""
    axes = node.param.axes if node.param is not None else None
    if axes is None and len(node.inputs) > 1:
        value = constant(graph, node.inputs[1])
        axes = None if value is None else int_list(value)
    return None if axes is None else list(axes)
