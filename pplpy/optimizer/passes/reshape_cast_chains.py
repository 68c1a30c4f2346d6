"""Chains that say one thing twice (Glow): Reshape of a Reshape, Cast of a Cast, and a Cast
to the type a value already has.

    Reshape(Reshape(x, s1), s2)   ==>  Reshape(x, s2)   (s2 constant without 0 entries, or
                                                         0 entries copying dims both share)
    Reshape(x, s) to x's own dims  ==>  x                (every dim known: the same int or
                                                         the same free dim's name)
    Reshape(Transpose(Reshape(x, (-1, m, n)), (0, 2, 1)), x's dims with the last two swapped)
                                   ==>  Transpose(x, last two axes swapped)  (x rank >= 3
                                        ending in (m, n): the dynamo exporter's K^T)
    Reshape(x, Concat(.., Unsqueeze(Gather(Shape(x), k)) at place k, ..))
                                   ==>  Reshape(x, (.., 0, ..))  0 copies x's dim k; once
                                        every piece is constant the shape is a constant
    Cast(Cast(x, T1), T2)         ==>  Cast(x, T2)      when T1 holds every value of x's type
    Cast(x, type of x)            ==>  x
"""

from onnx import TensorProto

from pplpy.common.data_type import DataType

from pplpy.ir.graph import Node, bypass_node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import (constant, int_list, only_reader, shape_constant,
                                            unsqueeze_axes)
from pplpy.params.onnx import TransposeParam

TRANSPOSE_OPSET = 13

# A -> the types that represent every value of A exactly (so A -> T1 -> T2 is A -> T2).
_F, _D, _H = DataType.FLOAT32, DataType.FLOAT64, DataType.FLOAT16
_I8, _I16, _I32, _I64 = DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64
_U8, _U16, _U32 = DataType.UINT8, DataType.UINT16, DataType.UINT32
EXACT_WIDENINGS = {
    DataType.BOOL: {_I8, _I16, _I32, _I64, _U8, _U16, _U32, DataType.UINT64, _H, _F, _D},
    _I8: {_I16, _I32, _I64, _H, _F, _D},
    _U8: {_I16, _I32, _I64, _U16, _U32, DataType.UINT64, _H, _F, _D},
    _I16: {_I32, _I64, _F, _D},
    _U16: {_I32, _I64, _U32, DataType.UINT64, _F, _D},
    _I32: {_I64, _D},
    _U32: {_I64, DataType.UINT64, _D},
    _H: {_F, _D},
    _F: {_D},
}


def cast_target(node):
    """The DataType a Cast node produces, or None when its ``to`` is no pplpy type."""
    to = node.param.to if node.param is not None else None
    try:
        if isinstance(to, str):  # Cast-1 names the type
            to = TensorProto.DataType.Value(to.upper())
        return DataType(to)
    except ValueError:
        return None


def _same_known_dims(graph, a, b):
    """``a`` and ``b`` have the same dims, each known (an int, or a free dim's name)."""
    da, db = graph.values[a].dims, graph.values[b].dims
    return (da is not None and db is not None and tuple(da) == tuple(db)
            and all(d is not None for d in da))


def _own_dim_index(graph, piece, x):
    """k when ``piece`` is dim k of ``x`` as one int64 value: Unsqueeze(Gather(Shape(x), k),
    [0]) or Gather(Shape(x), [k]), Shape without start / end; else None."""
    node = graph.producer(piece)
    if node is not None and node.key == ("", "Unsqueeze"):
        if unsqueeze_axes(graph, node) != [0]:
            return None
        node = graph.producer(node.inputs[0])
    if node is None or node.key != ("", "Gather") or (node.param is not None
                                                      and node.param.axis != 0):
        return None
    shape = graph.producer(node.inputs[0])
    index = constant(graph, node.inputs[1])
    if (shape is None or shape.key != ("", "Shape") or shape.inputs[0] != x or index is None
            or index.size != 1 or (shape.param is not None
                                   and (shape.param.start or shape.param.end is not None))):
        return None
    return int(index.reshape(-1)[0])


def _self_shape(graph, node):
    """The constant shape for Reshape ``node`` (allowzero 0) whose shape is a Concat of
    constants and of its own input's dims at their own places (as 0), else None."""
    x, shape = node.inputs[0], node.inputs[1]
    concat = graph.producer(shape)
    rank = graph.values[x].dims
    if (concat is None or concat.key != ("", "Concat") or rank is None
            or getattr(node.param, "allowzero", 0) or concat.param.axis not in (0, -1)):
        return None
    pieces, own = [], 0
    for place, piece in enumerate(concat.inputs):
        value = constant(graph, piece)
        if value is not None and value.size == 1 and value.ndim <= 1:
            pieces.append(int(value.reshape(-1)[0]))
            continue
        k = _own_dim_index(graph, piece, x)
        if (k is None or not -len(rank) <= k < len(rank) or k % len(rank) != place
                or place >= len(rank)):
            return None  # (an index past the rank is the Gather's error, at run time)
        pieces.append(0)
        own += 1
    return pieces if own else None


def _batched_transpose(graph, node):
    """(x, [the Transpose and inner Reshape]) when Reshape ``node`` ends
    Reshape(Transpose(Reshape(x, (-1, m, n)), (0, 2, 1)), ...) back to x's dims with the
    last two swapped, the inner values read only along the chain; else None."""
    t = graph.producer(node.inputs[0])
    if (t is None or t.key != ("", "Transpose") or t.param is None
            or tuple(t.param.perm or ()) != (0, 2, 1)
            or only_reader(graph, t.outputs[0]) is not node):
        return None
    inner = graph.producer(t.inputs[0])
    if (inner is None or inner.key != ("", "Reshape")
            or only_reader(graph, inner.outputs[0]) is not t):
        return None
    x = inner.inputs[0]
    xd, md, od = (graph.values[n].dims for n in (x, inner.outputs[0], node.outputs[0]))
    if xd is None or md is None or od is None or len(xd) < 3 or len(md) != 3:
        return None
    want = tuple(xd[:-2]) + (xd[-1], xd[-2])
    if any(d is None for d in xd) or tuple(md[1:]) != tuple(xd[-2:]) or tuple(od) != want:
        return None  # (the element count then makes md[0] the product of x's leading dims)
    return x, [t, inner]


class MergeReshapes(RewriteRule):
    """A Reshape of a Reshape that nothing else reads reshapes the original directly; a
    Reshape to the dims its input has goes (the TorchScript exporter writes one after every
    attention's P V product, its shape computed from three Shape nodes); a shape made of
    the input's own dims at their places becomes a constant with 0s there (the exporter's
    head split and merge read Shape of the value they reshape: those Shape readers kept the
    attention's head split from being matched)."""

    name = "merge_reshapes"
    op_types = {("", "Reshape")}

    def condition(self, graph, node, ctx):
        if _same_known_dims(graph, node.inputs[0], node.outputs[0]):
            return True
        if _self_shape(graph, node) is not None or _batched_transpose(graph, node):
            return True
        inner = graph.producer(node.inputs[0])
        if inner is None or inner.key != ("", "Reshape") or only_reader(
                graph, inner.outputs[0]) is not node:
            return False
        shape = constant(graph, node.inputs[1])
        if shape is None or getattr(node.param, "allowzero", 0):
            return False
        # A 0 copies the input's dim: the inner output's and the original's must agree there.
        zeros = [i for i, d in enumerate(int_list(shape)) if d == 0]
        if not zeros:
            return True
        mid = graph.values[inner.outputs[0]].dims
        src = graph.values[inner.inputs[0]].dims
        return (mid is not None and src is not None
                and all(i < len(src) and i < len(mid) and mid[i] == src[i]
                        and mid[i] is not None for i in zeros))

    def apply(self, graph, node, ctx):
        if _same_known_dims(graph, node.inputs[0], node.outputs[0]):
            if bypass_node(graph, node):
                self.details["removed no-op Reshape"] += 1
                return True
            return False
        batched = _batched_transpose(graph, node)
        if batched is not None:
            x, chain = batched
            rank = len(graph.values[x].dims)
            perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
            out = node.outputs[0]
            graph.remove_nodes([node, *chain])
            graph.add_node(Node(graph.unique_name(f"{node.name}/transpose"), "Transpose", "",
                                TRANSPOSE_OPSET, [x], [out], TransposeParam(perm=perm)))
            self.details["3-D transposes of 4-D values"] += 1
            return True
        own = _self_shape(graph, node)
        if own is not None:
            graph.set_input(node, 1, shape_constant(graph, own, node))
            self.details["Reshape shapes from the input's own dims"] += 1
            return True
        inner = graph.producer(node.inputs[0])
        if inner is None or inner.key != ("", "Reshape"):
            return False
        graph.set_input(node, 0, inner.inputs[0])
        graph.remove_node(inner)
        self.details["merged Reshapes"] += 1
        return True


class SimplifyCasts(RewriteRule):
    """Cast chains through an exact widening collapse; a Cast to the type a value has goes."""

    name = "simplify_casts"
    op_types = {("", "Cast")}

    def apply(self, graph, node, ctx):
        to = cast_target(node)
        source = graph.values[node.inputs[0]].dtype
        if to is not None and to is source:
            if bypass_node(graph, node):
                self.details["removed no-op Cast"] += 1
                return True
            return False
        inner = graph.producer(node.inputs[0])
        if inner is None or inner.key != ("", "Cast") or only_reader(
                graph, inner.outputs[0]) is not node:
            return False
        middle = cast_target(inner)
        origin = graph.values[inner.inputs[0]].dtype
        if origin is None or middle is None or middle not in EXACT_WIDENINGS.get(origin, ()):
            return False
        graph.set_input(node, 0, inner.inputs[0])
        graph.remove_node(inner)
        self.details["merged Casts"] += 1
        return True
