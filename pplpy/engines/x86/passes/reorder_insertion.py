"""Reorder insertion: make every edge arrive in the format its consumer asked for.

Walks the nodes in topological order, asks each op context for the formats it wants
(``select_format``), and where a producer's format differs inserts a ``pplpy::Reorder``
node.  ``(edge, format) -> reordered edge`` is memoised, so a tensor read by several
consumers in the same format is reordered once.  Graph outputs are always NDARRAY.
"""

from pplpy.common.data_format import DataFormat
from pplpy.ir import Node
from pplpy.params.x86 import ReorderParam

REORDER_DOMAIN = "pplpy"


def reorder_node(graph, name, src_edge, dst_edge, src_format, dst_format):
    """A pplpy::Reorder node converting ``src_edge`` into ``dst_edge``."""
    return Node(
        name=graph.unique_name(name),
        op_type="Reorder",
        domain=REORDER_DOMAIN,
        opset=1,
        inputs=[src_edge],
        outputs=[dst_edge],
        param=ReorderParam(src=src_format, dst=dst_format),
    )


def select_formats_and_insert_reorders(graph, ops, shapes, make_op):
    """Returns ``edge_formats`` (tensor -> DataFormat) after editing ``graph`` in place.

    ``make_op(node)`` builds the op context of an inserted Reorder node (added to ``ops``).
    """
    formats = {name: DataFormat.NDARRAY for name in graph.constants}
    formats.update({v.name: DataFormat.NDARRAY for v in graph.inputs})
    reordered = {}  # (edge, format) -> edge in that format
    new_nodes = []

    def reorder(edge, fmt, consumer_name):
        key = (edge, fmt)
        if key not in reordered:
            out = graph.unique_name(f"{edge}_{fmt}")
            node = reorder_node(graph, f"ReorderInput_{edge}_of_{consumer_name}", edge, out,
                                formats[edge], fmt)
            ops[id(node)] = make_op(node)
            new_nodes.append(node)
            formats[out] = fmt
            shapes[out] = shapes.get(edge)
            reordered[key] = out
        return reordered[key]

    for node in list(graph.nodes):
        op = ops[id(node)]
        in_formats = [formats[name] if name else DataFormat.NDARRAY for name in node.inputs]
        in_shapes = [shapes.get(name) if name else None for name in node.inputs]
        wanted, out_formats = op.select_format(in_formats, in_shapes)
        for i, (name, have, want) in enumerate(zip(node.inputs, in_formats, wanted)):
            if name and have is not want:
                node.inputs[i] = reorder(name, want, node.name)
        new_nodes.append(node)
        for name, fmt in zip(node.outputs, out_formats):
            if name:
                formats[name] = fmt

    # Graph outputs must be NDARRAY: rename the producer's output and let a Reorder write the
    # name the caller knows.
    producers = {out: node for node in new_nodes for out in node.outputs}
    for info in graph.outputs:
        name = info.name
        if formats.get(name, DataFormat.NDARRAY) is DataFormat.NDARRAY:
            continue
        inner = graph.unique_name(f"{name}_{formats[name]}")
        producer = producers[name]
        producer.outputs = [inner if o == name else o for o in producer.outputs]
        for n in new_nodes:
            n.inputs = [inner if i == name else i for i in n.inputs]
        formats[inner] = formats[name]
        shapes[inner] = shapes.get(name)
        node = reorder_node(graph, f"ReorderOutput_{name}", inner, name, formats[inner],
                            DataFormat.NDARRAY)
        ops[id(node)] = make_op(node)
        new_nodes.append(node)
        formats[name] = DataFormat.NDARRAY

    graph.nodes = new_nodes
    graph.topological_sort()
    return formats
