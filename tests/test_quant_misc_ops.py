"""MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, DynamicQuantizeLinear, Unique,
TfIdfVectorizer and the integer Add/Sub/Mul/Div through the public API against onnx's
ReferenceEvaluator on random inputs, under every ISA cap; the integer GEMM impl against
numpy; bad inputs raise pplpy errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.engines.x86.impls import _quant_int

RNG = np.random.default_rng(7)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def model_of(node, feeds, initializers=(), opset=13, outputs=None):
    outputs = outputs or node.output
    graph = helper.make_graph(
        [node], "g", [vi(n, v.dtype, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(tmp_path, model, feeds, isa, exact=True, reference=None):
    """pplpy on ``model`` against the evaluator on ``reference`` (default: the same model)."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    got = pplpy.load(str(path), max_isa=isa).run(feeds)
    want = ReferenceEvaluator(reference or model).run(None, feeds)
    for name, expected in zip(got, want):
        expected = np.asarray(expected)
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        if exact:
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-6, err_msg=name)


def ints(dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return RNG.integers(info.min if lo is None else lo, info.max if hi is None else hi, shape,
                        dtype=dtype, endpoint=True)


def load_error(tmp_path, model):
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    return pplpy.load(str(path))


# -- impl ------------------------------------------------------------------------------------


@pytest.mark.parametrize("adt", [np.int8, np.uint8])
@pytest.mark.parametrize("bdt", [np.int8, np.uint8, np.int32])
@pytest.mark.parametrize("threads", [1, 3])
def test_igemm_matches_numpy(adt, bdt, threads):
    a, b = ints(adt, (19, 700)), ints(bdt, (700, 530), -300 if bdt == np.int32 else None,
                                       300 if bdt == np.int32 else None)
    za, zb = ints(adt, 19), ints(bdt, 530, 0, 100)
    want = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb)
    np.testing.assert_array_equal(_quant_int.igemm(a, b, za, zb, threads), want)
    want = (a.astype(np.int64) - za[0]) @ (b.astype(np.int64) - zb[0])
    np.testing.assert_array_equal(_quant_int.igemm(a, b, za[:1], zb[:1], threads), want)


# -- MatMulInteger, QLinearMatMul --------------------------------------------------------------


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", [((3, 5), (5, 4)), ((2, 3, 6), (6, 4)), ((1, 3, 5), (2, 5, 7)),
                                    ((5,), (5, 3))], ids=str)
def test_matmul_integer(tmp_path, isa, dt, shapes):
    a, b = ints(dt, shapes[0]), ints(dt, shapes[1])
    feeds = {"A": a, "B": b, "za": ints(dt, ()), "zb": ints(dt, (b.shape[-1],))}
    node = helper.make_node("MatMulInteger", ["A", "B", "za", "zb"], ["Y"])
    check(tmp_path, model_of(node, feeds, opset=10), feeds, isa)


@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(tmp_path, isa, opset, dt, per_column):
    a, b = ints(dt, (2, 4, 9)), ints(dt, (9, 6))
    n = 6 if per_column else 1
    feeds = {"a": a, "a_scale": np.float32([0.02]), "a_zp": ints(dt, (1,)),
             "b": b, "b_scale": RNG.uniform(0.005, 0.03, n).astype(np.float32),
             "b_zp": ints(dt, (n,), 0, 20), "y_scale": np.float32(0.37), "y_zp": ints(dt, ())}
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    check(tmp_path, model_of(node, feeds, opset=opset), feeds, isa)


def test_qlinear_matmul_scale_shape_mismatch(tmp_path):
    feeds = {"a": ints(np.uint8, (3, 4)), "a_scale": np.float32(0.1), "a_zp": np.uint8(1),
             "b": ints(np.uint8, (4, 5)), "b_scale": np.ones(3, np.float32),
             "b_zp": np.uint8(0), "y_scale": np.float32(1), "y_zp": np.uint8(0)}
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    with pytest.raises(pplpy.ShapeError, match="b_scale"):
        load_error(tmp_path, model_of(node, feeds, opset=10))


def test_matmul_integer_zero_point_type_mismatch(tmp_path):
    feeds = {"A": ints(np.uint8, (3, 4)), "B": ints(np.uint8, (4, 5)), "za": np.int8(1)}
    node = helper.make_node("MatMulInteger", list(feeds), ["Y"])
    with pytest.raises(pplpy.UnsupportedOpError, match="a_zero_point"):
        load_error(tmp_path, model_of(node, feeds, opset=10))


# -- ConvInteger, QLinearConv ------------------------------------------------------------------

CONVS = [
    dict(),
    dict(pads=[1, 2, 0, 1], strides=[2, 1]),
    dict(group=2, dilations=[2, 1], pads=[1, 1, 1, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", CONVS, ids=str)
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_conv_integer(tmp_path, isa, attrs, dt):
    x, w = ints(dt, (2, 4, 7, 6)), ints(dt, (6, 4 // attrs.get("group", 1), 3, 2))
    feeds = {"x": x, "w": w, "zx": ints(dt, ()), "zw": ints(dt, (6,))}
    node = helper.make_node("ConvInteger", list(feeds), ["y"], **attrs)
    check(tmp_path, model_of(node, feeds, opset=10), feeds, isa)


@pytest.mark.parametrize("attrs", CONVS, ids=str)
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_conv(tmp_path, isa, attrs, dt):
    x, w = ints(dt, (1, 4, 6, 7)), ints(dt, (6, 4 // attrs.get("group", 1), 3, 2))
    feeds = {"x": x, "x_scale": np.float32(0.05), "x_zp": ints(dt, ()), "w": w,
             "w_scale": RNG.uniform(0.001, 0.02, 6).astype(np.float32),
             "w_zp": np.zeros(6, dt), "y_scale": np.float32(0.11), "y_zp": ints(dt, ()),
             "B": ints(np.int32, (6,), -500, 500)}
    node = helper.make_node("QLinearConv", list(feeds), ["y"], **attrs)
    check(tmp_path, model_of(node, feeds, opset=10), feeds, isa)


def test_conv_integer_1d(tmp_path, isa):
    feeds = {"x": ints(np.uint8, (2, 3, 11)), "w": ints(np.uint8, (4, 3, 3))}
    node = helper.make_node("ConvInteger", list(feeds), ["y"], pads=[2, 1], strides=[2])
    check(tmp_path, model_of(node, feeds, opset=10), feeds, isa)


def test_qlinear_conv_w_scale_count_mismatch(tmp_path):
    feeds = {"x": ints(np.uint8, (1, 2, 5, 5)), "x_scale": np.float32(0.05),
             "x_zp": np.uint8(0), "w": ints(np.uint8, (3, 2, 3, 3)),
             "w_scale": np.ones(2, np.float32), "w_zp": np.uint8(0),
             "y_scale": np.float32(1), "y_zp": np.uint8(0)}
    node = helper.make_node("QLinearConv", list(feeds), ["y"])
    with pytest.raises(pplpy.ShapeError, match="w_scale"):
        load_error(tmp_path, model_of(node, feeds, opset=10))


# -- DynamicQuantizeLinear ---------------------------------------------------------------------


@pytest.mark.parametrize("lo, hi", [(-3.0, 5.0), (0.5, 4.0), (-6.0, -1.0), (0.0, 0.0)])
def test_dynamic_quantize_linear(tmp_path, isa, lo, hi):
    feeds = {"x": RNG.uniform(lo, hi, (3, 70000 if lo == -3.0 else 17)).astype(np.float32)}
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    check(tmp_path, model_of(node, feeds, opset=11), feeds, isa)


@pytest.mark.parametrize("x, scale, zp, y", [
    ([np.nan] * 4, np.nan, 255, [0] * 4),                    # all NaN: as the reference
    ([np.nan] * 96, np.nan, 255, [0] * 96),                  # (ONNX Runtime alike here)
    ([0.5, -np.inf, 1.0, 2.0], np.inf, 255, [255, 0, 255, 255]),  # zero point inf / inf
    ([0.5, -1.0, np.nan, 2.0], 3 / 255, 85, [127, 0, 0, 255]),  # NaN among numbers: passed
])                                                                # over, as ONNX Runtime
def test_dynamic_quantize_linear_of_non_finite_values(tmp_path, x, scale, zp, y):
    """An all-NaN activation made scale 1/255 and zero point 0, so a dynamically quantized
    model turned a NaN input into finite zeros; -inf made the zero point 0, not 255."""
    feeds = {"x": np.array(x, np.float32)}
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    model = model_of(node, feeds, opset=11)
    onnx.save(model, tmp_path / "m.onnx")
    got = pplpy.load(str(tmp_path / "m.onnx")).run(feeds)
    np.testing.assert_allclose(got["scale"], np.float32(scale), rtol=1e-6)
    assert int(got["zp"]) == zp
    np.testing.assert_array_equal(got["y"], y)


# -- Unique ------------------------------------------------------------------------------------


# Unsorted only for axis None and 0: onnx.reference takes unsorted slices along axis 0
# whatever the axis.  (pplpy takes them along the axis.)
@pytest.mark.parametrize("axis, is_sorted", [(None, 1), (0, 1), (1, 1), (-1, 1), (None, 0),
                                             (0, 0)])
@pytest.mark.parametrize("dt", [np.float32, np.int64, np.uint8])
def test_unique(tmp_path, isa, axis, is_sorted, dt):
    x = RNG.integers(0, 3, (6, 4)).astype(dt)
    x[3] = x[1]
    if axis is None and not is_sorted:  # (onnx.reference handles only 1-D input there)
        x = x.reshape(-1)
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    check(tmp_path, model_of(node, {"x": x}, opset=11), {"x": x}, isa)


def test_unique_new_values_make_new_plans(tmp_path):
    """x is fed: each value gets its own plan, with its own output sizes."""
    x = np.array([3, 1, 3, 2], np.int64)
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], sorted=0)
    model = model_of(node, {"x": x}, opset=11)
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(str(tmp_path / "m.onnx"))
    for value in ([3, 1, 3, 2], [5, 5, 5, 5], [4, 3, 2, 1]):
        feeds = {"x": np.array(value, np.int64)}
        got = rt.run(feeds)
        for name, want in zip(got, ReferenceEvaluator(model).run(None, feeds)):
            np.testing.assert_array_equal(got[name], want)


def test_unique_of_a_value_computed_at_run_time(tmp_path):
    """Unique's output length is known once the run has computed its input (a staged
    plan); each new input value plans the rest again."""
    relu = helper.make_node("Relu", ["x"], ["r"])
    unique = helper.make_node("Unique", ["r"], ["y"])
    graph = helper.make_graph([relu, unique], "g", [vi("x", np.float32, (4,))],
                              [vi("y", np.float32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(str(tmp_path / "m.onnx"))
    for x in ([1, 1, 1, 1], [3, -1, 2, 3], [-1, -2, -3, -4]):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(rt.run({"x": x})["y"], np.unique(np.maximum(x, 0)))


# -- TfIdfVectorizer ---------------------------------------------------------------------------

POOL = dict(ngram_counts=[0, 4, 10], ngram_indexes=list(range(4)) + [6, 4, 5, 7, 8],
            pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 3, 3, 5, 5])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams, skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 3), ((2, 3), 2),
                                         ((1, 3), 1)], ids=str)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape, dt", [((12,), np.int32), ((3, 8), np.int64)], ids=str)
def test_tfidf(tmp_path, isa, mode, grams, skip, weighted, shape, dt):
    x = RNG.integers(2, 9, shape).astype(dt)
    attrs = dict(POOL, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1],
                 max_skip_count=skip)
    if weighted:
        attrs["weights"] = list(RNG.uniform(0.5, 2.0, 9))
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    reference = None
    if mode != "TF" and not weighted:
        # onnx.reference fails on IDF and TFIDF without weights; weights of 1 mean the same.
        ones = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs, weights=[1.0] * 9)
        reference = model_of(ones, {"x": x}, opset=9)
    check(tmp_path, model_of(node, {"x": x}, opset=9), {"x": x}, isa, exact=False,
          reference=reference)


def test_tfidf_string_pool_is_unsupported(tmp_path):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                            max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                            ngram_indexes=[0, 1], pool_strings=["a", "b"])
    with pytest.raises(pplpy.UnsupportedOpError, match="pool_strings"):
        load_error(tmp_path, model_of(node, {"x": np.zeros(3, np.int64)}, opset=9))


# -- integer Add, Sub, Mul, Div ----------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("shapes", [((5, 7), (5, 7)), ((3, 1, 4), (6, 1)), ((9,), ())],
                         ids=str)
def test_integer_arithmetic_wraps(tmp_path, isa, op_type, dt, shapes):
    a = ints(dt, shapes[0])
    b = ints(dt, shapes[1])
    if op_type == "Div":  # the reference divides in float64, exact below 2**53
        info = np.iinfo(dt)
        a = ints(dt, shapes[0], max(info.min, -1000), min(info.max, 1000))
        b = ints(dt, shapes[1], 1, 50)
    feeds = {"a": a, "b": b}
    node = helper.make_node(op_type, ["a", "b"], ["y"])
    check(tmp_path, model_of(node, feeds, opset=14), feeds, isa)
