"""BatchNormalization, LRN, Softmax and the pools through pplpy.load: compiled steps (never a
PythonStep), right against onnx.reference (or the spec's formula where it is wrong), and the
same bytes with a team of 1 and of 2 threads, in NDARRAY and N16CX, under every ISA tier.

As in test_compute_ops, an identity 1x1 Conv in front puts the op in N16CX; the channel
count (19) is not a multiple of 16, so the padding lanes matter.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(5)
C = 19
SMALL = (2, C, 9, 7)      # against the reference
LARGE = (2, C, 48, 48)    # 87,552 floats: parallel steps, for the 1- vs 2-thread check


def vec(positive=False):
    v = RNG.standard_normal(C).astype(np.float32)
    return np.abs(v) + 0.5 if positive else v


BN_PARAMS = {"s": vec(), "b": vec(), "m": vec(), "v": vec(positive=True)}


def node(op_type, inputs=("t",), outputs=("y",), **attrs):
    return helper.make_node(op_type, list(inputs), list(outputs), **attrs)


# name -> (nodes reading "t", initializers, graph inputs besides x, opset, can run blocked,
#          reference: "onnx" or a function of x)
CASES = {
    "batch_norm": ([node("BatchNormalization", ["t", "s", "b", "m", "v"], epsilon=1e-3)],
                   BN_PARAMS, {}, 17, True, "onnx"),
    # Parameters fed at run time: the step folds them itself.
    "batch_norm_fed_params": ([node("BatchNormalization", ["t", "s", "b", "m", "v"])],
                              {}, BN_PARAMS, 17, True, "onnx"),
    "lrn": ([node("LRN", size=3, alpha=0.01, beta=0.75, bias=1.0)], {}, {}, 17, False, "lrn"),
    "softmax_axis_1": ([node("Softmax", axis=1)], {}, {}, 13, False, "onnx"),
    "softmax_axis_2": ([node("Softmax", axis=2)], {}, {}, 13, False, "onnx"),
    "softmax_last": ([node("Softmax", axis=-1)], {}, {}, 13, False, "onnx"),
    # onnx.reference (1.23) applies opset 13's one-axis softmax here.
    "softmax_coerced": ([node("Softmax", axis=2)], {}, {}, 11, False, "coerced"),
    "max_pool": ([node("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                       ceil_mode=1)], {}, {}, 17, True, "onnx"),
    # ceil_mode: a window wider than the input by less than a stride has one position.
    "max_pool_window_past_input": ([node("MaxPool", kernel_shape=[2, 9], strides=[2, 3],
                                         ceil_mode=1)], {}, {}, 17, True, "onnx"),
    # (kernel [11, 2], strides [3, 2]: onnx.reference 1.23 averages a wrong window there;
    # pplpy and ONNX Runtime give the mean of the 9 x 2 cells)
    "average_pool_window_past_input": ([node("AveragePool", kernel_shape=[10, 1],
                                             strides=[3, 1], ceil_mode=1)], {}, {}, 17, True,
                                       "onnx"),
    "max_pool_dilated": ([node("MaxPool", kernel_shape=[2, 3], strides=[1, 2],
                               dilations=[2, 1], pads=[1, 1, 1, 1])], {}, {}, 17, True, "onnx"),
    "max_pool_indices": ([node("MaxPool", outputs=["y", "i"], kernel_shape=[2, 2],
                               strides=[2, 2], storage_order=1)], {}, {}, 17, False, "onnx"),
    "average_pool": ([node("AveragePool", kernel_shape=[3, 2], strides=[2, 1],
                           pads=[1, 1, 0, 1], count_include_pad=1)], {}, {}, 17, True, "onnx"),
    "average_pool_same": ([node("AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                                auto_pad="SAME_UPPER")], {}, {}, 17, True, "onnx"),
    "global_average_pool": ([node("GlobalAveragePool")], {}, {}, 17, True, "onnx"),
}


def lrn_formula(x, size=3, alpha=0.01, beta=0.75, bias=1.0):
    # onnx.reference's LRN is right only when N == C.
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = x.astype(np.float64) ** 2
    sums = np.stack([sq[:, max(0, i - lo): i + hi + 1].sum(1) for i in range(x.shape[1])], 1)
    return (x / (bias + alpha / size * sums) ** beta).astype(np.float32)


def coerced_softmax(x, axis=2):
    """Softmax before opset 13: over the 2-D coercion [prod(dims[:axis]), prod(dims[axis:])]."""
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(rows - rows.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).reshape(x.shape)


def build(name, blocked, x_shape):
    nodes, inits, fed, opset, _, _ = CASES[name]
    inits = dict(inits)
    if blocked:
        inits["eye"] = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
        front = helper.make_node("Conv", ["x", "eye"], ["t"])
    else:
        front = helper.make_node("Identity", ["x"], ["t"])
    vi = helper.make_tensor_value_info
    inputs = [vi("x", TensorProto.FLOAT, list(x_shape))]
    inputs += [vi(k, TensorProto.FLOAT, list(v.shape)) for k, v in fed.items()]
    outputs = [vi(o, TensorProto.INT64 if o == "i" else TensorProto.FLOAT, None)
               for o in nodes[-1].output]
    graph = helper.make_graph([front] + nodes, name, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, tmp_path, isa, num_threads, feeds):
    path = tmp_path / f"model_{num_threads}.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=num_threads, max_isa=isa, fusion=False)
    outputs = rt.run(feeds)
    (plan,) = rt._plans.plans()
    return rt, outputs, plan.plan.steps


PARAMS = [(name, blocked) for name, case in CASES.items()
          for blocked in ((False, True) if case[4] else (False,))]
IDS = [f"{n}-{'n16cx' if b else 'ndarray'}" for n, b in PARAMS]


@pytest.mark.parametrize("name,blocked", PARAMS, ids=IDS)
def test_op_is_compiled_and_right(name, blocked, isa, tmp_path):
    model = build(name, blocked, SMALL)
    feeds = {"x": RNG.standard_normal(SMALL).astype(np.float32), **CASES[name][2]}
    rt, got, steps = run(model, tmp_path, isa, 2, feeds)
    op_type = model.graph.node[1].op_type
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    (op_step,) = [s for s in steps if s.label == op_node.name]
    assert not isinstance(op_step, PythonStep)
    want_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    assert rt.formats[op_node.outputs[0]] is want_format
    reference = CASES[name][5]
    if reference == "onnx":
        want = ReferenceEvaluator(model).run(None, feeds)
    elif reference == "coerced":
        want = [coerced_softmax(feeds["x"])]
    else:
        want = [lrn_formula(feeds["x"])]
    for name_out, w in zip(model.graph.output, want):
        np.testing.assert_allclose(got[name_out.name], w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,blocked", PARAMS, ids=IDS)
def test_one_and_two_threads_give_the_same_bytes(name, blocked, isa, tmp_path):
    model = build(name, blocked, LARGE)
    feeds = {"x": RNG.standard_normal(LARGE).astype(np.float32), **CASES[name][2]}
    _, one, _ = run(model, tmp_path, isa, 1, feeds)
    rt, two, steps = run(model, tmp_path, isa, 2, feeds)
    op_type = model.graph.node[1].op_type
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == op_type]
    (op_step,) = [s for s in steps if s.label == op_node.name]
    assert op_step.parallel, "expected a parallel step at this size"
    for key in one:
        assert one[key].tobytes() == two[key].tobytes(), key


@pytest.mark.parametrize("rank", [1, 3])
@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool", "GlobalAveragePool"])
def test_1d_and_3d_pools(op_type, rank, isa, tmp_path):
    x_shape = (2, C) + {1: (23,), 3: (5, 6, 7)}[rank]
    attrs = {}
    if op_type != "GlobalAveragePool":
        attrs = dict(kernel_shape=[3] * rank, strides=[2] * rank, pads=[1] * (2 * rank))
        if op_type == "AveragePool":
            attrs["ceil_mode"] = 1
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    _, got, steps = run(model, tmp_path, isa, 2, feeds)
    assert not [s for s in steps if isinstance(s, PythonStep)], steps  # the pool alone
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-6)


def test_constant_batch_norm_params_are_packed(tmp_path):
    model = build("batch_norm", True, SMALL)
    path = tmp_path / "bn.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=1, fusion=False)
    kernels = [k for k in rt.result.kernels.values() if type(k).__name__.startswith("Batch")]
    assert [k.packed_inputs for k in kernels] == [(1, 2, 3, 4)]
    assert len(kernels[0].scale) == 32  # padded to whole 16-channel blocks
