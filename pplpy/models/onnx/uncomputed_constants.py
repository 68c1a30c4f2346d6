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
(initializers, Constant nodes of any type, earlier folds), that read or make float64 /
float16 (an input of that type, or a Cast / Constant / ConstantOfShape ... whose ``to``,
``dtype`` or ``value`` is of it), that are deterministic, have no graph attribute and write
no graph output.  Each is evaluated as a one-node model importing the model's ai.onnx opset,
so the reference picks the op's version (Unsqueeze-11 takes axes as an attribute); Softmax,
LogSoftmax and Hardmax before opset 13 (which flattened from ``axis``: the reference has
only the later form) are not folded.  A node the reference cannot evaluate is left as it
is, for the engine to report.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pplpy.common.data_type import DataType
from pplpy.models.onnx.registry import normalize_domain

UNCOMPUTED = (np.float64, np.float16)
UNCOMPUTED_TYPES = (onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
# Ops whose outputs are draws, not functions of their inputs (Dropout in training mode):
# never folded.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial", "Dropout"}
# Ops whose meaning before this opset the reference does not implement.
REFERENCE_SINCE = {"Softmax": 13, "LogSoftmax": 13, "Hardmax": 13}


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


class _Known:
    """The constant values a node may read: the initializers and earlier folds (``values``),
    and Constant nodes, decoded only when a node to fold reads them (a TorchScript export
    has thousands, most of them shapes)."""

    SCALAR_ATTRIBUTES = {"value_float": np.float32, "value_floats": np.float32,
                         "value_int": np.int64, "value_ints": np.int64}

    def __init__(self, values):
        self.values = values
        self.constant_nodes = {}

    def add_constant_node(self, node_proto):
        if len(node_proto.attribute) == 1 and len(node_proto.output) == 1:
            self.constant_nodes[node_proto.output[0]] = node_proto.attribute[0]

    def dtype(self, name):
        """The element type of ``name``, or None when it is not a known constant."""
        if name in self.values:
            return self.values[name].dtype
        attr = self.constant_nodes.get(name)
        if attr is None:
            return None
        if attr.name == "value":
            return helper.tensor_dtype_to_np_dtype(attr.t.data_type)
        dtype = self.SCALAR_ATTRIBUTES.get(attr.name)
        return np.dtype(dtype) if dtype is not None else None

    def value(self, name):
        if name not in self.values:
            attr = self.constant_nodes[name]
            if attr.name == "value":
                self.values[name] = numpy_helper.to_array(attr.t)
            else:  # value_float / value_int: 0-d; value_floats / value_ints: 1-D
                self.values[name] = np.array(helper.get_attribute_value(attr),
                                             self.SCALAR_ATTRIBUTES[attr.name])
        return self.values[name]


def _foldable(node_proto, known, graph_outputs, opset):
    if normalize_domain(node_proto.domain) != "" or node_proto.op_type in RANDOM_OPS:
        return False
    if opset < REFERENCE_SINCE.get(node_proto.op_type, 0):
        return False
    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for attr in node_proto.attribute):
        return False
    if any(name in graph_outputs for name in node_proto.output):
        return False  # a graph output must be produced by a node
    dtypes = [known.dtype(name) for name in node_proto.input if name]
    if any(dtype is None for dtype in dtypes):
        return False
    return any(dtype in UNCOMPUTED for dtype in dtypes) or _makes_uncomputed(node_proto)


def _evaluate(node_proto, known, opset):
    """The node's outputs, computed by onnx.reference as a one-node model of ``opset``; None
    when the reference cannot (it lacks the op, or refuses the attributes or the data)."""
    try:
        feeds = {name: known.value(name) for name in node_proto.input if name}
        graph = helper.make_graph(
            [node_proto], "fold",
            [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                           value.shape) for name, value in feeds.items()],
            [helper.make_empty_tensor_value_info(name) for name in node_proto.output if name])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        values = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - the reference lacks the op or refuses the data:
        return None  # the engine reports the node as it would have
    values = [np.asarray(value) for value in values]
    if len(values) != len([name for name in node_proto.output if name]) or any(
            DataType.from_numpy(value.dtype) is None for value in values):
        return None
    return values


def fold_uncomputed_constants(onnx_graph, constants, opsets):
    """Evaluate the foldable nodes of ``onnx_graph`` (see the module doc), adding their
    outputs to ``constants`` (name -> array, the initializers); returns the indices of the
    folded nodes, which the parser then skips.  ``opsets``: domain -> version imported."""
    folded = set()
    opset = opsets.get("", 1)
    graph_outputs = {vi.name for vi in onnx_graph.output}
    known = _Known(dict(constants))
    for index, node_proto in enumerate(onnx_graph.node):
        if not _foldable(node_proto, known, graph_outputs, opset):
            if (node_proto.op_type == "Constant" and not node_proto.input
                    and normalize_domain(node_proto.domain) == ""):
                known.add_constant_node(node_proto)  # stays a node; its value is readable
            continue
        values = _evaluate(node_proto, known, opset)
        if values is None:
            continue
        outputs = [name for name in node_proto.output if name]
        known.values.update(zip(outputs, values))
        constants.update(zip(outputs, values))
        folded.add(index)
    return folded
