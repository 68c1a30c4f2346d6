"""The first conv of a depthwise net (MobileNet, EfficientNet, ShuffleNet: RGB in, 3x3
stride 2) reads its NDARRAY input as NCHW planes instead of behind a Reorder to N16CX
(ops/onnx/conv.py, "x_planar" of impls/_conv_fp32.pxi): checked against onnx.reference on
every ISA tier, that no Reorder is left in front of such a conv, and that every other conv
(16+ channels, groups, an N16CX producer) still reads N16CX."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from impl_variants import variant_fixture
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import run_steps

RNG = np.random.default_rng(23)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def load_and_check(model, feeds, isa, tmp_path, threads=(1, 2)):
    """Runtimes of each team size, after checking their output against the reference and
    their bits against each other; returns the first runtime."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    rts = [pplpy.load(path, max_isa=isa, num_threads=t) for t in threads]
    got = [rt.run(feeds)["y"] for rt in rts]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    for other in got[1:]:
        np.testing.assert_array_equal(other, got[0])
    return rts[0]


def conv_input_format(rt, conv_name):
    node, = [n for n in rt.graph.nodes if n.name == conv_name]
    return rt.graph.values[node.inputs[0]].format


def stem_model(ic, oc, spatial, kernel, attrs, act=None, constant_w=True, batch=1):
    w, b = rand(oc, ic // attrs.get("group", 1), *kernel), rand(oc)
    feeds = {"x": rand(batch, ic, *spatial)}
    inits = [("b", b)]
    if constant_w:
        inits.append(("w", w))
    else:
        feeds["w"] = w
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], name="stem", **attrs)]
    if act == "swish":
        nodes += [helper.make_node("Sigmoid", ["t"], ["s"]),
                  helper.make_node("Mul", ["t", "s"], ["y"])]
    elif act == "relu6":
        nodes.append(helper.make_node("Clip", ["t", "lo", "hi"], ["y"]))
        inits += [("lo", np.float32(0)), ("hi", np.float32(6))]
    else:
        nodes.append(helper.make_node("Identity", ["t"], ["y"]))
    ref = ReferenceEvaluator(helper.make_model(helper.make_graph(
        nodes[:1], "g", [helper.make_tensor_value_info(k, FLOAT, list(v.shape))
                         for k, v in feeds.items()],
        [helper.make_tensor_value_info("t", FLOAT, None)],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits]),
        opset_imports=[helper.make_opsetid("", 13)]))
    out_shape = list(ref.run(None, feeds)[0].shape)
    inputs = [(k, FLOAT, list(v.shape)) for k, v in feeds.items()]
    return make_model(nodes, inputs, [("y", FLOAT, out_shape)], inits), feeds


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("ic,oc,spatial,kernel,attrs", [
    (3, 32, (17, 19), (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # the stem
    (2, 20, (9, 8), (3, 3), {"pads": [0, 1, 2, 1]}),
    (7, 33, (6, 10), (5, 5), {"pads": [2, 2, 2, 2], "dilations": [1, 2]}),
    (15, 16, (5, 7), (1, 1), {}),                                          # a pointwise one
    (3, 24, (23,), (3,), {"strides": [2], "pads": [1, 1]}),                 # 1-D
    (3, 64, (23, 21), (7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),  # ResNet's stem
    (2, 8, (9, 11), (5, 5), {"pads": [2, 1, 2, 3], "dilations": [2, 1]}),
    (1, 40, (103,), (10,), {"strides": [5]}),                # wav2vec2's first conv, 1-D
    (1, 20, (13, 12), (3, 3), {"pads": [1, 1, 1, 1]}),      # a grayscale image
    (1, 17, (9, 14), (5, 3), {"strides": [2, 3], "pads": [2, 0, 1, 2], "dilations": [1, 2]}),
])
@pytest.mark.parametrize("act", [None, "relu6", "swish"])
def test_planar_first_conv(isa, ic, oc, spatial, kernel, attrs, act, tmp_path):
    model, feeds = stem_model(ic, oc, spatial, kernel, attrs, act)
    rt = load_and_check(model, feeds, isa, tmp_path)
    assert conv_input_format(rt, "stem") is DataFormat.NDARRAY
    assert "Reorder" not in [n.op_type for n in rt.graph.nodes[:1]]


@pytest.mark.parametrize("isa", ISAS)
def test_planar_run_time_weight_batch(isa, tmp_path):
    model, feeds = stem_model(3, 40, (12, 13), (3, 3), {"strides": [2, 1], "pads": [1, 0, 1, 2]},
                              "relu6", constant_w=False, batch=2)
    rt = load_and_check(model, feeds, isa, tmp_path, threads=(1, 2, 3))
    assert conv_input_format(rt, "stem") is DataFormat.NDARRAY


def test_one_input_channel_with_a_run_time_weight(tmp_path):
    """W fed at run time with a free output dim: its build-time probe says nothing of the
    runs, which may have one output channel (the depthwise kernel's, which reads N16CX) or
    several; the conv reads N16CX and takes the kernel each run's W asks for."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="stem", pads=[1, 1])], "g",
        [helper.make_tensor_value_info("x", FLOAT, [1, 1, 20]),
         helper.make_tensor_value_info("w", FLOAT, ["O", 1, 3])],
        [helper.make_tensor_value_info("y", FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=1)
    assert conv_input_format(rt, "stem") is DataFormat.N16CX
    x = rand(1, 1, 20)
    for oc in (2, 1, 20):
        feeds = {"x": x, "w": rand(oc, 1, 3)}
        np.testing.assert_allclose(rt.run(feeds)["y"],
                                   ReferenceEvaluator(model).run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ic,oc,group", [(16, 12, 1), (6, 12, 3), (1, 1, 1), (4, 8, 4)])
def test_blocked_convs_stay_n16cx(ic, oc, group, tmp_path):
    """16 channels fill a block; a grouped conv has blocks per group; one input channel
    into one output channel, and a channel multiplier, are the depthwise kernel's: all read
    N16CX."""
    model, feeds = stem_model(ic, oc, (8, 9), (3, 3), {"group": group, "pads": [1, 1, 1, 1]})
    rt = load_and_check(model, feeds, None, tmp_path)
    assert conv_input_format(rt, "stem") is DataFormat.N16CX


@pytest.mark.parametrize("isa", ISAS)
def test_one_input_channel_is_a_dense_conv(isa, tmp_path):
    """One input channel into several outputs (group 1) is a dense conv whose K is the taps,
    fed N16CX by a producer too (not the depthwise kernel with a channel multiplier of
    out_c, which took 38x ONNX Runtime's time on wav2vec2's first conv)."""
    from pplpy.engines.x86.impls.dispatch import load_variant

    conv = load_variant("conv_fp32", isa)
    assert conv.conv_pack_weight(rand(24, 1, 1, 10), 1)["kind"] == "dense"
    assert conv.conv_pack_weight(rand(1, 1, 3, 3), 1)["kind"] == "depthwise"
    assert conv.conv_pack_weight(rand(8, 1, 3, 3), 4)["kind"] == "depthwise"
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "w0"], ["a"], name="first", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["y"], name="second", strides=[2, 1])]
    inits = [("w0", rand(1, 1, 3, 3)), ("w1", rand(24, 1, 4, 3))]
    feeds = {"x": rand(2, 1, 11, 9)}
    model = make_model(nodes, [("x", FLOAT, [2, 1, 11, 9])], [("y", FLOAT, [2, 24, 4, 7])],
                       inits)
    rt = load_and_check(model, feeds, isa, tmp_path, threads=(1, 2, 3))
    assert conv_input_format(rt, "first") is DataFormat.N16CX   # one output: depthwise
    assert conv_input_format(rt, "second") is DataFormat.N16CX  # its producer's format


def test_n16cx_producer_keeps_n16cx(tmp_path):
    """A 3-channel conv fed by another conv reads that conv's N16CX output as it is."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="first"),
             helper.make_node("Conv", ["a", "w1"], ["y"], name="second", pads=[1, 1, 1, 1])]
    inits = [("w0", rand(3, 8, 1, 1)), ("w1", rand(16, 3, 3, 3))]
    feeds = {"x": rand(1, 8, 6, 7)}
    model = make_model(nodes, [("x", FLOAT, [1, 8, 6, 7])], [("y", FLOAT, [1, 16, 6, 7])],
                       inits)
    rt = load_and_check(model, feeds, None, tmp_path)
    assert conv_input_format(rt, "first") is DataFormat.NDARRAY
    assert conv_input_format(rt, "second") is DataFormat.N16CX


def test_forced_winograd_keeps_n16cx(tmp_path, monkeypatch):
    """PPLPY_CONV_ALGO=winograd on a 3-channel 3x3 conv: Winograd, which reads only N16CX,
    so the input is reordered as before."""
    monkeypatch.setenv("PPLPY_CONV_ALGO", "winograd")
    model, feeds = stem_model(3, 16, (10, 10), (3, 3), {"pads": [1, 1, 1, 1]})
    rt = load_and_check(model, feeds, None, tmp_path)
    kernel, = [k for n, k in rt.result.kernels.items() if n.op_type == "Conv"]
    assert kernel.algorithm == "winograd_f4x3"
    assert conv_input_format(rt, "stem") is DataFormat.N16CX


conv_impl = variant_fixture("conv_fp32")


@pytest.mark.parametrize("oc", [20, 24, 40])
@pytest.mark.parametrize("raw", [False, True], ids=["packed", "raw"])
def test_planar_step_zeroes_padding_lanes(conv_impl, oc, raw):
    """The step on an NCHW x: right values, and every padding lane of y exactly 0 (bias 0, no
    weights), also in panels that hold padding channels only (16-channel panels of the fma
    tier, 8-channel ones of sse), whose batch is empty."""
    n, ic, h, w, k, s, p = 2, 3, 9, 11, 3, 2, 1
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    x, wt, b = rand(n, ic, h, w), rand(oc, ic, k, k), rand(oc)
    y = np.full((n, -(-oc // 16), oh, ow, 16), np.nan, np.float32)
    extra = ({"w": wt.ctypes.data, "b": b.ctypes.data} if raw
             else {"packed_w": conv_impl.conv_pack_weight(wt, 1), "bias": b})
    step = conv_impl.make_conv2d_n16cx_step(
        x.ctypes.data, y.ctypes.data, n, ic, oc, 1, h, w, oh, ow, k, k, s, s, p, p, 1, 1, 0,
        0.0, 0.0, 2, keep=(x, y, wt, b), x_planar=True, **extra)
    run_steps([step], 2)
    got = y.transpose(0, 1, 4, 2, 3).reshape(n, -1, oh, ow)
    want = ReferenceEvaluator(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4)], "g",
        [helper.make_tensor_value_info(v, FLOAT, None) for v in ("x", "w", "b")],
        [helper.make_tensor_value_info("y", FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 13)])).run(None, {"x": x, "w": wt, "b": b})[0]
    np.testing.assert_allclose(got[:, :oc], want, rtol=1e-4, atol=1e-4)
    assert (got[:, oc:] == 0).all()


def test_planar_step_rejects_blocked_cases(conv_impl):
    x = np.zeros((1, 16, 4, 4), np.float32)
    y = np.zeros((1, 1, 4, 4, 16), np.float32)
    for ic, oc, group in [(16, 16, 1), (4, 8, 2)]:
        with pytest.raises(ValueError, match="planar"):
            conv_impl.make_conv2d_n16cx_step(
                x.ctypes.data, y.ctypes.data, 1, ic, oc, group, 4, 4, 4, 4, 1, 1, 1, 1, 0, 0,
                1, 1, 0, 0.0, 0.0, 1, packed_w=conv_impl.conv_pack_weight(
                    np.zeros((oc, ic // group, 1, 1), np.float32), group), x_planar=True)
