"""Layout folding (passes/layout_folding.py): a Reorder next to a channels-last Transpose (and
Reshape) runs as one channels-last Reorder.  Each case runs through pplpy.load on every ISA
tier against onnx.reference, counts the nodes left and checks the folded Reorders' params;
near misses keep their Transposes and still match."""

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.tools.pplnn import format_graph

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _model(nodes, inits, inputs, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, d) for n, d in inputs],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def sequence_conv(c, shape_from_input=False, extra_output=None):
    """SegFormer's Mix-FFN trip: x (N, L, C) -> Transpose -> Reshape (N, C, H, W) ->
    depthwise 3x3 Conv -> Reshape (N, C, L) -> Transpose -> y (N, L, C).  The 4-D shape
    is a constant, or built from x's own dims (Shape / Gather / Concat) as exporters do."""
    h, w = 4, 6
    inits = {"w": (RNG.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32),
             "b": RNG.standard_normal(c).astype(np.float32),
             "hw": np.array([h, w], np.int64), "back": np.array([0, c, -1], np.int64)}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1])]
    if shape_from_input:
        inits.update({"i0": np.array([0], np.int64), "i2": np.array([2], np.int64)})
        nodes += [helper.make_node("Shape", ["x"], ["sx"]),
                  helper.make_node("Gather", ["sx", "i0"], ["n"]),
                  helper.make_node("Gather", ["sx", "i2"], ["cc"]),
                  helper.make_node("Concat", ["n", "cc", "hw"], ["s4"], axis=0)]
    else:
        inits["s4"] = np.array([0, c, h, w], np.int64)
    nodes += [helper.make_node("Reshape", ["t", "s4"], ["img"]),
              helper.make_node("Conv", ["img", "w", "b"], ["conv"], group=c,
                               pads=[1, 1, 1, 1]),
              helper.make_node("Reshape", ["conv", "back"], ["seq"]),
              helper.make_node("Transpose", ["seq"], ["y"], perm=[0, 2, 1])]
    outputs = ("y",) if extra_output is None else ("y", extra_output)
    return _model(nodes, inits, [("x", ["N", h * w, c])], outputs), {
        "x": RNG.standard_normal((2, h * w, c)).astype(np.float32)}


def channels_last_block(c):
    """ConvNeXt's block: Conv (N, C, H, W) -> Transpose to (N, H, W, C) -> LayerNorm over C
    -> Transpose back -> Conv."""
    inits = {"w1": (RNG.standard_normal((c, 1, 7, 7)) / 7).astype(np.float32),
             "g": RNG.standard_normal(c).astype(np.float32),
             "beta": RNG.standard_normal(c).astype(np.float32),
             "w2": (RNG.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], group=c, pads=[3, 3, 3, 3]),
             helper.make_node("Transpose", ["a"], ["nhwc"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["nhwc", "g", "beta"], ["ln"], axis=-1),
             helper.make_node("Transpose", ["ln"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "w2"], ["y"])]
    return _model(nodes, inits, [("x", ["N", c, "H", "W"])]), {
        "x": RNG.standard_normal((2, c, 5, 7)).astype(np.float32)}


def load_and_check(model, feeds, isa, **kwargs):
    rt = pplpy.load(model.SerializeToString(), num_threads=2, max_isa=isa, **kwargs)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = rt.run(feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5)
    return rt


def ops(rt):
    return Counter(n.op_type for n in rt.graph.nodes)


def channels_last(rt):
    return sorted(n.param.channels_last for n in rt.graph.nodes
                  if n.op_type == "Reorder" and n.param.channels_last)


@pytest.mark.parametrize("shape_from_input", [False, True])
def test_sequence_through_a_conv_is_two_reorders(isa, shape_from_input):
    model, feeds = sequence_conv(32, shape_from_input)
    rt = load_and_check(model, feeds, isa)
    assert channels_last(rt) == [3, 3]
    assert not {"Transpose", "Reshape"} & set(ops(rt))
    # another batch and the same H x W: the folded shape input is read again per plan
    x = RNG.standard_normal((3, 24, 32)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_channels_last_block_is_two_reorders(isa):
    model, feeds = channels_last_block(16)
    rt = load_and_check(model, feeds, isa)
    assert channels_last(rt) == [4, 4]
    assert "Transpose" not in ops(rt)
    x = RNG.standard_normal((1, 16, 9, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["channels_24", "transposed_output", "no_fusion"])
def test_near_misses_keep_their_transposes(case):
    """24 channels (padding lanes in N16CX); the transposed input also a graph output;
    fusion off: the Transposes stay and the results match."""
    if case == "channels_24":
        model, feeds = sequence_conv(24)
    else:
        model, feeds = sequence_conv(32, extra_output="t" if case == "transposed_output"
                                     else None)
    rt = load_and_check(model, feeds, None, **({"fusion": False} if case == "no_fusion"
                                                else {}))
    assert ops(rt)["Transpose"] == (1 if case == "transposed_output" else 2)
    if case == "transposed_output":
        assert channels_last(rt) == [3]  # the way back still folds


def test_dump_graph_marks_channels_last_reorders():
    model, _ = sequence_conv(32)
    rt = pplpy.load(model.SerializeToString(), num_threads=1)
    text = format_graph(rt.graph)
    assert text.count("(channels-last, rank 3)") == 2


def test_saved_model_keeps_the_transposes_and_folds_again(tmp_path):
    model, feeds = sequence_conv(32)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    out = tmp_path / "opt.onnx"
    pplpy.save_optimized_model(str(src), str(out))
    import onnx

    saved = onnx.load(str(out))
    assert [n.op_type for n in saved.graph.node].count("Transpose") == 2
    rt = pplpy.load(str(out), num_threads=1)
    assert channels_last(rt) == [3, 3]
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
