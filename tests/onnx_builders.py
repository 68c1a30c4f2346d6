"""Helpers for building small ONNX models in tests."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES


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


def ort_loadable(model):
    """The bytes of a ModelProto (or of serialized bytes) with the lowest IR version its opsets
    allow.  onnx.helper stamps the newest IR version of the installed onnx, which an older
    onnxruntime refuses ("Unsupported model IR version: 14, max supported IR version: 13" with
    onnx 1.23 and onnxruntime 1.30)."""
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    lowered.ir_version = min(model.ir_version, helper.find_min_ir_version_for(
        list(model.opset_import), ignore_unknown=True))
    return lowered.SerializeToString()


def ort_session(model, sess_options=None):
    """An onnxruntime session (CPU provider) of a ModelProto or its bytes: a test oracle."""
    import onnxruntime

    return onnxruntime.InferenceSession(ort_loadable(model), sess_options=sess_options,
                                        providers=["CPUExecutionProvider"])


# Every ISA tier as a pytest parameter; a tier this CPU lacks is skipped with that reason.
ISAS = [
    pytest.param(isa, marks=pytest.mark.skipif(isa not in supported_isas(),
                                               reason=f"CPU lacks {isa}"))
    for isa in ISA_NAMES
]
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


_RNG = np.random.default_rng(0)


def random_array(shape, dtype):
    """Random data of any pplpy element type (signed ints include negatives)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return _RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return _RNG.integers(-1000 if dtype.kind == "i" else 0, 1000, shape).astype(dtype)
    return _RNG.standard_normal(shape).astype(dtype)
