"""The reductions, ArgMax/ArgMin, CumSum and CumProd through pplpy.load against
onnx.reference, at opsets on both sides of each change (axes as attribute, then as an input:
constant, fed or absent), with keepdims, noop_with_empty_axes, negative and empty axes, scalars
and empty tensors, under every ISA cap and on 1 and 2 threads; the scans in float64 too; N16CX
for the squeeze-excite form (ReduceMean over H, W with keepdims after a Conv), checked through
``rt.formats``."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.optimizer import DEFAULT_PIPELINE
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(23)
FLOAT, INT32, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
DOUBLE = TensorProto.DOUBLE
NP = {FLOAT: np.float32, INT32: np.int32, INT64: np.int64, BOOL: np.bool_, DOUBLE: np.float64}

# op -> first opset with axes as an input
REDUCE_OPS = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18,
              "ReduceProd": 18, "ReduceL1": 18, "ReduceL2": 18, "ReduceSumSquare": 18,
              "ReduceLogSum": 18, "ReduceLogSumExp": 18}


def _data(op, shape, elem=FLOAT):
    if elem == BOOL:
        return RNG.random(shape) < 0.5
    if elem != FLOAT:
        return RNG.integers(-3 if op == "ReduceProd" else -100, 4 if op == "ReduceProd" else 100,
                            shape).astype(NP[elem])
    x = RNG.standard_normal(shape).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + np.float32(0.1)
    if op == "ReduceProd":
        x = np.float32(1) + np.float32(0.1) * x
    return x


def reduce_model(op, opset, shape, axes, keepdims=1, noop=None, axes_form="attribute",
                 elem=FLOAT):
    """axes_form: "attribute" (before the change), "constant", "fed" or "absent" (after)."""
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    inits = []
    names = ["x"]
    if axes_form == "attribute":
        if axes is not None:
            attrs["axes"] = list(axes)
    elif axes_form == "constant":
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        names.append("axes")
    elif axes_form == "fed":
        inputs.append(helper.make_tensor_value_info("axes", INT64, ["n_axes"]))
        names.append("axes")
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "reduce", inputs,
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _log_sum_exp_oracle(model, feeds):
    """ReduceLogSumExp by the spec, where onnx.reference (1.23) fails on a scalar result."""
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = feeds["x"].astype(np.float64)
    axes = attrs.get("axes", feeds.get("axes"))
    axes = None if axes is None or len(axes) == 0 else tuple(int(a) for a in axes)
    with np.errstate(all="ignore"):
        y = np.log(np.sum(np.exp(x), axis=axes, keepdims=bool(attrs.get("keepdims", 1))))
    return np.asarray(y, np.float32)


def _check(model, feeds, isa, threads, tmp_path, rtol=1e-5, atol=1e-5):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=threads)
    got = rt.run(feeds)["y"]
    try:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    except TypeError:
        if model.graph.node[0].op_type != "ReduceLogSumExp":
            raise
        want = _log_sum_exp_oracle(model, feeds)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return rt


# (shape, axes, keepdims): adjacent, non-adjacent, negative, all (None), scalar, empty.
FORMS = [((3, 4, 5), [1], 1), ((3, 4, 5), [0, 2], 0), ((2, 3, 4, 5), [-1, 1], 1),
         ((2, 3, 4, 5), None, 0), ((2, 3, 4, 5), None, 1), ((), None, 0), ((6,), [0], 0),
         ((2, 65, 33, 17), [0, 2], 0), ((300, 257), [-1], 1), ((3, 0, 4), [1], 0),
         ((3, 0, 4), [0], 1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(REDUCE_OPS))
@pytest.mark.parametrize("threads", [1, 2])
def test_reductions_with_axes_as_attribute(op, isa, threads, tmp_path):
    opset = 11 if op == "ReduceSum" else 17
    for shape, axes, keepdims in FORMS:
        if op == "ReduceLogSum" and 0 in shape:
            continue  # the reference's special case returns -inf; checked in the impl tests
        x = _data(op, shape)
        model = reduce_model(op, opset, shape, axes, keepdims)
        _check(model, {"x": x}, isa, threads, tmp_path)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(REDUCE_OPS))
@pytest.mark.parametrize("axes_form", ["constant", "fed"])
def test_reductions_with_axes_as_input(op, isa, axes_form, tmp_path):
    opset = 28 if op in ("ReduceLogSum", "ReduceLogSumExp") else REDUCE_OPS[op]
    for threads in (1, 2):
        for shape, axes, keepdims in FORMS:
            if axes is None or (op == "ReduceLogSum" and 0 in shape):
                continue
            x = _data(op, shape)
            model = reduce_model(op, opset, shape, axes, keepdims, axes_form=axes_form)
            feeds = {"x": x}
            if axes_form == "fed":
                feeds["axes"] = np.asarray(axes, np.int64)
            _check(model, feeds, isa, threads, tmp_path)


@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_absent_and_empty_axes_with_and_without_noop(op, tmp_path):
    opset = REDUCE_OPS[op]
    shape = (3, 4, 5)
    x = _data(op, shape)
    for noop in (0, 1):
        _check(reduce_model(op, opset, shape, None, 1, noop=noop, axes_form="absent"),
               {"x": x}, None, 1, tmp_path)
        _check(reduce_model(op, opset, shape, [], 0, noop=noop, axes_form="fed"),
               {"x": x, "axes": np.zeros(0, np.int64)}, None, 1, tmp_path)


def test_fed_axes_change_between_runs(tmp_path):
    """keepdims=0 with equal dims: only the axes' value tells which axis goes."""
    model = reduce_model("ReduceSum", 13, (4, 4, 4), [0], 0, axes_form="fed")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path)
    ref = ReferenceEvaluator(model)
    x = _data("ReduceSum", (4, 4, 4))
    for axes in ([0], [1], [2], [-1, 0], [0], [1, 2]):
        feeds = {"x": x, "axes": np.asarray(axes, np.int64)}
        np.testing.assert_allclose(rt.run(feeds)["y"], ref.run(None, feeds)[0], rtol=1e-5)


@pytest.mark.parametrize("op,elem", [(op, e) for op in ("ReduceSum", "ReduceMax", "ReduceMin",
                                                       "ReduceProd") for e in (INT32, INT64)]
                         + [("ReduceMax", BOOL), ("ReduceMin", BOOL)])
@pytest.mark.parametrize("threads", [1, 2])
def test_integer_and_bool_reductions(op, elem, threads, tmp_path):
    opset = 20 if elem == BOOL else REDUCE_OPS[op]
    for shape, axes, keepdims in FORMS:
        if axes is None:
            continue
        x = _data(op, shape, elem)
        model = reduce_model(op, opset, shape, axes, keepdims, axes_form="constant",
                             elem=elem)
        _check(model, {"x": x}, None, threads, tmp_path)


def test_unsupported_types_raise_at_load(tmp_path):
    model = reduce_model("ReduceMean", 18, (3, 4), [1], axes_form="constant", elem=INT32)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(pplpy.UnsupportedOpError, match="ReduceMean"):
        pplpy.load(path)


def test_bad_axes_name_the_node(tmp_path):
    model = reduce_model("ReduceSum", 13, (3, 4), [2], axes_form="constant")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(pplpy.PplError, match="out of range"):
        pplpy.load(path)


# -- N16CX: the squeeze-excite form ------------------------------------------------------

C = 19


def _after_conv(op, opset, axes, keepdims):
    eye = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
    attrs = {"keepdims": keepdims}
    inits = [numpy_helper.from_array(eye, "eye")]
    inputs = ["t"]
    if opset >= REDUCE_OPS[op]:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        inputs.append("axes")
    else:
        attrs["axes"] = axes
    nodes = [helper.make_node("Conv", ["x", "eye"], ["t"]),
             helper.make_node(op, inputs, ["r"], **attrs),
             helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", FLOAT, [2, C, 9, 7])],
        [helper.make_tensor_value_info("y", FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2",
                                "ReduceLogSumExp", "ReduceLogSum"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims,blocked", [([2, 3], 1, True), ([-1], 1, True),
                                                   ([0, 2], 1, True), ([1], 1, False),
                                                   ([2, 3], 0, False)])
def test_spatial_reductions_stay_blocked(op, opset, axes, keepdims, blocked, isa, tmp_path):
    model = _after_conv(op, opset, axes, keepdims)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    for threads in (1, 2):
        # Without the pass that makes ReduceMean over H and W a GlobalAveragePool.
        passes = [e for e in DEFAULT_PIPELINE if e.pass_id != "reduce_mean_to_global_pool"]
        rt = pplpy.load(path, max_isa=isa, num_threads=threads, fusion=False, passes=passes)
        (node,) = [n for n in rt.graph.nodes if n.op_type == op]
        blocked_here = blocked and op != "ReduceLogSum"
        want_format = DataFormat.N16CX if blocked_here else DataFormat.NDARRAY
        assert rt.formats[node.outputs[0]] is want_format
        x = RNG.standard_normal((2, C, 9, 7)).astype(np.float32)
        if op == "ReduceLogSum":
            x = np.abs(x) + np.float32(0.1)
        got = rt.run({"x": x})["y"]
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- ArgMax / ArgMin ---------------------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("elem", [FLOAT, INT32, INT64])
def test_arg_reductions(op, opset, elem, isa, tmp_path):
    for threads in (1, 2):
        for shape in [(5,), (3, 4), (2, 300, 7), (70, 1100)]:
            for axis in range(-len(shape), len(shape)):
                for keepdims in (0, 1):
                    for last in ((0, 1) if opset >= 12 else (None,)):
                        attrs = {"axis": axis, "keepdims": keepdims}
                        if last is not None:
                            attrs["select_last_index"] = last
                        node = helper.make_node(op, ["x"], ["y"], **attrs)
                        graph = helper.make_graph(
                            [node], "arg", [helper.make_tensor_value_info("x", elem, shape)],
                            [helper.make_tensor_value_info("y", INT64, None)])
                        model = helper.make_model(
                            graph, opset_imports=[helper.make_opsetid("", opset)])
                        x = RNG.integers(-5, 5, shape).astype(NP[elem])  # ties
                        _check(model, {"x": x}, isa, threads, tmp_path)


# -- CumSum and CumProd --------------------------------------------------------------------


def _scan_data(op, shape, elem):
    """Values whose running products stay representable (exact for the integer types)."""
    if op == "CumProd":
        if elem in (FLOAT, DOUBLE):
            return (1 + 0.05 * RNG.standard_normal(shape)).astype(NP[elem])
        return RNG.choice(np.array([-1, 1, 1, 1, 0], NP[elem]), shape)
    if elem in (FLOAT, DOUBLE):
        return RNG.standard_normal(shape).astype(NP[elem])
    return RNG.integers(-9, 9, shape).astype(NP[elem])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("elem", [FLOAT, DOUBLE, INT32, INT64])
@pytest.mark.parametrize("axis_form", ["constant", "fed32", "fed64"])
def test_scan(op, opset, elem, axis_form, isa, tmp_path):
    for threads in (1, 2):
        for shape in [(7,), (3, 4), (2, 300, 130)]:
            for axis in range(-len(shape), len(shape)):
                for exclusive in (0, 1):
                    for reverse in (0, 1):
                        axis_type = INT32 if axis_form == "fed32" else INT64
                        inputs = [helper.make_tensor_value_info("x", elem, shape)]
                        inits = []
                        if axis_form == "constant":
                            inits.append(numpy_helper.from_array(np.int64(axis), "axis"))
                        else:
                            inputs.append(helper.make_tensor_value_info("axis", axis_type, []))
                        node = helper.make_node(op, ["x", "axis"], ["y"],
                                                exclusive=exclusive, reverse=reverse)
                        graph = helper.make_graph(
                            [node], "scan", inputs,
                            [helper.make_tensor_value_info("y", elem, None)], inits)
                        model = helper.make_model(
                            graph, opset_imports=[helper.make_opsetid("", opset)])
                        feeds = {"x": _scan_data(op, shape, elem)}
                        if axis_form != "constant":
                            feeds["axis"] = np.asarray(axis, NP[axis_type])
                        _check(model, feeds, isa, threads, tmp_path, rtol=1e-4, atol=1e-4)


# -- ReduceMax / ReduceMin propagate NaN (numpy, onnx's ReferenceEvaluator) ----------------


def nan_reduce_model(op, axes, shape, conv=False):
    nodes, inits, src = [], [numpy_helper.from_array(np.array(axes, np.int64), "a")], "x"
    if conv:
        c = shape[1]
        # depthwise identity: a NaN stays in its channel (a dense eye would spread it, 0 * NaN)
        inits.append(numpy_helper.from_array(np.ones((c, 1, 1, 1), np.float32), "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["t"], group=c))
        src = "t"
    nodes.append(helper.make_node(op, [src, "a"], ["y"], keepdims=1))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,conv", [([-1], False), ([1], False), ([0, 2], False), ([1], True),
                                       ([2, 3], True), ([1, 2, 3], True)])
def test_reduce_max_min_propagate_nan(isa, num_threads, op, axes, conv):
    rng = np.random.default_rng(3)
    shape = (2, 20, 5, 37) if conv else (3, 37, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.02] = np.nan
    x[0, 0] = np.nan                       # a whole row / plane of NaN
    rt = pplpy.load(nan_reduce_model(op, axes, shape, conv).SerializeToString(), max_isa=isa,
                    num_threads=num_threads)
    want = (np.max if op == "ReduceMax" else np.min)(x, axis=tuple(axes), keepdims=True)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], want)
