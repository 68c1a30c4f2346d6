"""Helpers for building small ONNX models in tests."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pplpy.common.isa import supported_isas


def make_model(nodes, inputs, outputs, initializers=(), opset=13, extra_opsets=()):
    """A ModelProto from onnx.helper pieces; inputs/outputs are (name, elem_type, dims)."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


ISAS = supported_isas()
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
