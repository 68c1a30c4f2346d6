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
from pplpy.optimizer import DEFAULT_PIPELINE
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


def _check(model, feeds, isa, tmp_path, blocked, last_op, passes=None):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, fusion=False, passes=passes)
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


_NODE = helper.make_node
# The unary math ops, at their newest opset and (second entry) at their first; each runs in
# N16CX too unless f(0) is not finite (Log, Reciprocal, Acosh: NDARRAY only).
UNARY = {
    "abs": (_NODE("Abs", ["t"], ["y"]), 6),
    "neg": (_NODE("Neg", ["t"], ["y"]), 13),
    "sign": (_NODE("Sign", ["t"], ["y"]), 9),
    "exp": (_NODE("Exp", ["t"], ["y"]), 13),
    "log": (_NODE("Log", ["t"], ["y"]), 13),
    "sqrt": (_NODE("Sqrt", ["t"], ["y"]), 6),
    "reciprocal": (_NODE("Reciprocal", ["t"], ["y"]), 13),
    "floor": (_NODE("Floor", ["t"], ["y"]), 13),
    "ceil": (_NODE("Ceil", ["t"], ["y"]), 6),
    "round": (_NODE("Round", ["t"], ["y"]), 22),
    "erf": (_NODE("Erf", ["t"], ["y"]), 13),
    "sin": (_NODE("Sin", ["t"], ["y"]), 7),
    "cos": (_NODE("Cos", ["t"], ["y"]), 22),
    "tan": (_NODE("Tan", ["t"], ["y"]), 22),
    "asin": (_NODE("Asin", ["t"], ["y"]), 22),
    "acos": (_NODE("Acos", ["t"], ["y"]), 7),
    "atan": (_NODE("Atan", ["t"], ["y"]), 22),
    "sinh": (_NODE("Sinh", ["t"], ["y"]), 9),
    "cosh": (_NODE("Cosh", ["t"], ["y"]), 22),
    "asinh": (_NODE("Asinh", ["t"], ["y"]), 22),
    "acosh": (_NODE("Acosh", ["t"], ["y"]), 9),
    "atanh": (_NODE("Atanh", ["t"], ["y"]), 22),
    "hard_sigmoid": (_NODE("HardSigmoid", ["t"], ["y"], alpha=0.3, beta=0.4), 6),
    "hard_sigmoid_default": (_NODE("HardSigmoid", ["t"], ["y"]), 22),
    "softplus": (_NODE("Softplus", ["t"], ["y"]), 1),
    "softsign": (_NODE("Softsign", ["t"], ["y"]), 22),
    "elu": (_NODE("Elu", ["t"], ["y"], alpha=0.7), 6),
    "selu": (_NODE("Selu", ["t"], ["y"]), 22),
    "selu_params": (_NODE("Selu", ["t"], ["y"], alpha=2.0, gamma=3.0), 6),
    "celu": (_NODE("Celu", ["t"], ["y"], alpha=0.5), 12),
    "gelu": (_NODE("Gelu", ["t"], ["y"]), 20),
    "gelu_tanh": (_NODE("Gelu", ["t"], ["y"], approximate="tanh"), 20),
    "mish": (_NODE("Mish", ["t"], ["y"]), 22),
    "thresholded_relu": (_NODE("ThresholdedRelu", ["t"], ["y"], alpha=0.5), 10),
    "shrink": (_NODE("Shrink", ["t"], ["y"], bias=0.3, lambd=0.8), 9),
}
NDARRAY_ONLY = {"Log", "Reciprocal", "Acosh"}
ACTIVATIONS.update(UNARY)


def _domain_x(op_type):
    """Random inputs mostly inside the op's domain (Log, Sqrt, Asin ... also get some
    outside: NaN on both sides)."""
    x = _x()
    if op_type in ("Asin", "Acos", "Atanh"):
        x = np.tanh(x / 4).astype(np.float32) * np.float32(1.01)
    elif op_type == "Acosh":
        x = np.abs(x) + np.float32(0.9)
    elif op_type in ("Log", "Sqrt"):
        x = np.abs(x) - np.float32(0.1)
    elif op_type in ("Sinh", "Cosh", "Exp"):
        x = x * np.float32(4)
    x.flat[:3] = [np.nan, -0.0, 3.0]
    return x


# Every row in NDARRAY, and in N16CX unless f(0) is not finite (those run in NDARRAY only).
ACTIVATION_FORMATS = [
    pytest.param(name, blocked, id=f"{name}-{'n16cx' if blocked else 'ndarray'}")
    for name in ACTIVATIONS for blocked in (False, True)
    if not (blocked and ACTIVATIONS[name][0].op_type in NDARRAY_ONLY)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name, blocked", ACTIVATION_FORMATS)
def test_activation_rows(name, blocked, isa, tmp_path):
    node, opset = ACTIVATIONS[name]
    model = _model([node], {}, [], blocked, opset)
    _check(model, [{"x": _domain_x(node.op_type)}], isa, tmp_path, blocked, node.op_type)


@pytest.mark.parametrize("op_type", sorted(NDARRAY_ONLY))
def test_ops_with_infinite_f0_take_ndarray_after_a_blocked_conv(op_type, tmp_path):
    """After a Conv (N16CX) the op gets a reorder to NDARRAY in front, and the result is
    right (zero padding lanes would have become inf / NaN)."""
    model = _model([_NODE(op_type, ["t"], ["y"])], {}, [], True, 13 if op_type != "Acosh"
                   else 22)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, fusion=False)
    (node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    assert rt.formats[node.inputs[0]] is DataFormat.NDARRAY
    x = np.abs(_x()) + np.float32(1)
    np.testing.assert_allclose(rt.run({"x": x})["y"], ReferenceEvaluator(model).run(
        None, {"x": x})[0], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["erf", "gelu", "exp", "sqrt", "hard_sigmoid", "elu", "mish",
                                  "log", "sin"])
@pytest.mark.parametrize("producer", ["Conv", "Gemm"])
def test_math_activations_fuse_into_conv_and_gemm(name, producer, tmp_path):
    """Every activation of the table fuses into Conv / Gemm (the epilogue calls the same
    vector function); one that must not see N16CX padding (Log) stays unfused after a Conv."""
    node, opset = UNARY[name]
    node = helper.make_node(node.op_type, ["c"], ["y"])
    node.attribute.extend(UNARY[name][0].attribute)
    if producer == "Conv":
        w = (RNG.standard_normal((C, C, 1, 1)) * 0.3).astype(np.float32)
        nodes = [_NODE("Conv", ["x", "w"], ["c"]), node]
        shape = [2, C, 5, 3]
    else:
        w = (RNG.standard_normal((C, 7)) * 0.3).astype(np.float32)
        nodes = [_NODE("Gemm", ["x", "w"], ["c"]), node]
        shape = [4, C]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 13))])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path)
    fused = not any(n.op_type == node.op_type for n in rt.graph.nodes)
    assert fused == (producer == "Gemm" or node.op_type not in NDARRAY_ONLY)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_unsupported_attribute_values_fail_at_load(tmp_path):
    for node, opset in [(_NODE("Gelu", ["t"], ["y"], approximate="erf"), 20),
                        (_NODE("Celu", ["t"], ["y"], alpha=0.0), 12)]:
        model = _model([node], {}, [], False, opset)
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        with pytest.raises(pplpy.UnsupportedOpError, match=node.op_type):
            pplpy.load(path)


@pytest.mark.parametrize("dtype,onnx_type", [(np.int32, TensorProto.INT32),
                                             (np.int64, TensorProto.INT64)])
@pytest.mark.parametrize("op_type", ["Abs", "Neg", "Sign"])
def test_integer_unary(op_type, dtype, onnx_type, tmp_path):
    model = _model([_NODE(op_type, ["t"], ["y"])], {}, [], False, 13, x_type=onnx_type)
    x = RNG.integers(-100, 100, (2, C, 5, 3)).astype(dtype)
    x.flat[:2] = [0, np.iinfo(dtype).max]
    _check(model, [{"x": x}], supported_isas()[0], tmp_path, False, op_type)


@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
def test_unary_threads_1_vs_2(blocked, tmp_path):
    """A large tensor (parallel steps): 1 and 2 threads give the same bytes."""
    node = _NODE("Erf", ["t"], ["y"])
    model = _model([node], {}, [], blocked, 13)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 200
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    x = (RNG.standard_normal((200, C, 5, 3)) * 3).astype(np.float32)
    outs = [pplpy.load(path, num_threads=nt).run({"x": x})["y"] for nt in (1, 2)]
    assert outs[0].tobytes() == outs[1].tobytes()


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


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo",), ("", "hi"), ()], ids=str)
def test_clip_of_integers(dtype, bounds):
    """Clip of int32 / int64 (opset 12's types; an exported `(lengths - 1).clamp(min=0)`),
    bounds constant (lo) or fed (hi), after an integer Sub, against onnx.reference."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "one"], ["d"]),
         helper.make_node("Clip", ["d", *bounds], ["y"])], "g",
        [helper.make_tensor_value_info("x", elem, ["N"]),
         helper.make_tensor_value_info("hi", elem, [])],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.array(1, dtype), "one"),
         numpy_helper.from_array(np.array(0, dtype), "lo")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rt = pplpy.load(model.SerializeToString())
    ref = ReferenceEvaluator(model)
    for hi in (6, -3):
        feeds = {"x": np.array([-5, 0, 1, 2, 7, 100, np.iinfo(dtype).min + 1] * 3, dtype),
                 "hi": np.array(hi, dtype)}
        got = rt.run(feeds)["y"]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, ref.run(None, feeds)[0])



def test_clip_of_integers_before_opset_12_is_unsupported():
    """Clip's schema admits integers from opset 12 (ONNX Runtime refuses such a model
    below it); pplpy says so rather than running it."""
    graph = helper.make_graph(
        [helper.make_node("Clip", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(pplpy.UnsupportedOpError, match="Clip takes int64 from opset 12"):
        pplpy.load(model.SerializeToString())


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
    # without sum_to_add, which would make a Sum of one or two inputs something else
    passes = [e for e in DEFAULT_PIPELINE if e.pass_id != "sum_to_add"]
    _check(model, [{"x": _x()}], isa, tmp_path, blocked, "Sum", passes)


@pytest.mark.parametrize("dtype,onnx_type", [(np.int32, TensorProto.INT32),
                                             (np.int64, TensorProto.INT64)])
@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Sum"])
def test_integer_arithmetic(op_type, dtype, onnx_type, tmp_path):
    b = RNG.integers(-9, 9, (C, 1, 1)).astype(dtype)
    nodes = [helper.make_node(op_type, ["t", "b"] + (["t"] if op_type == "Sum" else []), ["y"])]
    model = _model(nodes, {"b": b}, [], False, x_type=onnx_type)
    x = RNG.integers(-100, 100, (2, C, 5, 3)).astype(dtype)
    _check(model, [{"x": x}], supported_isas()[0], tmp_path, False, op_type)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
@pytest.mark.parametrize("op_type", ["Sub", "Div"])
@pytest.mark.parametrize("b_shape,b_first", [((C, 1, 1), False), ((C, 1, 1), True),
                                             ((1,), False), ((2, C, 5, 3), True)])
def test_sub_div(op_type, b_shape, b_first, blocked, isa, tmp_path):
    """Float Sub and Div: a per-channel vector, a scalar, a full tensor, either side."""
    b = (RNG.standard_normal(b_shape) + 3).astype(np.float32)
    names = ["b", "t"] if b_first else ["t", "b"]
    model = _model([helper.make_node(op_type, names, ["y"])], {"b": b}, [], blocked)
    x = _x()
    if op_type == "Div" and b_first:
        x = x + np.float32(0.5)
    _check(model, [{"x": x}], isa, tmp_path, blocked and len(b_shape) < 4, op_type)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("op_type", ["Mul", "Add", "Sub", "Div"])
def test_per_sample_channel_vector_stays_blocked(op_type, batch, tmp_path):
    """x [N,C,H,W] op s [N,C,1,1] with both from N16CX Convs (a squeeze-excite gate): no
    reorder, and the values match the reference for every sample."""
    import onnx as _onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from pplpy.common.data_format import DataFormat

    rng = np.random.default_rng(9)
    c = 20
    w1 = rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Conv", ["g", "w2"], ["s"]),
             helper.make_node(op_type, ["a", "s"], ["y"])]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "se.onnx"
    _onnx.save(model, path)
    rt = pplpy.load(path, fusion=False)
    (node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    assert [rt.formats[n] for n in node.inputs] == [DataFormat.N16CX, DataFormat.N16CX]
    x = rng.standard_normal((batch, c, 5, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type", ["Mul", "Add", "Sub", "Div"])
@pytest.mark.parametrize("plane_first", [False, True], ids=["x_op_plane", "plane_op_x"])
@pytest.mark.parametrize("batch,plane_batch,channels", [(1, 1, 20), (3, 3, 32), (2, 1, 7)])
def test_a_spatial_plane_broadcast_over_channels_stays_blocked(
        op_type, plane_first, batch, plane_batch, channels, isa, tmp_path):
    """x [N,C,H,W] from an N16CX Conv op g [N or 1,1,H,W] (a spatial gate: FocalNet's
    modulation, CBAM) runs on N16CX, g read in NDARRAY; the padding lanes stay 0 for the
    Conv after it (which would sum them), whatever the op makes of 0 and g."""
    import onnx as _onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from pplpy.common.data_format import DataFormat

    rng = np.random.default_rng(13)
    w1 = rng.standard_normal((channels, 3, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((8, channels, 1, 1)).astype(np.float32)
    pair = ["g", "a"] if plane_first else ["a", "g"]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node(op_type, pair, ["m"]),
             helper.make_node("Conv", ["m", "w2"], ["y"])]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "gate", [vi("x", TensorProto.FLOAT, [batch, 3, 9, 7]),
                        vi("g", TensorProto.FLOAT, [plane_batch, 1, 9, 7])],
        [vi("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "gate.onnx"
    _onnx.save(model, path)
    feeds = {"x": rng.standard_normal((batch, 3, 9, 7)).astype(np.float32),
             "g": (rng.random((plane_batch, 1, 9, 7)) + 0.5).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    for threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=threads, fusion=False)
        (node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
        assert rt.formats[node.outputs[0]] is DataFormat.N16CX
        assert rt.formats[node.inputs[1 - pair.index("a")]] is DataFormat.NDARRAY
        assert "Reorder" not in [rt.graph.producer(n).op_type for n in node.inputs
                                 if rt.graph.producer(n)]
        # (plane / x is large where x is near 0: the next Conv's sums then cancel)
        np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4,
                                   atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("reader", ["Conv", "Softmax", "output"])
def test_a_blocked_and_an_ndarray_operand_meet_in_the_readers_format(reader, tmp_path):
    """Add(conv output (N16CX), x (NDARRAY, the same shape)): one operand is reordered
    either way; the Add runs N16CX when every reader can (a residual stream that feeds the
    next Conv), NDARRAY when a reader cannot (Softmax over the last axis, a graph output)."""
    import onnx as _onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from pplpy.common.data_format import DataFormat

    rng = np.random.default_rng(17)
    w = rng.standard_normal((20, 20, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Add", ["a", "x"], ["s"])]
    out = "s"
    if reader == "Conv":
        nodes.append(helper.make_node("Conv", ["s", "w"], ["y"]))
        out = "y"
    elif reader == "Softmax":
        nodes.append(helper.make_node("Softmax", ["s"], ["y"], axis=-1))
        out = "y"
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "res", [vi("x", TensorProto.FLOAT, [1, 20, 6, 5])],
                              [vi(out, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "res.onnx"
    _onnx.save(model, path)
    rt = pplpy.load(path, fusion=False)
    (add,) = [n for n in rt.graph.nodes if n.op_type == "Add"]
    want = DataFormat.N16CX if reader == "Conv" else DataFormat.NDARRAY
    assert rt.formats[add.outputs[0]] is want
    x = rng.standard_normal((1, 20, 6, 5)).astype(np.float32)
    np.testing.assert_allclose(rt.run({"x": x})[out], ReferenceEvaluator(model).run(
        None, {"x": x})[0], rtol=1e-5, atol=1e-5)


# -- Sin / Cos / Tan of finite arguments past 2**23: finite (ONNX, numpy), not NaN ------------
# (a Conv -> BatchNormalization with running var 0 -> Cos -> Conv graph gave NaN everywhere)

TRIG_C = 19  # not a multiple of 16
TRIG_X = np.array([1e3, 8388609.0, 1e7, 4e7, 1e8, -1e9, 1e20, -3e38, 0.5, np.inf, -np.inf,
                   np.nan], np.float32)


def _trig_model(op_type, blocked):
    x = np.tile(TRIG_X, (TRIG_C, 1)).reshape(1, TRIG_C, 1, TRIG_X.size)
    nodes = [helper.make_node(op_type, ["t"], ["y"])]
    inits = []
    if blocked:
        eye = np.eye(TRIG_C, dtype=np.float32).reshape(TRIG_C, TRIG_C, 1, 1)
        inits = [numpy_helper.from_array(eye, "eye")]
        nodes.insert(0, helper.make_node("Conv", ["x", "eye"], ["t"]))
    else:
        nodes.insert(0, helper.make_node("Identity", ["x"], ["t"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fusion", [False, True])
@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("op_type", ["Sin", "Cos", "Tan"])
def test_trig_of_large_finite_arguments_is_finite(op_type, blocked, fusion, isa):
    model, x = _trig_model(op_type, blocked)
    rt = pplpy.load(model.SerializeToString(), max_isa=isa, fusion=fusion)
    y = rt.run({"x": x})["y"]
    with np.errstate(invalid="ignore"):
        want = getattr(np, op_type.lower())(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))  # NaN only for +-inf and NaN
    finite = np.isfinite(want)
    np.testing.assert_allclose(y[finite], want[finite], rtol=1e-5, atol=1e-6)
