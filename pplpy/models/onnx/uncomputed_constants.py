"""Constant subgraphs in float types pplpy does not compute in (float64, float16), folded
while the model is read, with ONNX's reference implementation of each op.

PyTorch's exporters leave float64 arithmetic on constants in a model where torch computed in
double before a cast: RT-DETR's sine position embedding is float64 Sin, Cos and Concat of an
initializer, then a Cast to float32.  pplpy's kernels compute float32 only and refuse float64
inputs rather than convert them silently (engines/x86/passes/inference.py), so the model did
not load without ``cast_to_float32``, which changes what the model computes.  A node whose
inputs are all constants runs once, whatever its types: it is evaluated here by
``onnx.reference`` (the executable form of the ONNX specification, part of the onnx
package), in the node's own types, and its outputs become constants; the Cast at the end
then hands float32 to the rest of the model.  A float64 value the model computes from its
inputs at run time is still refused.

Folded: main-graph nodes of the ai.onnx domain, in order, whose inputs are all constants
(initializers or earlier folds), that read or make float64 / float16 (an input of that type,
or a Cast / Constant / ConstantOfShape ... whose ``to``, ``dtype`` or ``value`` is of it),
that are deterministic, have no graph attribute and write no graph output.  A node the
reference cannot evaluate is left as it is, for the engine to report.
"""

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from pplpy.common.data_type import DataType
from pplpy.models.onnx.registry import normalize_domain

UNCOMPUTED = (np.float64, np.float16)
UNCOMPUTED_TYPES = (onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
# Ops whose outputs are draws, not functions of their inputs: never folded.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial"}


def _makes_uncomputed(node_proto):
    """Whether an attribute asks for a float64 / float16 result (Cast's ``to``, a
    Constant's ``value``, ConstantOfShape's ``value``, EyeLike's ``dtype``)."""
    for attr in node_proto.attribute:
        if attr.type == onnx.AttributeProto.INT and attr.name in ("to", "dtype") \
                and attr.i in UNCOMPUTED_TYPES:
            return True
        if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in UNCOMPUTED_TYPES:
            return True
    return False


def _foldable(node_proto, constants, graph_outputs):
    if normalize_domain(node_proto.domain) != "" or node_proto.op_type in RANDOM_OPS:
        return False
    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for attr in node_proto.attribute):
        return False
    if any(name in graph_outputs for name in node_proto.output):
        return False  # a graph output must be produced by a node
    present = [name for name in node_proto.input if name]
    if not all(name in constants for name in present):
        return False
    return (any(constants[name].dtype in UNCOMPUTED for name in present)
            or _makes_uncomputed(node_proto))


def fold_uncomputed_constants(onnx_graph, constants, opsets):
    """Evaluate the foldable nodes of ``onnx_graph`` (see the module doc), adding their
    outputs to ``constants`` (name -> array, the initializers); returns the indices of the
    folded nodes, which the parser then skips.  ``opsets``: domain -> version imported."""
    folded = set()
    graph_outputs = {vi.name for vi in onnx_graph.output}
    for index, node_proto in enumerate(onnx_graph.node):
        if not _foldable(node_proto, constants, graph_outputs):
            continue
        feeds = {name: constants[name] for name in node_proto.input if name}
        try:
            values = ReferenceEvaluator(node_proto, opsets={"": opsets.get("", 1)}).run(
                None, feeds)
        except Exception:  # noqa: BLE001 - the reference lacks the op or refuses the data:
            continue  # the engine reports the node as it would have
        values = [np.asarray(value) for value in values]
        if len(values) != len(node_proto.output) or any(
                DataType.from_numpy(value.dtype) is None for value in values):
            continue
        for name, value in zip(node_proto.output, values):
            if name:
                constants[name] = value
        folded.add(index)
    return folded
