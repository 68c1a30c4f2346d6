"""Depthwise Conv (group = channels) through pplpy.load against onnx.reference on every ISA
tier: the fixed-size kernel of impls/_dwconv_fp32.h (3x3 / 5x5, stride 1 / 2) on narrow
planes (through a padded slab) and wide ones (row by row, border pixels from an edge copy),
every activation it applies on its accumulators and one it leaves to the stored row, a
chain after the activation, channels that do not fill a 16-block, a weight computed at run
time, and the general path (dilation, channel multiplier) beside it; teams of 1 and 2
threads give the same bits."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def activation_nodes(act, src, dst):
    """Nodes computing dst = act(src), and their constant initializers."""
    if act == "relu6":
        return [helper.make_node("Clip", [src, "lo", "hi"], [dst])], [
            ("lo", np.float32(0)), ("hi", np.float32(6))]
    if act == "swish":
        return [helper.make_node("Sigmoid", [src], [dst + "_s"]),
                helper.make_node("Mul", [src, dst + "_s"], [dst])], []
    if act == "leaky":
        return [helper.make_node("LeakyRelu", [src], [dst], alpha=0.2)], []
    if act == "none":
        return [helper.make_node("Identity", [src], [dst])], []
    return [helper.make_node(act, [src], [dst])], []


def run_case(tmp_path, isa, c, hw, k, stride, pads, act="relu6", mult=1, dil=1,
             constant_w=True, chain=False, producer=False, batch=1, threads=(1, 2)):
    """y = act(depthwise conv) (+ x-shaped residual then Relu when chain), checked against
    the reference; with producer, a 1x1 Conv feeds the depthwise (its input then arrives in
    N16CX from a kernel rather than through a Reorder of the graph input)."""
    oc = c * mult
    w = rand(oc, 1, k, k)
    b = rand(oc)
    inits = [("b", b)]
    feeds = {"x": rand(batch, c, *hw)}
    nodes = []
    src = "x"
    if producer:
        inits.append(("pw", rand(c, c, 1, 1)))
        nodes.append(helper.make_node("Conv", ["x", "pw"], ["p"]))
        src = "p"
    if constant_w:
        inits.append(("w", w))
    else:
        feeds["w"] = w
    nodes.append(helper.make_node("Conv", [src, "w", "b"], ["t"], group=c,
                                  kernel_shape=[k, k], strides=[stride, stride],
                                  pads=list(pads), dilations=[dil, dil]))
    act_nodes, act_inits = activation_nodes(act, "t", "a")
    nodes += act_nodes
    inits += act_inits
    oh = (hw[0] + pads[0] + pads[2] - dil * (k - 1) - 1) // stride + 1
    ow = (hw[1] + pads[1] + pads[3] - dil * (k - 1) - 1) // stride + 1
    if chain:
        feeds["r"] = rand(batch, oc, oh, ow)
        nodes += [helper.make_node("Add", ["a", "r"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["a"], ["y"]))
    inputs = [(name, FLOAT, list(v.shape)) for name, v in feeds.items()]
    model = make_model(nodes, inputs, [("y", FLOAT, [batch, oc, oh, ow])], inits, opset=14)
    path = tmp_path / "dw.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    results = [pplpy.load(path, max_isa=isa, num_threads=t).run(feeds)["y"] for t in threads]
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


# (channels, (H, W), kernel, stride, pads t l b r): narrow planes take the slab, W > 32 the
# direct rows; odd sizes leave short tiles at the end of a row.
SHAPES = [
    (16, (7, 7), 3, 1, (1, 1, 1, 1)),
    (20, (14, 14), 5, 1, (2, 2, 2, 2)),
    (33, (9, 13), 3, 2, (1, 1, 1, 1)),
    (24, (11, 10), 5, 2, (2, 1, 0, 2)),
    (40, (28, 28), 3, 1, (0, 0, 1, 1)),
    (17, (6, 57), 3, 1, (1, 1, 1, 1)),
    (32, (5, 48), 3, 2, (0, 1, 1, 0)),
    (18, (4, 61), 5, 1, (2, 2, 2, 2)),
    (16, (5, 40), 5, 2, (1, 2, 2, 1)),
    (8, (3, 3), 5, 1, (2, 2, 2, 2)),      # no interior pixel at all
    (16, (3, 36), 3, 1, (0, 0, 0, 0)),    # no padding
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("c,hw,k,stride,pads", SHAPES)
def test_depthwise_shapes(isa, c, hw, k, stride, pads, tmp_path):
    run_case(tmp_path, isa, c, hw, k, stride, pads)


# Activations on the accumulators (Relu, Clip, LeakyRelu, Sigmoid, Swish, HardSwish), none,
# and Tanh, which the kernel leaves to a pass over the stored row.
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("act", ["none", "Relu", "relu6", "leaky", "Sigmoid", "swish",
                                 "HardSwish", "Tanh"])
@pytest.mark.parametrize("wide", [False, True], ids=["slab", "rows"])
def test_depthwise_activations(isa, act, wide, tmp_path):
    hw = (5, 45) if wide else (9, 9)
    run_case(tmp_path, isa, 24, hw, 3, 1, (1, 1, 1, 1), act=act)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("wide", [False, True], ids=["slab", "rows"])
def test_depthwise_chain_runtime_weight_batch(isa, wide, tmp_path):
    hw = (6, 40) if wide else (10, 12)
    run_case(tmp_path, isa, 20, hw, 5, 2, (2, 2, 2, 2), act="swish", chain=True,
             constant_w=False, batch=2, producer=True)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mult,dil,k", [(2, 1, 3), (1, 2, 3), (1, 1, 7)])
def test_depthwise_general_path(isa, mult, dil, k, tmp_path):
    """Multiplier, dilation and other kernel sizes stay on the general row kernel."""
    run_case(tmp_path, isa, 12, (9, 11), k, 1, (1, 2, 3, 1), mult=mult, dil=dil)


@pytest.mark.parametrize("isa", ISAS)
def test_channel_multiplier_across_input_blocks(isa, tmp_path):
    """A multiplier of 3 over 20 channels: an output block's lanes read input channels of
    two input blocks, and the last block has padding lanes (gathered pixel by pixel)."""
    run_case(tmp_path, isa, 20, (9, 10), 3, 1, (1, 1, 1, 1), mult=3, threads=(1, 2, 3))


def test_depthwise_many_threads_large(tmp_path):
    """A layer large enough to run as a parallel step (many items per thread)."""
    run_case(tmp_path, None, 48, (56, 56), 3, 2, (1, 1, 1, 1), act="swish", threads=(1, 2, 3))
    run_case(tmp_path, None, 48, (28, 28), 5, 1, (2, 2, 2, 2), threads=(1, 2, 3))
