"""Runs of element-wise nodes as one pplpy::EltwiseChain: oneDNN Graph's "Unary/Binary
chains of any length" (reference/004).

    t1 = Sub(x, mean)  t2 = Div(t1, std)  t3 = Mul(t2, gamma)  y = Add(t3, beta)
                                        ==>  y = EltwiseChain(x, mean, std, gamma, beta)

Exported transformers and CNNs spell activations and normalisation tails as runs of
element-wise nodes, each reading and writing the whole tensor; the chain reads x once and
writes y once.  A run is a maximal sequence of float32 nodes, each the only reader of the
previous one's output (which is no graph output), each an activation of the engine's table
(with constant Clip bounds) or Add / Sub / Mul / Div / Max / Min / Pow / PRelu whose other
operand is a value from outside the run (a constant, the run's input x, or anything computed
elsewhere: with single-reader links nothing outside the run can depend on its inside) that
broadcasts into x without growing it, along one contiguous run of axes.

Runs of 2 or more nodes are fused.  The single-reader run of activations and Add / Mul / Max
/ Min / PRelu right after a Conv/Gemm/MatMul/MatMulBias, a pool, a Reduce* or a Resize is
left alone: the engine's post-op fusion (fuse_post_ops, later) takes it into that producer's
epilogue, which saves the whole pass over memory; a chain may start after it.
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.ir.graph import Node
from pplpy.optimizer.pass_base import GraphPass
from pplpy.oputils.onnx.operand_run import operand_run
from pplpy.params.onnx import ClipParam
from pplpy.params.x86 import ChainEntry, EltwiseChainParam

# The activations a chain applies (the engine's activation table, ops/onnx/elementwise.py;
# a test checks the two agree).
UNARY_OPS = frozenset((
    "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSwish", "Abs", "Neg", "Sign", "Exp",
    "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Erf", "Sin", "Cos", "Tan", "Asin",
    "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "HardSigmoid", "Softplus",
    "Softsign", "Elu", "Selu", "Celu", "Gelu", "Mish", "ThresholdedRelu", "Shrink", "Swish",
))
BINARY_OPS = frozenset(("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"))
# Producers whose following element-wise ops the engine fuses into their epilogue
# (fuse_post_ops); the pplpy Conv/Gemm/MatMul are the same ops read from a saved model.
# Those whose channels (per-channel operands) are axis 1; the rest's are the last axis.
CHANNELS_FIRST = frozenset(("Conv", "ConvTranspose", "MaxPool", "AveragePool",
                            "GlobalAveragePool", "GlobalMaxPool", "Resize", "ReduceSum",
                            "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                            "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"))
EPILOGUE_PRODUCERS = frozenset(
    [(domain, op_type) for op_type in CHANNELS_FIRST for domain in ("", "pplpy")]
    + [("", "Gemm"), ("", "MatMul"), ("pplpy", "MatMulBias"), ("pplpy", "Gemm"),
       ("pplpy", "MatMul")])
# What fuse_post_ops can put in an epilogue after them, and how many entries.
EPILOGUE_OPS = UNARY_OPS | {"Add", "Mul", "Max", "Min", "PRelu"}
MAX_EPILOGUE = 32
CHAIN_DOMAIN, CHAIN_OP, CHAIN_OPSET = "pplpy", "EltwiseChain", 1
MIN_LENGTH = 2
SELF = -1  # ChainEntry.operand: the running value itself


def _float32(graph, name):
    record = graph.values.get(name)
    return record is not None and record.dtype is DataType.FLOAT32


def _full_dims(graph, name):
    """``name``'s dims when every one is known (int or symbolic name), else None."""
    record = graph.values.get(name)
    if record is None or record.dims is None or any(d is None for d in record.dims):
        return None
    return tuple(record.dims)


def _clip_param(graph, node):
    """Clip's bounds as ClipParam(min, max) of floats, or None when a bound is computed at
    run time."""
    if node.param is not None and (node.param.min is not None or node.param.max is not None):
        lo, hi = node.param.min, node.param.max
    else:
        lo = hi = None
        for index in (1, 2):
            name = node.inputs[index] if index < len(node.inputs) else ""
            if not name:
                continue
            value = graph.constants.get(name)
            if value is None or value.size != 1:
                return None
            bound = float(np.asarray(value).reshape(-1)[0])
            lo, hi = (bound, hi) if index == 1 else (lo, bound)
    return ClipParam(min=-math.inf if lo is None else float(lo),
                     max=math.inf if hi is None else float(hi))


def _epilogue_operand(graph, producer, value, reader):
    """Whether fuse_post_ops can take ``reader`` of ``value``: an activation, or a binary op
    whose other operand is a scalar, a per-channel vector (axis 1 of a conv's or pool's
    output, the last axis of a GEMM's) or a tensor of the output's shape (the
    engine's fuse_post_ops.operand_broadcast, without formats, which are not chosen yet)."""
    if reader.op_type in UNARY_OPS:
        return reader.inputs[0] == value
    if len(reader.inputs) != 2 or reader.inputs.count(value) != 1:
        return False
    if reader.op_type == "PRelu" and reader.inputs[0] != value:
        return False
    other = reader.inputs[1 - reader.inputs.index(value)]
    out, dims = _full_dims(graph, value), _full_dims(graph, other)
    if out is None or dims is None or len(dims) > len(out):
        return False
    if dims == out:
        return True
    if not all(isinstance(d, int) for d in dims):
        return False
    if math.prod(dims) == 1:
        return True
    axis = 1 if producer.op_type in CHANNELS_FIRST else len(out) - 1
    padded = (1,) * (len(out) - len(dims)) + tuple(dims)
    return padded[axis] == out[axis] and all(d == 1 for i, d in enumerate(padded)
                                             if i != axis)


class FuseEltwiseChains(GraphPass):
    """Runs of two or more element-wise nodes (activations, binary ops by outside operands)
    become one pplpy::EltwiseChain: one pass over memory instead of one per node."""

    name = "fuse_eltwise_chains"

    def run(self, graph, ctx):
        if not ctx.fusion or not ctx.can_create(CHAIN_DOMAIN, CHAIN_OP, CHAIN_OPSET):
            return 0
        fused = 0
        taken = self._epilogue_runs(graph)
        for node in list(graph.nodes):
            if node in taken:
                continue
            run = self._run_from(graph, node, taken)
            if run is None:
                continue
            nodes, x, entries, operands = run
            taken.update(nodes)
            if len(nodes) < MIN_LENGTH:
                continue
            self._replace(graph, nodes, entries, operands)
            fused += 1
            key = f"{len(nodes)} nodes -> EltwiseChain"
            self.details[key] = self.details.get(key, 0) + 1
        if fused:
            graph.topological_sort()
        return fused

    @staticmethod
    def _epilogue_runs(graph):
        """The nodes the engine's post-op fusion will take into a producer's epilogue: from
        each EPILOGUE_PRODUCERS node, the single-reader run of activations and Add / Mul
        / Max / Min / PRelu after it (up to the epilogue's 32 entries)."""
        reserved = set()
        for producer in graph.nodes:
            if producer.key not in EPILOGUE_PRODUCERS or len(producer.outputs) != 1:
                continue
            value = producer.outputs[0]
            for _ in range(MAX_EPILOGUE):
                readers = set(graph.consumers(value))
                if len(readers) != 1 or graph.is_graph_output(value):
                    break
                (reader,) = readers
                if (reader.domain != "" or reader.op_type not in EPILOGUE_OPS
                        or not _epilogue_operand(graph, producer, value, reader)):
                    break
                reserved.add(reader)
                value = reader.outputs[0]
        return reserved

    def _run_from(self, graph, first, taken):
        """(nodes, x, entries, operands) of the longest run starting at ``first``, or None
        when ``first`` cannot start one.  A binary first node may take its running value
        from either input."""
        candidates = first.inputs[:2] if first.op_type in BINARY_OPS else first.inputs[:1]
        for x in candidates:
            dims = _full_dims(graph, x) if x else None
            if dims is None or not _float32(graph, x):
                continue
            operands = [x]
            entry = self._entry(graph, first, x, dims, operands)
            if entry is not None:
                break
        else:
            return None
        nodes, entries, value = [first], [entry], first.outputs[0]
        while True:
            readers = set(graph.consumers(value))
            if len(readers) != 1 or graph.is_graph_output(value):
                break
            (reader,) = readers
            if reader in taken:
                break
            entry = self._entry(graph, reader, value, dims, operands)
            if entry is None:
                break
            nodes.append(reader)
            entries.append(entry)
            value = reader.outputs[0]
        return nodes, x, entries, operands

    def _entry(self, graph, node, value, dims, operands):
        """The ChainEntry applying ``node`` to the running ``value``, or None when ``node``
        cannot join the chain.  New operands are appended to ``operands`` (x first)."""
        if node.domain != "" or len(node.outputs) != 1 or not node.inputs:
            return None
        out = node.outputs[0]
        if not _float32(graph, out) or _full_dims(graph, out) != dims:
            return None
        if node.op_type in UNARY_OPS:
            if node.inputs[0] != value:
                return None
            if node.op_type == "Clip":
                param = _clip_param(graph, node)
                return None if param is None else ChainEntry("Clip", param)
            if len(node.inputs) != 1:
                return None
            return ChainEntry(node.op_type, node.param)
        if node.op_type not in BINARY_OPS or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        if not (_float32(graph, a) and _float32(graph, b)):
            return None
        if a == b == value:
            return ChainEntry(node.op_type, operand=SELF)
        if value not in (a, b) or (node.op_type == "PRelu" and a != value):
            return None
        other = b if a == value else a
        other_dims = _full_dims(graph, other)
        if other_dims is None:
            return None
        try:
            operand_run(other_dims, dims)
        except ValueError:
            return None
        if other not in operands:
            operands.append(other)
        return ChainEntry(node.op_type, operand=operands.index(other), chain_left=a == value)

    def _replace(self, graph, nodes, entries, operands):
        final = nodes[-1].outputs[0]
        for node in nodes:
            graph.remove_node(node)
        name = graph.unique_name(f"{self.name}/{nodes[0].name}")
        graph.add_node(Node(name, CHAIN_OP, CHAIN_DOMAIN, CHAIN_OPSET, list(operands), [final],
                            EltwiseChainParam(tuple(entries))))
