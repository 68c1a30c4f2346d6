"""Chains that say one thing twice (Glow): Reshape of a Reshape, Cast of a Cast, and a Cast
to the type a value already has.

    Reshape(Reshape(x, s1), s2)   ==>  Reshape(x, s2)   (s2 constant without 0 entries, or
                                                         0 entries copying dims both share)
    Reshape(x, s) to x's own dims  ==>  x                (every dim known: the same int or
                                                         the same free dim's name)
    Cast(Cast(x, T1), T2)         ==>  Cast(x, T2)      when T1 holds every value of x's type
    Cast(x, type of x)            ==>  x
"""

from onnx import TensorProto

from pplpy.common.data_type import DataType
from pplpy.ir.graph import bypass_node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import constant, int_list, only_reader

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


class MergeReshapes(RewriteRule):
    """A Reshape of a Reshape that nothing else reads reshapes the original directly; a
    Reshape to the dims its input has goes (the TorchScript exporter writes one after every
    attention's P V product, its shape computed from three Shape nodes)."""

    name = "merge_reshapes"
    op_types = {("", "Reshape")}

    def condition(self, graph, node, ctx):
        if _same_known_dims(graph, node.inputs[0], node.outputs[0]):
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
