"""Fusion into post-op chains: the element-wise nodes that follow a Conv, ConvTranspose,
Gemm, MatMul, pplpy::MatMulBias, a pool (MaxPool without Indices, AveragePool, Global
Average/MaxPool), a float32 reduction (Reduce*) or a Resize run inside that kernel's epilogue,
while the output tile is still in registers or L1 (oneDNN's post-ops, reference/000; oneDNN
Graph's Reduction / Resize + [Unary|Binary]*), instead of as passes over memory.

What joins a producer's chain, in order, up to MAX_POST_OPS entries, each time the
producer's output has that node as its single reader (not a graph output) in the same
format and float32:

- an activation (a row of ops/onnx/elementwise.py's table; Clip with constant bounds):
  an eltwise entry;
- Add, Mul, Max or Min of the output and another value, in either order, whose broadcast
  to the output is per tensor (one value), per channel (Conv, ConvTranspose, pools: axis 1;
  Gemm / MatMul: the last axis) or per element (the output's own shape, and its format:
  N16CX for a conv): a binary entry, or for Add per element the sum entry (ResNet's residual
  Add, so that Conv -> Add(other branch) -> Relu becomes Conv with post-ops [sum, relu]);
- PRelu of the output, its slope broadcast as above: a prelu entry;
- after a Gemm / MatMul / MatMulBias, Where(cond, output, other) or Where(cond, other,
  output), cond a bool value and other a float, each broadcast as above: a select entry
  (oneDNN Graph's MatMul + ... + Select).

Operands are other values of the graph (or constants), read by the kernel at run time: each
is appended to the producer's inputs (after its optional inputs, padded with ""), so the
order of nodes and the memory plan keep it alive and computed before the producer runs; the
nodes are then sorted again.  No cycle can appear: the operand is an input of the fused
node, which read the producer's output only through it.

Guarantees to the next pass: a fused producer's op context lists its chain in
``op.post_ops`` (post_ops.PostOpEntry, operands by input index) and writes the last fused
node's output value; the fused nodes are gone.  Runs after reorder insertion, so formats
already agree.  ``X86Engine(fusion=False)`` (``pplnn --disable-fusion``) skips it.
"""

import dataclasses
import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls.post_ops import (MAX_POST_OPS, BinaryAlg, Broadcast,
                                              PostOpEntry, PostOpKind, SelectAlg, eltwise)

# Producer -> (inputs before the operands, axis of channels in the output: 1 or -1).
# MatMul: every shape (batched, 1-D operands) runs on the gemm step, whose epilogue applies
# the chain to each batch entry.
# The same ops read back from a saved optimised model (ops/pplpy/standard_twins.py) are
# the pplpy-domain twins: every row is listed for both domains.
_PRODUCER_ROWS = {
    "Conv": (3, 1),
    "ConvTranspose": (3, 1),
    "MaxPool": (1, 1),
    "AveragePool": (1, 1),
    "GlobalAveragePool": (1, 1),
    "GlobalMaxPool": (1, 1),
    "Gemm": (3, -1),
    "MatMul": (2, -1),
}
FUSING_PRODUCERS = {(domain, op_type): row for op_type, row in _PRODUCER_ROWS.items()
                    for domain in ("", "pplpy")}
FUSING_PRODUCERS[("pplpy", "MatMulBias")] = (3, -1)
# Producers that write their output in runs (reductions, Resize: ppl_post_chain_range):
# op_type -> inputs before the operands (x and axes; x, roi, scales and sizes); channels on
# axis 1.  Their pplpy twins are the same ops read back from a saved optimised model.
REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
RUN_PRODUCERS = {**{op_type: 2 for op_type in REDUCE_OPS}, "Resize": 4}
FUSING_PRODUCERS.update({(domain, op_type): (fixed, 1)
                         for op_type, fixed in RUN_PRODUCERS.items() for domain in ("", "pplpy")})
# Producers after which a Where joins the chain as a select entry: the GEMMs.
SELECT_PRODUCERS = frozenset(key for key, (_, axis) in FUSING_PRODUCERS.items() if axis == -1)
BINARY_OPS = {("", "Add"): BinaryAlg.ADD, ("", "Mul"): BinaryAlg.MUL,
              ("", "Max"): BinaryAlg.MAX, ("", "Min"): BinaryAlg.MIN}


def activation_post_op(graph, node, op):
    """The eltwise entry of an activation node from its row of the activation table
    (``op.activation``, ops/onnx/elementwise.py), or None when it is not fusable."""
    row = getattr(op, "activation", None)
    if node.domain != "" or row is None:
        return None
    if row.input_params is None:  # parameters are attributes
        try:
            p0, p1 = row.params(node.param)
        except ValueError:
            return None
        return eltwise(row.code, p0, p1)
    # Clip-11: min and max are inputs; fusable when they are constants.
    bounds = []
    for index in (1, 2):
        name = node.inputs[index] if index < len(node.inputs) else ""
        if not name:
            bounds.append(None)
            continue
        value = graph.constants.get(name)
        if value is None or value.size != 1:
            return None  # bounds computed at run time: keep the node
        bounds.append(float(np.asarray(value).reshape(-1)[0]))
    lo, hi = bounds
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if math.isnan(lo) or math.isnan(hi):
        return None
    return eltwise(row.code, lo, hi)


def operand_broadcast(graph, producer, out, other, dtype=DataType.FLOAT32):
    """How value ``other`` (of type ``dtype``) broadcasts to the producer's output ``out``: a
    Broadcast, or None when it does not fit a post-op (another broadcast, unknown dims,
    another format or type)."""
    o_rec, v_rec = graph.values[out], graph.values[other]
    if v_rec.dtype is not dtype or o_rec.dims is None or v_rec.dims is None:
        return None
    out_dims, dims = tuple(o_rec.dims), tuple(v_rec.dims)
    if len(dims) > len(out_dims):
        return None
    plain = v_rec.format in (None, DataFormat.NDARRAY)
    if dims == out_dims and v_rec.format is o_rec.format or (
            plain and o_rec.format is DataFormat.NDARRAY and dims
            == out_dims[len(out_dims) - len(dims):] and all(
                isinstance(d, int) for d in out_dims[:len(out_dims) - len(dims)])
            and math.prod(out_dims[:len(out_dims) - len(dims)]) == 1):
        # The output's own shape (leading 1s aside, in NDARRAY): the same layout.
        return Broadcast.ELEMENT
    if not plain or not all(isinstance(d, int) for d in dims):
        return None
    if math.prod(dims) == 1:
        return Broadcast.SCALAR
    _, axis = FUSING_PRODUCERS[producer.key]
    axis %= len(out_dims)
    if producer.key == ("", "MatMul") and len(graph.values[producer.inputs[1]].dims or ()) < 2:
        return None  # B is a vector: the output's last axis is not the gemm's columns
    padded = (1,) * (len(out_dims) - len(dims)) + dims
    channels = out_dims[axis]
    if (isinstance(channels, int) and padded[axis] == channels
            and all(d == 1 for i, d in enumerate(padded) if i != axis)):
        return Broadcast.CHANNEL
    return None


def select_post_op(graph, producer, out, reader, index):
    """(select entry, {field: value name}) for a Where reading ``out`` as input ``index``
    (1 or 2), or None."""
    if producer.key not in SELECT_PRODUCERS or len(reader.inputs) != 3 or index == 0:
        return None
    cond, other = reader.inputs[0], reader.inputs[3 - index]
    if not cond or not other or out in (cond, other):
        return None
    if graph.values[reader.outputs[0]].dims != graph.values[out].dims:
        return None  # the condition or the other value would widen the output
    cond_broadcast = operand_broadcast(graph, producer, out, cond, DataType.BOOL)
    broadcast = operand_broadcast(graph, producer, out, other)
    if cond_broadcast is None or broadcast is None:
        return None
    alg = SelectAlg.KEEP_WHERE_TRUE if index == 1 else SelectAlg.KEEP_WHERE_FALSE
    return (PostOpEntry(PostOpKind.SELECT, int(alg), broadcast=broadcast,
                        condition_broadcast=cond_broadcast),
            {"operand": other, "condition": cond})


def reader_post_op(graph, producer, out, reader, index, op):
    """(entry, {entry field: operand value name}) for the single reader of ``out``, or
    None."""
    if index == 0:
        entry = activation_post_op(graph, reader, op)
        if entry is not None:
            if (graph.values[out].format is DataFormat.N16CX
                    and not op.activation.keeps_padding):
                return None  # f(0) is not finite: the epilogue would poison the padding lanes
            return entry, {}
    if reader.key == ("", "Where"):
        return select_post_op(graph, producer, out, reader, index)
    if reader.key in BINARY_OPS and len(reader.inputs) == 2:
        other = reader.inputs[1 - index]
        kind, alg = PostOpKind.BINARY, BINARY_OPS[reader.key]
    elif reader.key == ("", "PRelu") and index == 0 and len(reader.inputs) == 2:
        other, kind, alg = reader.inputs[1], PostOpKind.PRELU, 0
    else:
        return None
    if not other or other == out:
        return None
    if graph.values[reader.outputs[0]].dims != graph.values[out].dims:
        return None  # the operand would widen the output
    broadcast = operand_broadcast(graph, producer, out, other)
    if broadcast is None:
        return None
    if kind is PostOpKind.BINARY and alg is BinaryAlg.ADD and broadcast is Broadcast.ELEMENT:
        return PostOpEntry(PostOpKind.SUM, 0, 1.0), {"operand": other}  # the residual Add
    return PostOpEntry(kind, int(alg), broadcast=broadcast), {"operand": other}


def _append_operand(graph, node, op, name):
    """Add value ``name`` as the last input of ``node``, after its optional inputs (the
    table's count, or ``op.own_inputs`` where the op's version says: a Reduce* whose axes are
    an attribute has one); returns its index."""
    fixed = getattr(op, "own_inputs", None) or FUSING_PRODUCERS[node.key][0]
    while len(node.inputs) < fixed:
        graph.append_input(node, "")
    graph.append_input(node, name)
    return len(node.inputs) - 1


def fuse_post_ops(graph, ops):
    """Fold element-wise readers into the chains of FUSING_PRODUCERS; returns the number fused."""
    fused = 0
    operands_added = False
    for node in graph.nodes:
        if node not in graph or node.key not in FUSING_PRODUCERS or len(node.outputs) != 1:
            continue
        while True:
            out = node.outputs[0]
            readers = graph.uses(out)
            if len(readers) != 1 or graph.is_graph_output(out):
                break
            reader, index = readers[0]
            op = ops[node]
            post_ops = list(getattr(op, "post_ops", ()))
            if len(post_ops) >= MAX_POST_OPS or len(reader.outputs) != 1:
                break
            if graph.values[reader.outputs[0]].format is not graph.values[out].format:
                break
            if graph.values[out].dtype is not DataType.FLOAT32:
                break  # an integer MatMul: the epilogue's post-ops are float32
            found = reader_post_op(graph, node, out, reader, index, ops.get(reader))
            if found is None:
                break
            entry, operands = found
            result = reader.outputs[0]
            # Output first: removing the reader first would forget the record (type, dims,
            # format) of a result nothing reads (a pipeline without dead-code elimination).
            graph.set_output(node, 0, result)
            graph.remove_node(reader)
            if operands:
                entry = dataclasses.replace(entry, **{
                    field: _append_operand(graph, node, op, name)
                    for field, name in operands.items()})
                operands_added = True
            op.post_ops = post_ops + [entry]
            del ops[reader]
            fused += 1
    if operands_added:  # an operand's producer may come after the node it now feeds
        graph.topological_sort()
    return fused
