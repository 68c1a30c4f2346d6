"""Take the rows a Gather keeps before the row-wise ops that compute them, not after.

    Y = f(X)[:, i]   ==>   Y = f(X[:, i])       (f row-wise along that axis)

A classifier on a transformer reads one token of the last hidden state: ViT's class token
(``x[:, 0]`` after the final LayerNorm), BERT's pooler.  Every op between the last attention
and that Gather works row by row (LayerNorm, the MLP's two GEMMs and its activation, the
residual adds, the attention's output projection), and the attention itself computes each
query row on its own.  So the Gather moves up through them, one op at a time, and the last
encoder layer computes one row instead of all (ViT-B/16: 197): its MLP, its output
projection, its query projection and its attention for the kept queries only, while its keys
and values, which every kept query reads, stay whole.  ViT-B/16 does about 6% less
arithmetic.  Glow's graph optimiser sinks and hoists data movement through element-wise
nodes in the same way (reference/001); this moves a selection.

Each step is exact: a kept row of f(X) is f of that row of X, computed by the same kernel
over fewer rows.  A step is taken only when

- the Gather's indices are a constant (scalar or 1-D) along an axis that is not the last
  (the last axis is the features every row-wise op mixes);
- every output of the producer that anything reads is read by one Gather only, with the
  same axis and indices (so no other reader needs the rows that are dropped), and none is a
  graph output;
- the producer is one of the ops below and its other operands either lack the axis or
  broadcast along it (size 1); an operand that has the axis in full is gathered too.

    unary element-wise (Relu, Gelu, Erf, Tanh, ... )   the input
    Add, Sub, Mul, Div, Pow, Max, Min, Where            each operand with the axis
    MatMul with a 2-D B, pplpy::MatMulBias              A (the axis is one of its rows')
    LayerNormalization, RMSNormalization (axis before   X (LayerNorm's Mean/InvStdDev
      the normalised ones)                              unread)
    pplpy::AddLayerNormalization                        both addends
    Attention, 3-D, on the query axis                   Q and the mask's query axis; not
                                                        causal, no window, cache or length

A scalar index first becomes a kept axis of size 1 and a Squeeze, so the ops above see
their ranks unchanged.  Runs before pack_qkv: the last layer's queries then come from
their own projection of the kept row, its keys and values from theirs.
"""

import numpy as np

from pplpy.ir.graph import Node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.pattern_rule import dims_of
from pplpy.params.onnx import GatherParam

GATHER_OPSET = 13
SQUEEZE_OPSET = 13

UNARY = frozenset({
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Erf", "Tanh", "Sigmoid",
    "HardSigmoid", "HardSwish", "Swish", "Softplus", "Softsign", "Mish", "Abs", "Neg", "Exp",
    "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Identity", "Clip"})  # Clip's bounds: scalars
BROADCASTING = frozenset({("", op) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
                                               "Where")} | {("pplpy", "AddLayerNormalization")})
NORMS = frozenset({("", "LayerNormalization"), ("", "RMSNormalization")})


def _dims(graph, name):
    """``name``'s dims: a constant's shape (a rewrite may have made it after the last
    inference), else what inference recorded (None: unknown)."""
    const = graph.constants.get(name)
    return tuple(const.shape) if const is not None else dims_of(graph, name)


def _aligned(dims, out_rank, axis, out_len):
    """Where an operand of ``dims`` (broadcast against an output of rank ``out_rank``)
    meets output axis ``axis``: its own axis to gather, None to leave it as it is (it lacks
    the axis or broadcasts along it), or False when that cannot be told."""
    if dims is None:
        return False
    own = axis - (out_rank - len(dims))
    if own < 0 or dims[own] == 1:
        return None
    return own if dims[own] == out_len else False


def _gathered_operands(graph, node, axis):
    """{input index: the axis to gather it on} for ``node`` whose outputs are gathered on
    ``axis`` (their rank's), or None when the rows cannot move above it."""
    out = _dims(graph, node.outputs[0])
    if out is None or not 0 <= axis < len(out) - 1:
        return None
    r, n = len(out), out[axis]
    inputs = node.inputs
    kind = (node.domain, node.op_type)
    if node.domain == "" and node.op_type in UNARY:
        return {0: axis} if _dims(graph, inputs[0]) == out else None
    if kind in BROADCASTING:
        operands = range(len(inputs)) if node.op_type != "AddLayerNormalization" else (0, 1)
        plan = {}
        for i in operands:
            own = _aligned(_dims(graph, inputs[i]), r, axis, n)
            if own is False:
                return None
            if own is not None:
                plan[i] = own
        return plan if plan else None
    if kind in {("", "MatMul"), ("pplpy", "MatMulBias")}:
        a, b = _dims(graph, inputs[0]), _dims(graph, inputs[1])
        if a is None or b is None or len(b) != 2 or len(a) != r or a[axis] != n:
            return None
        return {0: axis}
    if kind in NORMS:
        first = node.param.axis % r
        if axis >= first or any(name and graph.uses(name) for name in node.outputs[1:]):
            return None
        return {0: axis} if _dims(graph, inputs[0]) == out else None
    if kind == ("", "Attention"):
        return _attention_operands(graph, node, out, axis)
    return None


def _attention_operands(graph, node, out, axis):
    """Attention in the 3-D form, rows gathered along the query axis: Q and the mask."""
    p = node.param
    inputs = list(node.inputs) + [""] * (4 - len(node.inputs))
    q, mask = inputs[0], inputs[3]
    if (len(out) != 3 or axis != 1 or p.is_causal or p.left_window_size != -1
            or p.right_window_size != -1 or any(inputs[4:])
            or any(name and graph.uses(name) for name in node.outputs[1:])):
        return None
    q_dims = _dims(graph, q)
    if q_dims is None or len(q_dims) != 3 or q_dims[1] != out[1]:
        return None
    plan = {0: 1}
    if mask:
        m = _dims(graph, mask)
        if m is None or len(m) < 2:  # a 1-D mask lies along the keys only
            return None if m is None else plan
        own = m[-2]  # the mask broadcasts to (batch, heads, queries, keys)
        if own != 1:
            if own != out[1]:
                return None
            plan[3] = len(m) - 2
    return plan


class GatherRowsEarly(RewriteRule):
    """Gather of constant rows moved above the row-wise node that produces its input."""

    name = "gather_rows_early"
    op_types = {("", "Gather")}
    sorts_after = True  # fixed point: the next round sweeps its new nodes in order

    def apply(self, graph, gather, ctx):
        if not (ctx.can_create("", "Gather", GATHER_OPSET)
                and ctx.can_create("", "Squeeze", SQUEEZE_OPSET)):
            return False
        selection = self._selection(graph, gather)
        if selection is None:
            return False
        axis, indices = selection
        producer = graph.producer(gather.inputs[0])
        if producer is None or _gathered_operands(graph, producer, axis) is None:
            return False
        if indices.ndim == 0:
            return self._keep_axis(graph, gather, axis, indices)
        readers = self._readers(graph, producer, axis, indices)
        if readers is None:
            return False
        return self._move_above(graph, producer, readers, axis, indices)

    @staticmethod
    def _selection(graph, gather):
        """(axis, indices made non-negative) of a Gather of constant int rows along a known
        axis that is not the data's last, or None."""
        data, idx = gather.inputs[0], gather.inputs[1]
        indices = graph.constants.get(idx)
        dims = dims_of(graph, data)
        if (indices is None or indices.ndim > 1 or indices.size == 0 or dims is None
                or not np.issubdtype(indices.dtype, np.integer) or graph.is_graph_output(data)):
            return None
        if len(dims) < 2:
            return None
        axis = gather.param.axis % len(dims)
        n = dims[axis]
        if axis == len(dims) - 1 or not isinstance(n, int):
            return None
        if (indices < -n).any() or (indices >= n).any():
            return None  # out of range: the Gather's own run-time error stays
        return axis, np.where(indices < 0, indices + n, indices).astype(np.int64)

    def _keep_axis(self, graph, gather, axis, index):
        """Gather(X, i) -> Squeeze(Gather(X, [i]), axis): the rank stays while rows move."""
        data, out = gather.inputs[0], gather.outputs[0]
        if len(set(graph.consumers(data))) != 1:
            return False
        producer = graph.producer(data)
        for name in producer.outputs:  # another output read by anything but a Gather: the
            users = graph.consumers(name) if name and name != data else []  # rows stay
            if graph.is_graph_output(name) or any(
                    u.domain != "" or u.op_type != "Gather" for u in users):
                return False
        kept = self._gather(graph, data, axis, index.reshape(1))
        axes = self._constant(graph, "axes", np.asarray([axis], np.int64))
        squeeze = Node(graph.unique_name(f"{self.name}/Squeeze"), "Squeeze", "",
                       SQUEEZE_OPSET, [kept, axes], [out])
        graph.remove_node(gather)
        graph.add_node(squeeze)
        self.details["scalar index kept as an axis"] += 1
        return True

    @staticmethod
    def _readers(graph, producer, axis, indices):
        """{output index: its one Gather} when every read output of ``producer`` is read by
        one Gather only, with these axis and indices; else None."""
        readers = {}
        for j, name in enumerate(producer.outputs):
            if name and graph.is_graph_output(name):
                return None  # all its rows are the model's output (read by no node, even)
            if not name or not graph.uses(name):
                continue
            users = graph.consumers(name)
            if len(users) != 1:
                return None
            g = users[0]
            if g.domain != "" or g.op_type != "Gather" or g.inputs[0] != name:
                return None
            sel = GatherRowsEarly._selection(graph, g)
            if sel is None or sel[0] != axis or not np.array_equal(sel[1], indices):
                return None
            readers[j] = g
        return readers or None

    def _move_above(self, graph, producer, readers, axis, indices):
        plan = _gathered_operands(graph, producer, axis)
        inputs = list(producer.inputs)
        for i, own in plan.items():
            inputs[i] = self._gather(graph, inputs[i], own, indices)
        outputs = []
        for j, name in enumerate(producer.outputs):
            if j in readers:  # the Gather's output, already of the gathered dims
                outputs.append(readers[j].outputs[0])
            elif name:  # written but unread: a fresh name of the gathered dims
                outputs.append(self._like(graph, name, axis, len(indices)))
            else:
                outputs.append("")
        moved = Node(graph.unique_name(f"{producer.name}/rows"), producer.op_type,
                     producer.domain, producer.opset, inputs, outputs, producer.param)
        graph.remove_nodes([producer, *readers.values()])
        graph.add_node(moved)
        self.details[f"rows gathered before {producer.op_type}"] += 1
        return True

    def _gather(self, graph, name, axis, indices):
        """``name``'s rows ``indices`` along ``axis``: a folded constant, or a new Gather
        whose output's dims and type are set for the steps after it."""
        const = graph.constants.get(name)
        if const is not None:
            return self._constant(graph, "rows", np.take(const, indices, axis=axis))
        idx = self._constant(graph, "indices", indices)
        out = self._like(graph, name, axis, len(indices))
        graph.add_node(Node(graph.unique_name(f"{self.name}/Gather"), "Gather", "",
                            GATHER_OPSET, [name, idx], [out], GatherParam(axis)))
        return out

    @staticmethod
    def _like(graph, name, axis, rows):
        """A new value of ``name``'s type and dims but ``rows`` along ``axis``."""
        src = graph.values[name]
        out = graph.unique_name(f"{name}_rows")
        record = graph.value(out)
        record.dtype = src.dtype
        record.dims = tuple(rows if a == axis else d for a, d in enumerate(src.dims))
        return out

    def _constant(self, graph, stem, array):
        name = graph.unique_name(f"{self.name}/{stem}")
        graph.add_constant(name, np.ascontiguousarray(array))
        return name
