"""Comparisons, logic, Where, IsNaN/IsInf, BitShift, Mod (compare_logic.py) and Pow, Min, Max,
Mean, PRelu (binary_math.py) through pplpy.load against onnx.reference: broadcasting shapes
with scalars and empty tensors, element types, every ISA tier, 1 and 2 threads (outputs big
enough for a parallel step), and PRelu / Max after a Conv in N16CX."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(5)
NP_TO_ONNX = {np.dtype(k): v for k, v in (
    (np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE),
    (np.int8, TensorProto.INT8), (np.int16, TensorProto.INT16), (np.int32, TensorProto.INT32),
    (np.int64, TensorProto.INT64), (np.uint8, TensorProto.UINT8),
    (np.uint16, TensorProto.UINT16), (np.uint32, TensorProto.UINT32),
    (np.uint64, TensorProto.UINT64), (np.bool_, TensorProto.BOOL),
    (np.float16, TensorProto.FLOAT16))}

# (a shape, b shape): broadcasting both ways, scalars, empty, and a big parallel case.
SHAPES = [((3, 4, 5), (3, 4, 5)), ((3, 1, 5), (4, 1)), ((), (2, 3)), ((2, 3), ()),
          ((1,), (2, 3)), ((0, 3), (1, 3)), ((2, 300, 130), (300, 1)), ((5, 1, 1), (1, 7, 9))]


def _data(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind == "f":
        x = (RNG.standard_normal(shape) * 3).astype(dtype)
        return np.round(x) if x.size < 50 else x  # ties exercise ==, <=
    lo = -20 if dtype.kind == "i" else 0
    return RNG.integers(lo, 20, shape).astype(dtype)


def _run(op_type, inputs, isa, threads, tmp_path, opset=18, attrs=None, out_type=None,
         oracle=None):
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape)
         for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", out_type or NP_TO_ONNX[inputs[-1].dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{op_type}.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=threads)
    feeds = dict(zip(names, inputs))
    got = rt.run(feeds)["y"]
    want = oracle(*inputs) if oracle else ReferenceEvaluator(model).run(None, feeds)[0]
    steps = rt._last.plan.steps
    assert not any(isinstance(s, PythonStep) for s in steps)
    return got, want


def _same(got, want, rtol=0.0):
    assert got.dtype == want.dtype and got.shape == want.shape
    if rtol:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater", "LessOrEqual",
                                     "GreaterOrEqual"])
def test_comparisons(op_type, shapes, threads, isa, tmp_path):
    for dtype in (np.float32, np.int32, np.int64, np.uint8):
        a, b = _data(shapes[0], dtype), _data(shapes[1], dtype)
        _same(*_run(op_type, [a, b], isa, threads, tmp_path, out_type=TensorProto.BOOL))


def test_equal_bool_and_nan(isa, tmp_path):
    a, b = _data((4, 5), np.bool_), _data((5,), np.bool_)
    _same(*_run("Equal", [a, b], isa, 1, tmp_path, out_type=TensorProto.BOOL))
    x = np.array([np.nan, 1, -np.inf], np.float32)
    _same(*_run("Equal", [x, x], isa, 1, tmp_path, out_type=TensorProto.BOOL))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type, shapes, threads, isa, tmp_path):
    a, b = _data(shapes[0], np.bool_), _data(shapes[1], np.bool_)
    _same(*_run(op_type, [a, b], isa, threads, tmp_path))


def test_not(isa, tmp_path):
    _same(*_run("Not", [_data((3, 70000), np.bool_)], isa, 2, tmp_path))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_, np.uint8,
                                   np.float64, np.int16])
@pytest.mark.parametrize("shapes", [((3, 1, 5), (4, 5), (3, 4, 1)), ((), (2, 3), ()),
                                    ((1, 1), (0, 1), (1, 4)), ((1, 1, 128), (2, 300, 128), ())],
                         ids=str)
def test_where(shapes, dtype, threads, isa, tmp_path):
    c = _data(shapes[0], np.bool_)
    x, z = _data(shapes[1], dtype), _data(shapes[2], dtype)
    _same(*_run("Where", [c, x, z], isa, threads, tmp_path))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_pow_float(shapes, threads, isa, tmp_path):
    a = _data(shapes[0], np.float32)
    b = np.round(_data(shapes[1], np.float32))
    a.flat[:1] = 0.0
    _same(*_run("Pow", [np.abs(a) + 0.5, b * 0.7], isa, threads, tmp_path), rtol=1e-5)
    _same(*_run("Pow", [a, b], isa, threads, tmp_path), rtol=1e-5)  # negative bases


@pytest.mark.parametrize("types", [(np.float32, np.int64), (np.float32, np.int32),
                                   (np.int64, np.int64), (np.int32, np.int32),
                                   (np.int64, np.float32), (np.float32, np.uint8)], ids=str)
def test_pow_types(types, isa, tmp_path):
    a = _data((3, 4), types[0])
    b = np.abs(_data((4,), types[1])) % 4
    got, want = _run("Pow", [a, b.astype(types[1])], isa, 2, tmp_path,
                     out_type=NP_TO_ONNX[np.dtype(types[0])])
    _same(got, want, rtol=1e-5 if types[0] == np.float32 else 0)


def test_pow_special_values(isa, tmp_path):
    v = np.array([0, -0.0, 1, -1, 2, -2, 0.5, -3.5, np.inf, -np.inf, np.nan], np.float32)
    with np.errstate(all="ignore"):
        _same(*_run("Pow", [v[:, None], v[None, :]], isa, 1, tmp_path), rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op_type", ["Min", "Max", "Mean"])
@pytest.mark.parametrize("shapes", [[(3, 4, 5)], [(3, 1, 5), (4, 1)], [(2, 3), (), (1, 3)],
                                    [(0, 3), (1, 3)], [(2, 300, 130), (300, 1), (130,)]],
                         ids=str)
def test_variadic(op_type, shapes, threads, isa, tmp_path):
    dtypes = [np.float32] if op_type == "Mean" else [np.float32, np.int32, np.int64, np.int8,
                                                     np.uint16, np.float64]
    for dtype in dtypes:
        inputs = [_data(s, dtype) for s in shapes]
        # onnx.reference's Mean adds in place (res += m), which fails when a later input
        # widens the shape: the spec's formula instead.
        oracle = None
        if op_type == "Mean":
            def oracle(*xs):
                return (sum(xs[1:], xs[0]) / np.float32(len(xs))).astype(np.float32)
        _same(*_run(op_type, inputs, isa, threads, tmp_path, oracle=oracle), rtol=1e-6)


def test_min_max_nan(isa, tmp_path):
    a = np.array([np.nan, 1, 2, -np.inf], np.float32)
    b = np.array([0, np.nan, 3, 1], np.float32)
    for op_type in ("Min", "Max"):
        _same(*_run(op_type, [a, b], isa, 1, tmp_path))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1,)),
                                    ((2, 3, 4, 5), (5,)), ((2, 3), (3,)),
                                    ((4, 300, 120), (300, 1))], ids=str)
def test_prelu(shapes, threads, isa, tmp_path):
    x, slope = _data(shapes[0], np.float32), _data(shapes[1], np.float32)
    _same(*_run("PRelu", [x, slope], isa, threads, tmp_path), rtol=1e-6)


def test_prelu_slope_along_a_matching_dim(isa, tmp_path):
    """A 1-D slope whose length is one of X's dims (not the last) applies along that dim, as
    onnx.reference reads it."""
    x, slope = _data((2, 3, 4), np.float32), _data((3,), np.float32)
    _same(*_run("PRelu", [x, slope], isa, 1, tmp_path, opset=9), rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64, np.int8,
                                   np.uint32])
def test_mod(dtype, fmod, threads, isa, tmp_path):
    if fmod == 0 and np.dtype(dtype).kind == "f":
        a, b = _data((3, 4, 5), dtype), _data((4, 1), dtype)
    else:
        a, b = _data((3, 4, 5), dtype), _data((4, 1), dtype)
    with np.errstate(all="ignore"):
        got, want = _run("Mod", [a, b], isa, threads, tmp_path, attrs={"fmod": fmod})
    _same(got, want, rtol=1e-6 if np.dtype(dtype).kind == "f" else 0)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int32])
def test_bitshift(dtype, direction, isa, tmp_path):
    a = _data((3, 4), dtype)
    s = (RNG.integers(0, np.dtype(dtype).itemsize * 8, (4,))).astype(dtype)
    _same(*_run("BitShift", [a, s], isa, 2, tmp_path, attrs={"direction": direction},
                opset=18 if np.dtype(dtype).kind == "u" else 28))


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_negative": 0, "detect_positive": 0}], ids=str)
def test_isinf_isnan(attrs, isa, tmp_path):
    x = np.array([[np.inf, -np.inf, np.nan, 0, 1e38, -2]], np.float32)
    _same(*_run("IsInf", [x], isa, 1, tmp_path, attrs=attrs, out_type=TensorProto.BOOL))
    _same(*_run("IsNaN", [x.astype(np.float64)], isa, 1, tmp_path,
                out_type=TensorProto.BOOL))


def test_unsupported_types_name_the_node(tmp_path):
    x = np.ones((2, 3), np.float16)
    with pytest.raises(pplpy.PplError, match="Pow"):
        _run("Pow", [x, x], None, 1, tmp_path)
    with pytest.raises(pplpy.PplError, match="Mean"):
        _run("Mean", [x.astype(np.int32)], None, 1, tmp_path)


C = 19  # not a multiple of 16: the padding lanes matter


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op_type,vec_shape", [("PRelu", (C, 1, 1)), ("PRelu", (1,)),
                                               ("Max", (1, C, 1, 1)), ("Min", ()),
                                               ("Mean", (C, 1, 1))], ids=str)
def test_n16cx_after_conv(op_type, vec_shape, threads, isa, tmp_path):
    """A Conv's blocked output with a constant per-channel or scalar operand stays N16CX; a
    second Conv reads the padding lanes, so they must stay finite (zero)."""
    vec = _data(vec_shape, np.float32)
    eye = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
    w2 = (RNG.standard_normal((C, C, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "eye"], ["t"]),
             helper.make_node(op_type, ["t", "v"], ["u"]),
             helper.make_node("Conv", ["u", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, 6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in (("eye", eye), ("w2", w2), ("v", vec))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=threads, fusion=False)
    (node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    assert rt.formats[node.outputs[0]] is DataFormat.N16CX
    x = _data((2, C, 6, 5), np.float32)
    got = rt.run({"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
