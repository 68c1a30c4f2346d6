"""Each compute op through pplpy.load against onnx.reference, in NDARRAY and in N16CX, under
every ISA cap this CPU allows.

To see an op in N16CX, the model puts an identity 1x1 Conv in front of it: Conv always
produces N16CX, and ops that can run blocked keep that format (checked through
``rt.formats``).  Channel counts are not multiples of 16, so padding lanes matter.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(11)
C = 19  # not a multiple of 16


def vec(n=C, positive=False):
    v = RNG.standard_normal(n).astype(np.float32)
    return np.abs(v) + 0.5 if positive else v


# name -> (nodes after the input tensor "t", extra initializers, can run blocked)
CASES = {
    "relu": ([helper.make_node("Relu", ["t"], ["y"])], {}, True),
    "leaky_relu": ([helper.make_node("LeakyRelu", ["t"], ["y"], alpha=0.3)], {}, True),
    "sigmoid": ([helper.make_node("Sigmoid", ["t"], ["y"])], {}, True),
    "clip": ([helper.make_node("Clip", ["t", "lo", "hi"], ["y"])],
             {"lo": np.float32(-0.5), "hi": np.float32(0.7)}, True),
    "add_channel_vector": ([helper.make_node("Add", ["t", "b"], ["y"])],
                           {"b": vec().reshape(C, 1, 1)}, True),
    "mul_channel_vector": ([helper.make_node("Mul", ["b", "t"], ["y"])],
                           {"b": vec().reshape(1, C, 1, 1)}, True),
    "add_same_shape": ([helper.make_node("Relu", ["t"], ["r"]),
                        helper.make_node("Add", ["t", "r"], ["y"])], {}, True),
    "sum_three": ([helper.make_node("Relu", ["t"], ["r"]),
                   helper.make_node("Sigmoid", ["t"], ["s"]),
                   helper.make_node("Sum", ["t", "r", "s"], ["y"])], {}, True),
    "batch_norm": ([helper.make_node("BatchNormalization", ["t", "s", "b", "m", "v"], ["y"],
                                     epsilon=1e-3)],
                   {"s": vec(), "b": vec(), "m": vec(), "v": vec(positive=True)}, True),
    "max_pool": ([helper.make_node("MaxPool", ["t"], ["y"], kernel_shape=[3, 3],
                                   strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1)], {}, True),
    "average_pool": ([helper.make_node("AveragePool", ["t"], ["y"], kernel_shape=[3, 2],
                                       strides=[2, 1], pads=[1, 1, 0, 1],
                                       count_include_pad=1)], {}, True),
    "global_average_pool": ([helper.make_node("GlobalAveragePool", ["t"], ["y"])], {}, True),
    "concat_channels": ([helper.make_node("Relu", ["t"], ["r"]),
                         helper.make_node("Concat", ["t", "r", "t"], ["y"], axis=1)], {}, True),
    "softmax": ([helper.make_node("Softmax", ["t"], ["y"], axis=1)], {}, False),
    "matmul": ([helper.make_node("MatMul", ["t", "w"], ["y"])],
               {"w": RNG.standard_normal((7, 5)).astype(np.float32)}, False),
}


def build(name, blocked):
    nodes, extra, _ = CASES[name]
    inits = {k: v for k, v in extra.items()}
    if blocked:
        eye = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
        inits["eye"] = eye
        nodes = [helper.make_node("Conv", ["x", "eye"], ["t"])] + nodes
    else:
        nodes = [helper.make_node("Identity", ["x"], ["t"])] + nodes
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, 9, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PARAMS = [(name, blocked) for name, (_, _, can_block) in CASES.items()
          for blocked in ((False, True) if can_block else (False,))]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name,blocked", PARAMS,
                         ids=[f"{n}-{'n16cx' if b else 'ndarray'}" for n, b in PARAMS])
def test_op_matches_reference(name, blocked, isa, tmp_path):
    model = build(name, blocked)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, fusion=False)  # keep the op as its own node
    expected_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    op_type = model.graph.node[-1].op_type
    (node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    assert rt.formats[node.outputs[0]] is expected_format
    x = RNG.standard_normal((2, C, 9, 7)).astype(np.float32)
    got = rt.run({"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
