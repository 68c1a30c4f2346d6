"""Fusion into post-ops: an activation that is the only reader of a Conv's or Gemm's output
runs inside that kernel's epilogue, while the tile is still in registers (oneDNN's eltwise
post-op, reference/000), instead of as a separate pass over memory.

Guarantees to the next pass: a fused producer's op context lists its post-ops in
``op.post_ops`` as ``(PostOp code, p0, p1)`` and writes the activation's output value; the
activation node is gone.  Runs after reorder insertion, so formats already agree (an
element-wise activation keeps its input's format).  ``X86Engine(fusion=False)`` (``pplnn
--disable-fusion``) skips it.
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType

# MatMul: every shape (batched, 1-D operands) runs on the gemm step, whose epilogue applies
# the post-op to each batch entry.
# The pplpy-domain Conv/Gemm/MatMul are the same ops read back from a saved optimised model
# (ops/pplpy/standard_twins.py).
FUSING_PRODUCERS = {("", "Conv"), ("", "Gemm"), ("", "MatMul"), ("pplpy", "MatMulBias"),
                    ("pplpy", "Conv"), ("pplpy", "Gemm"), ("pplpy", "MatMul")}
MAX_POST_OPS = 1  # the conv and gemm epilogues apply one eltwise post-op today


def activation_post_op(graph, node, op):
    """The (code, p0, p1) of an activation node from its row of the activation table
    (``op.activation``, ops/onnx/elementwise.py), or None when it is not fusable."""
    row = getattr(op, "activation", None)
    if node.domain != "" or row is None:
        return None
    if row.input_params is None:  # parameters are attributes
        try:
            p0, p1 = row.params(node.param)
        except ValueError:
            return None
        return (row.code, float(p0), float(p1))
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
    return (row.code, lo, hi)


def fuse_post_ops(graph, ops):
    """Fold activations into their Conv/Gemm producers; returns the number fused."""
    fused = 0
    for node in graph.nodes:
        if node not in graph or node.key not in FUSING_PRODUCERS or len(node.outputs) != 1:
            continue
        while True:
            out = node.outputs[0]
            readers = graph.uses(out)
            if len(readers) != 1 or graph.is_graph_output(out):
                break
            activation, index = readers[0]
            post = activation_post_op(graph, activation, ops.get(activation))
            op = ops[node]
            post_ops = list(getattr(op, "post_ops", ()))
            if post is None or index != 0 or len(post_ops) >= MAX_POST_OPS:
                break
            if graph.values[activation.outputs[0]].format is not graph.values[out].format:
                break
            if (graph.values[out].format is DataFormat.N16CX
                    and not ops[activation].activation.keeps_padding):
                break  # f(0) is not finite: the epilogue would poison the padding lanes
            if graph.values[out].dtype is not DataType.FLOAT32:
                break  # an integer MatMul: the epilogue's activations are float32
            result = activation.outputs[0]
            graph.remove_node(activation)
            graph.set_output(node, 0, result)
            op.post_ops = post_ops + [post]
            del ops[activation]
            fused += 1
    return fused
