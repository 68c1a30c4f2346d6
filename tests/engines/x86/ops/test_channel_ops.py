"""Channel data movement in N16CX: a channel Slice, a Split at any channel offset and the
pplpy ChannelShuffle between two convolutions stay blocked (no reorder between the
convolutions) and match the reference; ChannelShuffle's own shape errors."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(5)


def conv_sandwich(middle, channels, out_channels, opset=17, extra=()):
    """x -> Conv(channels) -> middle nodes (read "c", write "m") -> Conv -> y."""
    w1 = RNG.standard_normal((channels, 3, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((5, out_channels, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"]), *middle,
             helper.make_node("Conv", ["m", "w2"], ["y"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             *[numpy_helper.from_array(np.asarray(v), k) for k, v in extra]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_blocked(model, isa, node_type):
    rt = pplpy.load(model.SerializeToString(), max_isa=isa)
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    reorders = [n for n in rt.graph.nodes if n.op_type == "Reorder"]
    # The graph's output only: the first Conv reads the 3-channel NCHW input itself.
    assert len(reorders) == 1 and reorders[0].outputs[0] == "y"
    node = next(n for n in rt.graph.nodes if n.op_type == node_type)
    assert all(rt.formats[o] is DataFormat.N16CX for o in node.outputs if o)
    return rt


@pytest.mark.parametrize("start, end, step", [(0, 20, 1), (5, 37, 1), (3, 40, 2),
                                              (39, 0, -3), (-20, 1000, 1)])
def test_channel_slice_stays_blocked(isa, start, end, step):
    out = len(range(40)[slice(start, end, step)])
    middle = [helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["m"])]
    extra = [("s", [start]), ("e", [end]), ("a", [1]), ("st", [step])]
    check_blocked(conv_sandwich(middle, 40, out, extra=extra), isa, "Slice")


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [5], [2], [1]), ([5, 0], [0, 6], [3, 2], [-2, 2]), ([0, 1], [1, 4], [0, -1], [1, 1])])
def test_batch_and_spatial_slices_stay_blocked(isa, starts, ends, axes, steps):
    middle = [helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["m"])]
    extra = [("s", starts), ("e", ends), ("a", axes), ("st", steps)]
    check_blocked(conv_sandwich(middle, 20, 20, extra=extra), isa, "Slice")


def test_slice_of_channel_and_spatial_axes_falls_back_to_ndarray():
    middle = [helper.make_node("Slice", ["c", "s", "e", "a"], ["m"])]
    model = conv_sandwich(middle, 16, 8, extra=[("s", [1, 0]), ("e", [4, 8]), ("a", [2, 1])])
    rt = pplpy.load(model.SerializeToString())
    node = next(n for n in rt.graph.nodes if n.op_type == "Slice")
    assert rt.formats[node.outputs[0]] is DataFormat.NDARRAY
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sizes", [(10, 30), (16, 7, 17), (21, 19), (40,)])
def test_split_at_any_channel_offset_stays_blocked(isa, sizes):
    outs = [f"p{i}" for i in range(len(sizes))]
    middle = [helper.make_node("Split", ["c", "sizes"], outs, axis=1),
              helper.make_node("Concat", list(reversed(outs)), ["m"], axis=1)]
    check_blocked(conv_sandwich(middle, 40, 40, extra=[("sizes", list(sizes))]), isa, "Split")


@pytest.mark.parametrize("channels, groups", [(32, 2), (24, 3), (116, 2), (48, 4), (72, 8)])
def test_channel_shuffle_is_recognised_and_stays_blocked(isa, channels, groups):
    middle = [helper.make_node("Reshape", ["c", "s5"], ["r"]),
              helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
              helper.make_node("Reshape", ["t", "s4"], ["m"])]
    extra = [("s5", [2, groups, channels // groups, 6, 6]), ("s4", [2, channels, 6, 6])]
    rt = check_blocked(conv_sandwich(middle, channels, channels, extra=extra), isa,
                       "ChannelShuffle")
    assert "recognize_channel_shuffle: 1 change(s)" in "\n".join(rt.pass_log)


def test_channel_shuffle_near_misses_are_left_alone():
    # perm (0, 1, 2, 3, 4) after the split is no shuffle: nothing to recognise.
    middle = [helper.make_node("Reshape", ["c", "s5"], ["r"]),
              helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 2, 4, 3]),
              helper.make_node("Reshape", ["t", "s4"], ["m"])]
    extra = [("s5", [2, 2, 8, 6, 6]), ("s4", [2, 16, 6, 6])]
    rt = pplpy.load(conv_sandwich(middle, 16, 16, extra=extra).SerializeToString())
    assert "ChannelShuffle" not in [n.op_type for n in rt.graph.nodes]


def test_channel_shuffle_in_a_saved_model_runs_in_both_formats(tmp_path):
    """A pplpy::ChannelShuffle node in a file (as a saved optimised model has it): NDARRAY
    from a graph input, and its shape errors."""
    node = helper.make_node("ChannelShuffle", ["x"], ["y"], domain="pplpy", group=3)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 6, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("pplpy", 1)])
    x = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    got = pplpy.load(model.SerializeToString()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.reshape(2, 3, 2, 5).transpose(0, 2, 1, 3)
                                  .reshape(2, 6, 5))
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("ChannelShuffle", ["x"], ["y"], domain="pplpy", group=4)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pplpy", 1)])
    with pytest.raises(pplpy.ShapeError, match="group 4 must be >= 1 and divide the "
                                               "channels 6"):
        pplpy.load(bad.SerializeToString())
