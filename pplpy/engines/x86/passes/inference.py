"""Type and shape inference over a whole graph, in topological order.

Types are inferred once, when the engine processes the graph.  Shapes are inferred at build
time from the declared (or user-given) input dims and again at run time whenever the fed
shapes change, so dynamic batch and sequence length work.
"""

from pplpy.engines.x86.ops.op_context import ValueRequired
from pplpy.errors import PplError, ShapeError, UnsupportedOpError


def infer_types(nodes, ops, known):
    """Fill ``known`` (tensor name -> DataType) for every node output; returns it."""
    for node in nodes:
        op = ops[id(node)]
        in_types = [known.get(name) if name else None for name in node.inputs]
        out_types = op.infer_type(in_types)
        for name, data_type in zip(node.outputs, out_types):
            if name:
                known[name] = data_type
    return known


def infer_shapes(nodes, ops, known, values, partial=False):
    """Fill ``known`` (tensor name -> dims tuple) for every node output; returns it.

    ``values`` maps tensor names to known numpy values (constants; at run time also the
    feeds).  With ``partial`` (build time, before feeds exist) a node whose shape depends on
    an unknown value, or on an unknown shape, gets unknown (None) output shapes instead of an
    error.  Any failure inside an op's rule becomes a ShapeError naming the node and its input
    shapes, so a bad model or feed never reaches a kernel.
    """
    for node in nodes:
        op = ops[id(node)]
        in_shapes = [known.get(name) if name else None for name in node.inputs]
        in_values = [values.get(name) if name else None for name in node.inputs]
        if partial and any(s is None for s, n in zip(in_shapes, node.inputs) if n):
            continue
        try:
            out_shapes = op.infer_shape(in_shapes, in_values)
        except ValueRequired as exc:
            if partial:
                continue
            raise UnsupportedOpError(str(exc), nodes=[(node.name, node.domain, node.op_type,
                                                       node.opset)]) from exc
        except PplError:
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
            raise op.shape_error(str(exc), in_shapes) from exc
        if len(out_shapes) < len([o for o in node.outputs if o]):
            raise ShapeError(f"{node.describe()}: shape inference gave {len(out_shapes)} "
                             f"shapes for {len(node.outputs)} outputs")
        for name, dims in zip(node.outputs, out_shapes):
            if name:
                dims = tuple(int(d) for d in dims)
                if any(d < 0 for d in dims):
                    raise op.shape_error(f"inferred a negative output dim {list(dims)}",
                                         in_shapes)
                known[name] = dims
    return known
