"""Format selection and reorder insertion: every value gets a data format, and every edge
arrives in the format its consumer asked for.

Guarantees to the next pass: each value record has ``format`` set; each node's inputs are in
the formats its op context's ``select_format`` asked for; graph outputs are NDARRAY; the node
order is topological.

Walks the nodes in topological order, asks each op context for the formats it wants and
where a producer's format differs inserts a ``pplpy::Reorder`` node.  ``(value, format) ->
reordered value`` is memoised, so a value read by several consumers in the same format is
reordered once.  Names stay readable: ``ReorderInput_<value>_of_<node>``.  Formats are chosen
once, from ranks and constant shapes, and hold for every input shape a run may feed.

The N16CX padding rule: an op context defined outside pplpy (a plugin) gets NDARRAY for its
inputs and outputs, whatever its ``select_format`` says, unless a class of the plugin sets
``keeps_padding_finite = True`` (an element-wise ``1/x`` would turn N16CX's zero padding
lanes into inf and the next Conv's sums into NaN).
"""

from pplpy.common.data_format import DataFormat
from pplpy.errors import ShapeError
from pplpy.ir import Node
from pplpy.params.x86 import ReorderParam

REORDER_DOMAIN = "pplpy"


def reorder_node(graph, name, src, dst, src_format, dst_format):
    """A pplpy::Reorder node converting value ``src`` into ``dst``."""
    return Node(graph.unique_name(name), "Reorder", REORDER_DOMAIN, 1, [src], [dst],
                ReorderParam(src=src_format, dst=dst_format))


def may_use_blocked_format(cls):
    """Whether op contexts of ``cls`` may run in N16CX: pplpy's own always may; a plugin's
    only if one of its own classes (not pplpy's base classes) declares
    ``keeps_padding_finite = True``."""
    if cls.__module__.split(".")[0] == "pplpy":
        return True
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "pplpy":
            continue
        if "keeps_padding_finite" in vars(klass):
            return bool(vars(klass)["keeps_padding_finite"])
    return False


def readers_take_blocked(graph, ops, node):
    """Whether every reader of ``node``'s outputs can run N16CX (its op lists the format and
    may use it) and none is a graph output: a hint for an op whose inputs arrive in both
    formats, where either choice costs one reorder and the readers decide which is cheaper
    (a residual Add of a Conv's output into a stream the exporter made NDARRAY)."""
    readers = [reader for name in node.outputs if name for reader in graph.consumers(name)]
    if not readers or any(graph.is_graph_output(name) for name in node.outputs if name):
        return False
    return all(DataFormat.N16CX in getattr(ops[r], "formats", ())
               and may_use_blocked_format(type(ops[r])) for r in readers if r in ops)


def select_formats_and_insert_reorders(graph, ops, shapes, make_op):
    """Set every value's format and insert Reorder nodes, editing ``graph`` in place.

    ``shapes`` maps value names to build-time dims (absent where unknown); ``make_op(node)``
    builds the op context of an inserted Reorder (added to ``ops``).  Returns the number of
    reorders inserted.
    """
    for name in graph.constants:
        graph.values[name].format = DataFormat.NDARRAY
    for info in graph.inputs:
        graph.value(info.name).format = DataFormat.NDARRAY
    reordered = {}  # (value, format) -> value in that format
    inserted = 0

    def reorder(src, fmt, consumer):
        nonlocal inserted
        key = (src, fmt)
        if key not in reordered:
            dst = graph.unique_name(f"{src}_{fmt}")
            node = reorder_node(graph, f"ReorderInput_{src}_of_{consumer.name}", src, dst,
                                graph.values[src].format, fmt)
            graph.add_node(node)
            ops[node] = make_op(node)
            graph.values[dst].format = fmt
            graph.values[dst].dtype = graph.values[src].dtype
            graph.values[dst].dims = graph.values[src].dims
            if src in shapes:
                shapes[dst] = shapes[src]
            reordered[key] = dst
            inserted += 1
        return reordered[key]

    for node in graph.nodes:
        op = ops[node]
        op.readers_take_blocked = readers_take_blocked(graph, ops, node)
        in_formats = [graph.values[name].format if name else DataFormat.NDARRAY
                      for name in node.inputs]
        in_shapes = [shapes.get(name) if name else None for name in node.inputs]
        try:
            wanted, out_formats = op.select_format(in_formats, in_shapes)
        except ShapeError:
            # Only a probe value of a free input dim gets here (static shapes that do not
            # fit failed inference already): x[batch, ...] + c[3, ...] is a model for batch
            # 3 only.  NDARRAY fits whatever shape a run feeds; the run checks the shapes.
            wanted = [DataFormat.NDARRAY] * len(node.inputs)
            out_formats = [DataFormat.NDARRAY] * len(node.outputs)
        if not may_use_blocked_format(type(op)):
            wanted = [DataFormat.NDARRAY for _ in wanted]
            out_formats = [DataFormat.NDARRAY for _ in out_formats]
        for i, (name, have, want) in enumerate(zip(node.inputs, in_formats, wanted)):
            if name and have is not want:
                graph.set_input(node, i, reorder(name, want, node))
        for name, fmt in zip(node.outputs, out_formats):
            if name:
                graph.values[name].format = fmt

    # Graph outputs are NDARRAY: the producer writes an inner value and a Reorder writes the
    # name the caller knows.
    for info in graph.outputs:
        name = info.name
        record = graph.values[name]
        if record.format in (None, DataFormat.NDARRAY):
            record.format = DataFormat.NDARRAY
            continue
        inner = graph.unique_name(f"{name}_{record.format}")
        producer = record.producer
        graph.set_output(producer, list(producer.outputs).index(name), inner)
        graph.replace_uses(name, inner)
        inner_record = graph.values[inner]
        inner_record.format, inner_record.dtype, inner_record.dims = (
            record.format, record.dtype, record.dims)
        if name in shapes:
            shapes[inner] = shapes[name]
        node = reorder_node(graph, f"ReorderOutput_{name}", inner, name, record.format,
                            DataFormat.NDARRAY)
        graph.add_node(node)
        ops[node] = make_op(node)
        record.format = DataFormat.NDARRAY
        inserted += 1
    if inserted:
        graph.topological_sort()
    return inserted
