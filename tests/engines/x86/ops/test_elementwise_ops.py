"""The element-wise table (ops/onnx/elementwise.py) through pplpy.load against onnx.reference,
in NDARRAY and N16CX, under every ISA cap: every activation row, Clip's bounds as constants,
fed inputs and computed values (read by the step when it runs), NaN bounds, and Sum chains
with broadcasting, a single input and integer types.  Every element-wise op is a compiled
step, never a Python one."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.common.isa import supported_isas
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(21)
C = 19  # not a multiple of 16: padding lanes matter


def _model(nodes, inits, inputs, blocked, opset=17, x_type=TensorProto.FLOAT):
    inits = dict(inits)
    if blocked:  # Conv produces N16CX and an element-wise op keeps it
        inits["eye"] = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
        nodes = [helper.make_node("Conv", ["x", "eye"], ["t"])] + nodes
    else:
        nodes = [helper.make_node("Identity", ["x"], ["t"])] + nodes
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", x_type, [2, C, 5, 3]), *inputs],
        [helper.make_tensor_value_info("y", x_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, isa, tmp_path, blocked, last_op):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, fusion=False)
    (node,) = [n for n in rt.graph.nodes if n.op_type == last_op]
    want_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    assert rt.formats[node.outputs[0]] is want_format
    ref = ReferenceEvaluator(model)
    for run_feeds in feeds:
        got = rt.run(run_feeds)["y"]
        want = ref.run(None, run_feeds)[0]
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    steps = rt._last.plan.steps
    labels = [s.label for s in steps if isinstance(s, PythonStep)]
    assert node.name not in labels, f"{last_op} ran as a Python step"


def _x():
    x = (RNG.standard_normal((2, C, 5, 3)) * 4).astype(np.float32)
    x.flat[:3] = [np.nan, -0.0, 3.0]
    return x


ACTIVATIONS = {
    "relu": (helper.make_node("Relu", ["t"], ["y"]), 17),
    "leaky_relu": (helper.make_node("LeakyRelu", ["t"], ["y"], alpha=0.3), 17),
    "sigmoid": (helper.make_node("Sigmoid", ["t"], ["y"]), 17),
    "tanh": (helper.make_node("Tanh", ["t"], ["y"]), 17),
    "hard_swish": (helper.make_node("HardSwish", ["t"], ["y"]), 17),
    "clip_6": (helper.make_node("Clip", ["t"], ["y"], min=-0.5, max=2.0), 10),
    "clip_6_default": (helper.make_node("Clip", ["t"], ["y"]), 10),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_rows(name, blocked, isa, tmp_path):
    node, opset = ACTIVATIONS[name]
    model = _model([node], {}, [], blocked, opset)
    _check(model, [{"x": _x()}], isa, tmp_path, blocked, node.op_type)


CLIP_BOUNDS = {
    "constants": ({"lo": np.float32(-0.5), "hi": np.float32(0.7)}, ["t", "lo", "hi"]),
    "min_only": ({"lo": np.float32(0.1)}, ["t", "lo"]),
    "max_only": ({"hi": np.float32(0.1)}, ["t", "", "hi"]),
    "none": ({}, ["t"]),
    "nan_min": ({"lo": np.float32(np.nan), "hi": np.float32(1)}, ["t", "lo", "hi"]),
    "min_above_max": ({"lo": np.float32(2), "hi": np.float32(1)}, ["t", "lo", "hi"]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
@pytest.mark.parametrize("case", CLIP_BOUNDS)
def test_clip_11_constant_bounds(case, blocked, isa, tmp_path):
    inits, inputs = CLIP_BOUNDS[case]
    model = _model([helper.make_node("Clip", inputs, ["y"])], inits, [], blocked)
    _check(model, [{"x": _x()}], isa, tmp_path, blocked, "Clip")


@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
def test_clip_11_bounds_fed_and_computed_at_run_time(blocked, tmp_path):
    """min is a model input, max is computed by another node: the step reads both each run,
    so new values with the same shapes (the same plan) take effect."""
    nodes = [helper.make_node("Add", ["hi_in", "one"], ["hi"]),
             helper.make_node("Clip", ["t", "lo", "hi"], ["y"])]
    scalar = [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("lo", "hi_in")]
    model = _model(nodes, {"one": np.float32(1)}, scalar, blocked)
    x = _x()
    feeds = [{"x": x, "lo": np.float32(lo), "hi_in": np.float32(hi)}
             for lo, hi in ((-0.5, 0.0), (0.25, 1.0), (np.nan, 1.0), (-1.0, -3.0))]
    _check(model, feeds, supported_isas()[0], tmp_path, blocked, "Clip")


SUMS = {
    "three_same": ([(2, C, 5, 3)] * 3, True),
    "four_broadcast": ([(2, C, 5, 3), (C, 1, 1), (1, C, 1, 1), (C, 1, 1)], True),
    "one_input": ([(2, C, 5, 3)], True),
    "vector_first": ([(C, 1, 1), (2, C, 5, 3), (2, C, 5, 3)], True),
    "ndarray_broadcast": ([(2, C, 5, 3), (5, 1), (3,), (2, 1, 1, 1)], False),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", SUMS)
def test_sum_chains(case, isa, tmp_path):
    shapes, blocked = SUMS[case]
    names, inits = [], {}
    for i, shape in enumerate(shapes):
        if shape == (2, C, 5, 3):
            names.append("t")
        else:
            names.append(f"c{i}")
            inits[f"c{i}"] = RNG.standard_normal(shape).astype(np.float32)
    model = _model([helper.make_node("Sum", names, ["y"])], inits, [], blocked)
    _check(model, [{"x": _x()}], isa, tmp_path, blocked, "Sum")


@pytest.mark.parametrize("dtype,onnx_type", [(np.int32, TensorProto.INT32),
                                             (np.int64, TensorProto.INT64)])
@pytest.mark.parametrize("op_type", ["Add", "Mul", "Sum"])
def test_integer_arithmetic(op_type, dtype, onnx_type, tmp_path):
    b = RNG.integers(-9, 9, (C, 1, 1)).astype(dtype)
    nodes = [helper.make_node(op_type, ["t", "b"] + (["t"] if op_type == "Sum" else []), ["y"])]
    model = _model(nodes, {"b": b}, [], False, x_type=onnx_type)
    x = RNG.integers(-100, 100, (2, C, 5, 3)).astype(dtype)
    _check(model, [{"x": x}], supported_isas()[0], tmp_path, False, op_type)
