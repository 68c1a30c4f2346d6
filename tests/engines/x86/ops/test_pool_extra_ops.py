"""GlobalMaxPool, LpPool and MaxUnpool through pplpy.load: compiled steps, right against
onnx.reference (where it is wrong, the spec's formula: onnx.reference 1.23's LpPool rescales
by kernel size over the in-bounds count with pads, its GlobalMaxPool reduces the wrong axes
unless the input is 4-D), NDARRAY and, after a Conv, N16CX, every ISA
tier, 1 vs 2 threads.  C = 19 is not a multiple of 16, so padding lanes matter."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(31)
C = 19


def lp_formula(x, out, kernel, strides, pads_begin, dilations, p):
    """The spec: (sum over the window of |x|^p)^(1/p), padding cells 0."""
    rank = x.ndim - 2
    y = np.zeros(x.shape[:2] + tuple(out))
    ax = np.abs(x.astype(np.float64)) ** p
    for o in np.ndindex(*out):
        for k in np.ndindex(*kernel):
            i = [o[a] * strides[a] - pads_begin[a] + k[a] * dilations[a] for a in range(rank)]
            if all(0 <= i[a] < x.shape[2 + a] for a in range(rank)):
                y[(slice(None), slice(None)) + o] += ax[(slice(None), slice(None)) + tuple(i)]
    return (y ** (1.0 / p)).astype(np.float32)


# name -> (op, attributes, opset, x spatial, formula args or None for onnx.reference)
CASES = {
    "global_max_2d": ("GlobalMaxPool", {}, 17, (9, 7), None),
    "global_max_1d": ("GlobalMaxPool", {}, 1, (23,), "max"),
    "global_max_3d": ("GlobalMaxPool", {}, 22, (3, 4, 5), "max"),
    "lp_default": ("LpPool", dict(kernel_shape=[3, 3]), 18, (9, 7), None),
    "lp_opset1_float_p": ("LpPool", dict(kernel_shape=[2, 2], p=3.0), 1, (9, 7), None),
    "lp_opset2_p1": ("LpPool", dict(kernel_shape=[2, 3], strides=[2, 1], p=1), 2, (9, 7),
                     None),
    "lp_opset11_p3": ("LpPool", dict(kernel_shape=[3, 2], strides=[2, 2], p=3), 11, (9, 7),
                      None),
    "lp_dilations": ("LpPool", dict(kernel_shape=[2, 2], dilations=[2, 2]), 18, (9, 7), None),
    "lp_pads": ("LpPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0]), 18,
                (9, 7), ((5, 3), (3, 3), (2, 2), (1, 1), (1, 1))),
    "lp_ceil": ("LpPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 18, (8, 8),
                ((4, 4), (3, 3), (2, 2), (0, 0), (1, 1))),
    "lp_same_upper": ("LpPool", dict(kernel_shape=[3, 3], strides=[2, 2],
                                     auto_pad="SAME_UPPER"), 18, (9, 7),
                      ((5, 4), (3, 3), (2, 2), (1, 1), (1, 1))),
    "lp_1d": ("LpPool", dict(kernel_shape=[3], strides=[2]), 18, (23,), None),
    "lp_3d": ("LpPool", dict(kernel_shape=[2, 2, 2]), 18, (3, 4, 5), None),
}


def build(name, blocked, batch=2, spatial=None):
    op_type, attrs, opset, sp, _ = CASES[name]
    x_shape = (batch, C) + (spatial or sp)
    inits = {}
    if blocked:
        inits["eye"] = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
        front = helper.make_node("Conv", ["x", "eye"], ["t"])
    else:
        front = helper.make_node("Identity", ["x"], ["t"])
    graph = helper.make_graph(
        [front, helper.make_node(op_type, ["t"], ["y"], **attrs)], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, {"x": RNG.standard_normal(x_shape).astype(np.float32)}


def run(model, tmp_path, isa, num_threads, feeds):
    path = tmp_path / f"model_{num_threads}.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=num_threads, max_isa=isa, fusion=False)
    outputs = rt.run(feeds)
    (plan,) = rt._plans.plans()
    return rt, outputs, plan.plan.steps


def want_of(name, model, feeds):
    formula = CASES[name][4]
    if formula is None:
        return ReferenceEvaluator(model).run(None, feeds)[0]
    if formula == "max":
        x = feeds["x"]
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
    p = CASES[name][1].get("p", 2)
    return lp_formula(feeds["x"], *formula, p)


PARAMS = [(name, blocked) for name, case in CASES.items()
          for blocked in ((False, True) if len(case[3]) == 2 else (False,))]
IDS = [f"{n}-{'n16cx' if b else 'ndarray'}" for n, b in PARAMS]


@pytest.mark.parametrize("name,blocked", PARAMS, ids=IDS)
def test_pool_is_compiled_and_right(name, blocked, isa, tmp_path):
    model, feeds = build(name, blocked)
    rt, got, steps = run(model, tmp_path, isa, 2, feeds)
    op_type = CASES[name][0]
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    (op_step,) = [s for s in steps if s.label == op_node.name]
    assert not isinstance(op_step, PythonStep)
    want_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    assert rt.formats[op_node.outputs[0]] is want_format
    np.testing.assert_allclose(got["y"], want_of(name, model, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,blocked", [("lp_pads", False), ("lp_pads", True),
                                          ("lp_opset11_p3", True)])
def test_one_and_two_threads_give_the_same_bytes(name, blocked, isa, tmp_path):
    model, feeds = build(name, blocked, spatial=(48, 48))
    _, one, _ = run(model, tmp_path, isa, 1, feeds)
    rt, two, steps = run(model, tmp_path, isa, 2, feeds)
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == "LpPool"]
    (op_step,) = [s for s in steps if s.label == op_node.name]
    assert op_step.parallel
    assert one["y"].tobytes() == two["y"].tobytes()


def test_lppool_rejects_p_zero(tmp_path):
    model, _ = build("lp_default", False)
    model.graph.node[1].attribute.append(helper.make_attribute("p", 0))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(pplpy.PplError, match="p > 0"):
        pplpy.load(path)


# --- MaxUnpool ----------------------------------------------------------------------------

def unpool_model(x_shape, pool, shape_input, opset):
    """MaxPool -> MaxUnpool of its values and indices (output_shape: None, "const", "fed")."""
    vi = helper.make_tensor_value_info
    inputs = ["v", "i"]
    inits = []
    graph_inputs = [vi("x", TensorProto.FLOAT, list(x_shape))]
    if shape_input == "const":
        inits.append(numpy_helper.from_array(np.array(pool["out"], np.int64), "shape"))
        inputs.append("shape")
    elif shape_input == "fed":
        graph_inputs.append(vi("shape", TensorProto.INT64, [len(x_shape)]))
        inputs.append("shape")
    attrs = {k: v for k, v in pool.items() if k != "out"}
    nodes = [helper.make_node("MaxPool", ["x"], ["v", "i"], **attrs),
             helper.make_node("MaxUnpool", inputs, ["y"], **attrs)]
    graph = helper.make_graph(nodes, "unpool", graph_inputs, [vi("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("shape_input", [None, "const", "fed"])
@pytest.mark.parametrize("opset", [9, 11, 22])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_maxunpool_after_maxpool(shape_input, opset, rank, isa, tmp_path):
    sp = {1: (10,), 2: (8, 6), 3: (4, 6, 4)}[rank]  # even: indices address the unpooled shape
    x_shape = (2, C) + sp
    pool = dict(kernel_shape=[2] * rank, strides=[2] * rank)
    inferred = tuple((n // 2 - 1) * 2 + 2 for n in sp)
    pool["out"] = list(x_shape[:2]) + [n + 1 for n in inferred]
    model = unpool_model(x_shape, pool, shape_input, opset)
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    if shape_input == "fed":
        feeds["shape"] = np.array(pool["out"], np.int64)
    _, got, steps = run(model, tmp_path, isa, 2, feeds)
    assert not [s for s in steps if isinstance(s, PythonStep)]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got["y"].shape == want.shape
    np.testing.assert_array_equal(got["y"], want)


def test_maxunpool_checks_its_inputs(tmp_path):
    x_shape = (1, 2, 4, 4)
    pool = dict(kernel_shape=[2, 2], strides=[2, 2], out=[1, 2, 3, 3])  # too small
    path = tmp_path / "m.onnx"
    onnx.save(unpool_model(x_shape, pool, "const", 11), path)
    with pytest.raises(pplpy.PplError, match="smaller"):
        pplpy.load(path)
