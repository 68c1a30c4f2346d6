"""Data-movement and index ops (Split, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Range,
Size, Cast, CastLike, OneHot, Trilu, EyeLike, ReverseSequence, GatherElements, GatherND,
ScatterND, ScatterElements, NonZero, TopK) through pplpy.load against onnx's
ReferenceEvaluator, under every ISA cap, on 1 and 2 threads.  Only data moves (Cast converts
exactly): results must match exactly."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_builders import random_array

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.errors import PplError

NO_FOLDING = [("dead_code_elimination", "once")]
RNG = np.random.default_rng(7)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def model_of(nodes, feeds, outputs, initializers=(), opset=18):
    inputs = [vi(n, v.dtype, v.shape) for n, v in feeds.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, 0, None)
                                                   for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), n)
                               for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(tmp_path, model, feeds, isa, num_threads=1):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, passes=NO_FOLDING, num_threads=num_threads)
    got = rt.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for name, expected in zip(rt.output_names, want):
        expected = np.asarray(expected)
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
    return rt


def I64(*v):
    return np.array(v, np.int64)


# name -> (nodes, feeds, outputs, initializers, opset); "x" is the data.
def cases():
    x = random_array((2, 6, 5, 4), np.float32)
    big = random_array((64, 40, 33), np.float32)  # past the parallel threshold
    i32 = random_array((3, 4, 5), np.int32)
    u8 = random_array((3, 4, 5), np.uint8)
    b = random_array((3, 4, 5), np.bool_)
    node = helper.make_node
    yield "split_attr_2", [node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4])], {"x": x}, ["a", "b"], [], 11
    yield "split_input_13_neg_axis", [node("Split", ["x", "s"], ["a", "b", "c"], axis=-1)], {"x": x}, ["a", "b", "c"], [("s", I64(1, 0, 3))], 13
    yield "split_equal_13", [node("Split", ["x"], ["a", "b"], axis=1)], {"x": x}, ["a", "b"], [], 13
    yield "split_num_outputs_18", [node("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3)], {"x": x}, ["a", "b", "c"], [], 18
    yield "split_big_int8", [node("Split", ["x"], ["a", "b"], axis=0)], {"x": random_array((64, 40, 33), np.int8)}, ["a", "b"], [], 18
    yield "expand", [node("Expand", ["x", "s"], ["y"])], {"x": random_array((3, 1, 5), np.int64)}, ["y"], [("s", I64(2, 1, 4, 1))], 13
    yield "expand_big", [node("Expand", ["x", "s"], ["y"])], {"x": random_array((1, 40, 33), np.float32)}, ["y"], [("s", I64(64, 1, 1))], 8
    yield "tile", [node("Tile", ["x", "r"], ["y"])], {"x": i32}, ["y"], [("r", I64(2, 1, 3))], 13
    yield "tile_bool", [node("Tile", ["x", "r"], ["y"])], {"x": b}, ["y"], [("r", I64(1, 2, 2))], 6
    for mode in ("constant", "reflect", "edge", "wrap"):
        yield f"pad_{mode}_19", [node("Pad", ["x", "p"], ["y"], mode=mode)], {"x": x}, ["y"], [("p", I64(0, 1, 2, 3, 1, 0, 3, 2))], 19
    yield "pad_value_11", [node("Pad", ["x", "p", "v"], ["y"])], {"x": u8}, ["y"], [("p", I64(1, 0, 2, 0, 2, 1)), ("v", np.array(7, np.uint8))], 11
    yield "pad_fed_value_18", [node("Pad", ["x", "p", "v", "ax"], ["y"])], {"x": x, "v": np.array([2.5], np.float32)[0:1].reshape(())}, ["y"], [("p", I64(1, 2, 3, 4)), ("ax", I64(-1, 1))], 18
    yield "pad_attr_2", [node("Pad", ["x"], ["y"], pads=[0, 0, 1, 1, 0, 0, 2, 0], value=1.5)], {"x": x}, ["y"], [], 2
    yield "pad_big", [node("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": big}, ["y"], [("p", I64(0, 2, 3, 0, 1, 4))], 13
    yield "depth_to_space_dcr", [node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="DCR")], {"x": random_array((2, 8, 3, 4), np.int32)}, ["y"], [], 13
    yield "depth_to_space_crd", [node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], {"x": random_array((2, 8, 3, 4), np.float32)}, ["y"], [], 13
    yield "space_to_depth", [node("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": random_array((2, 3, 4, 6), np.uint8)}, ["y"], [], 13
    yield "range_float", [node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], [("s", np.array(1.5, np.float32)), ("l", np.array(9.0, np.float32)), ("d", np.array(0.75, np.float32))], 11
    # 0.7 is 0.699999988 in float32: 28 / it is just over 40, so 41 elements (the count in
    # double precision, as the reference and ONNX Runtime take it; float32 arithmetic gave 40)
    yield "range_float_count_in_double", [node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], [("s", np.array(0, np.float32)), ("l", np.array(28, np.float32)), ("d", np.array(0.7, np.float32))], 11
    yield "range_float_empty", [node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], [("s", np.array(3, np.float32)), ("l", np.array(1, np.float32)), ("d", np.array(0.5, np.float32))], 11
    yield "range_int_negative", [node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], [("s", np.array(10, np.int32)), ("l", np.array(-3, np.int32)), ("d", np.array(-4, np.int32))], 11
    yield "size", [node("Size", ["x"], ["y"])], {"x": x}, ["y"], [], 13
    for to in (TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8):
        src = (random_array((3, 4, 5), np.float32) * 50).astype(np.float32)
        if to == TensorProto.UINT8:
            src = np.abs(src)
        yield f"cast_float_to_{to}", [node("Cast", ["x"], ["y"], to=to)], {"x": src}, ["y"], [], 19
    yield "cast_bool_to_float", [node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], {"x": b}, ["y"], [], 13
    yield "cast_int64_to_int32", [node("Cast", ["x"], ["y"], to=TensorProto.INT32)], {"x": random_array((3, 4), np.int64)}, ["y"], [], 13
    yield "cast_big", [node("Cast", ["x"], ["y"], to=TensorProto.INT32)], {"x": big * 100}, ["y"], [], 13
    yield "castlike", [node("CastLike", ["x", "t"], ["y"])], {"x": i32}, ["y"], [("t", np.zeros(1, np.int64))], 15
    yield "onehot", [node("OneHot", ["i", "d", "v"], ["y"], axis=1)], {"i": np.array([[0, 2, -1], [5, 1, 3]], np.int64)}, ["y"], [("d", np.array(4, np.int64)), ("v", np.array([0.5, 3.0], np.float32))], 11
    yield "onehot_float_indices", [node("OneHot", ["i", "d", "v"], ["y"])], {"i": np.array([0.0, 2.0, 1.0], np.float32)}, ["y"], [("d", np.array(3.0, np.float32)), ("v", np.array([0, 1], np.int32))], 11
    for upper in (0, 1):
        for k in (-1, 0, 2):
            yield f"trilu_{upper}_{k}", [node("Trilu", ["x", "k"], ["y"], upper=upper)], {"x": random_array((2, 4, 5), np.int64), "k": np.array(k, np.int64).reshape(1)}, ["y"], [], 14
    yield "trilu_no_k", [node("Trilu", ["x"], ["y"], upper=0)], {"x": x}, ["y"], [], 14
    yield "eyelike", [node("EyeLike", ["x"], ["y"], k=1, dtype=TensorProto.INT32)], {"x": random_array((4, 5), np.float32)}, ["y"], [], 9
    yield "eyelike_neg_k", [node("EyeLike", ["x"], ["y"], k=-2)], {"x": random_array((5, 3), np.float32)}, ["y"], [], 9
    yield "reverse_sequence_time", [node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1)], {"x": random_array((4, 3, 2), np.float32), "l": I64(4, 1, 3)}, ["y"], [], 10
    yield "reverse_sequence_batch", [node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0)], {"x": random_array((3, 4), np.int32), "l": I64(2, 4, 0)}, ["y"], [], 10
    yield "gather_elements", [node("GatherElements", ["x", "i"], ["y"], axis=-2)], {"x": random_array((4, 5), np.float32), "i": np.array([[0, -1, 3, 2, 1], [3, 3, 0, 0, 1]], np.int32)}, ["y"], [], 13
    yield "gather_nd", [node("GatherND", ["x", "i"], ["y"])], {"x": random_array((3, 4, 5), np.int64), "i": np.array([[0, 1], [2, -1]], np.int64)}, ["y"], [], 12
    yield "gather_nd_batch", [node("GatherND", ["x", "i"], ["y"], batch_dims=1)], {"x": random_array((3, 4, 5), np.float32), "i": np.array([[[1], [3]], [[0], [0]], [[2], [1]]], np.int64)}, ["y"], [], 12
    for red in ("none", "add", "mul", "max", "min"):
        yield f"scatter_nd_{red}", [node("ScatterND", ["x", "i", "u"], ["y"], reduction=red)], {"x": random_array((4, 3, 2), np.float32), "i": np.array([[1], [3], [1]], np.int64), "u": random_array((3, 3, 2), np.float32)}, ["y"], [], 18
        yield f"scatter_elements_{red}", [node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=red)], {"x": random_array((3, 5), np.int32), "i": np.array([[1, -1], [0, 0], [4, 2]], np.int64), "u": random_array((3, 2), np.int32)}, ["y"], [], 18
    yield "scatter_elements_big", [node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)], {"x": big, "i": RNG.integers(0, 64, (5, 40, 33)), "u": random_array((5, 40, 33), np.float32)}, ["y"], [], 13
    yield "nonzero", [node("NonZero", ["x"], ["y"])], {"x": np.array([[1, 0, 3], [0, 0, -2]], np.int32)}, ["y"], [], 13
    yield "nonzero_float", [node("NonZero", ["x"], ["y"])], {"x": np.array([0.0, -0.0, 1.5, np.nan], np.float32)}, ["y"], [], 13
    yield "topk", [node("TopK", ["x", "k"], ["v", "i"], axis=1)], {"x": random_array((3, 20, 4), np.float32), "k": I64(5)}, ["v", "i"], [], 11
    yield "topk_smallest_ties", [node("TopK", ["x", "k"], ["v", "i"], largest=0)], {"x": np.array([[3, 1, 1, 2, 1, 3]], np.int64), "k": I64(4)}, ["v", "i"], [], 11
    yield "topk_attr_1", [node("TopK", ["x"], ["v", "i"], k=3)], {"x": random_array((4, 9), np.float32)}, ["v", "i"], [], 1
    yield "topk_uint8_big", [node("TopK", ["x", "k"], ["v", "i"], axis=0)], {"x": random_array((64, 40, 33), np.uint8), "k": I64(7)}, ["v", "i"], [], 11


CASES = {c[0]: c[1:] for c in cases()}


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_reference(tmp_path, isa, name, num_threads):
    nodes, feeds, outputs, inits, opset = CASES[name]
    model = model_of(nodes, feeds, outputs, inits, opset)
    check(tmp_path, model, feeds, isa, num_threads)


def test_empty_tensors(tmp_path, isa):
    """A zero-size split part and an empty pad input give empty outputs, no step."""
    x = random_array((2, 0, 3), np.float32)
    model = model_of([helper.make_node("Pad", ["x", "p"], ["y"]),
                      helper.make_node("Split", ["x", "s"], ["a", "b"], axis=2)],
                     {"x": x}, ["y", "a", "b"], [("p", I64(0, 1, 0, 0, 1, 0)), ("s", I64(0, 3))])
    check(tmp_path, model, {"x": x}, isa)


def test_negative_pads_crop(tmp_path, isa):
    """(onnx's reference refuses negative pads: compared with numpy slicing.)"""
    x = random_array((3, 4, 5), np.int32)
    model = model_of([helper.make_node("Pad", ["x", "p"], ["y"], mode="edge")], {"x": x}, ["y"],
                     [("p", I64(1, -1, 0, 0, 2, -2))], 13)
    got = load(tmp_path, model, max_isa=isa).run({"x": x})["y"]
    want = np.pad(x[:, 1:, :3], [(1, 0), (0, 2), (0, 0)], mode="edge")
    np.testing.assert_array_equal(got, want)


# -- N16CX: Pad on spatial axes and a channel Split on block boundaries stay blocked ---------

C = 35


def blocked_model(nodes, inits):
    eye = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "eye"], ["t"])] + nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, 5, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for n in nodes[-1:]
         for o in n.output],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in {"eye": eye, **inits}.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_spatial_stays_n16cx(tmp_path, isa, mode, num_threads):
    model = blocked_model([helper.make_node("Pad", ["t", "p"], ["y"], mode=mode)],
                          {"p": I64(0, 0, 1, 2, 0, 0, 2, 1)})
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, num_threads=num_threads)
    assert rt.formats["t"] is DataFormat.N16CX
    (pad,) = [n for n in rt.graph.nodes if n.op_type == "Pad"]
    assert rt.formats[pad.outputs[0]] is DataFormat.N16CX
    x = random_array((2, C, 5, 6), np.float32)
    np.testing.assert_allclose(rt.run({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split", [(16, 19), (32, 3), (10, 25)])
def test_channel_split_n16cx(tmp_path, isa, split):
    """A channel split of a blocked tensor stays blocked at any split point (a part inside
    a block is a channel map)."""
    blocked = True
    model = blocked_model([helper.make_node("Split", ["t", "s"], ["a", "b"], axis=1)],
                          {"s": np.array(split, np.int64)})
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa)
    (node,) = [n for n in rt.graph.nodes if n.op_type == "Split"]
    want_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    assert rt.formats[node.outputs[0]] is want_format
    x = random_array((2, C, 5, 6), np.float32)
    got = rt.run({"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for name, w in zip(("a", "b"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)


# -- errors --------------------------------------------------------------------------------


def load(tmp_path, model, **kw):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return pplpy.load(str(path), passes=NO_FOLDING, **kw)


def test_a_huge_range_is_refused_before_it_is_made(tmp_path):
    """Shape inference works out Range's length alone (the plan makes the values once): a
    limit of 4e12 fed at run time is a ShapeError naming the Range node, not an
    out-of-memory error from building the array to learn its shape."""
    model = model_of([helper.make_node("Range", ["s", "l", "d"], ["y"], name="big_range")],
                     {"l": np.array(0, np.int64)}, ["y"],
                     [("s", np.array(0, np.int64)), ("d", np.array(1, np.int64))])
    rt = load(tmp_path, model)
    with pytest.raises(PplError, match='"big_range"'):
        rt.run({"l": np.array(4 * 10**12, np.int64)})
    np.testing.assert_array_equal(rt.run({"l": np.array(3, np.int64)})["y"], [0, 1, 2])


def test_constant_index_out_of_range_is_a_shape_error(tmp_path):
    model = model_of([helper.make_node("GatherElements", ["x", "i"], ["y"])],
                     {"x": np.zeros((3, 2), np.float32)}, ["y"], [("i", np.array([[3, 0]], np.int64))])
    with pytest.raises(PplError, match="out of range"):
        load(tmp_path, model).run({"x": np.zeros((3, 2), np.float32)})


@pytest.mark.parametrize("op_type,feed,bad", [
    ("ScatterElements", I64(1, 7), 7), ("GatherElements", I64(1, -4), -4),
    ("ScatterND", np.array([[1], [3]], np.int64), 3),
    ("GatherND", np.array([[-4], [0]], np.int64), -4)])
def test_fed_index_out_of_range_is_an_input_error(tmp_path, op_type, feed, bad):
    """Indices fed at run time are not value inputs: the step never reads or writes out of
    bounds (gathers give zeros, scatters skip) and the run raises an InputError naming the
    node and the index, as ONNX Runtime does; the next good run is right."""
    inputs = ["x", "i", "u"] if op_type.startswith("Scatter") else ["x", "i"]
    feeds = {"x": np.arange(3, dtype=np.float32), "i": feed, "u": np.ones(2, np.float32)}
    feeds = {k: v for k, v in feeds.items() if k in inputs}
    model = model_of([helper.make_node(op_type, inputs, ["y"], name="ix")], feeds, ["y"])
    rt = load(tmp_path, model)
    with pytest.raises(PplError, match=rf'node "ix" .*index {bad} is out of range') as info:
        rt.run(feeds)
    assert isinstance(info.value, pplpy.InputError)
    feeds["i"] = np.zeros_like(feed)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(rt.run(feeds)["y"], want)


def test_cast_to_bfloat16_is_unsupported(tmp_path):
    model = model_of([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                     {"x": np.zeros((3,), np.float32)}, ["y"])
    with pytest.raises(PplError):
        load(tmp_path, model)


# -- Pad: crops before wrap / reflect pads on the other side --------------------------------


def pad_model(mode, pads, shape):
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(pads, np.int64), "p")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def crop_then_pad(x, pads, mode):
    r = x.ndim
    sl = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in
               enumerate(zip(pads[:r], pads[r:])))
    return np.pad(x[sl], [(max(b, 0), max(e, 0)) for b, e in zip(pads[:r], pads[r:])], mode=mode)


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("mode,pads", [("wrap", [2, -1]), ("wrap", [-1, 3]),
                                       ("wrap", [0, -3, 0, 5]), ("reflect", [-1, 2]),
                                       ("reflect", [0, 2, 0, -2])])
def test_negative_pad_crops_before_wrap(isa, mode, pads, num_threads):
    shape = (4,) if len(pads) == 2 else (3, 4)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    rt = pplpy.load(pad_model(mode, pads, shape).SerializeToString(), max_isa=isa,
                    num_threads=num_threads)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], crop_then_pad(x, pads, mode))


# -- TopK with NaN: NaN ranks above +inf (numpy.sort, onnxruntime) -------------------------


def topk_model(k, largest, n):
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, n])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array([k], np.int64), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def want_order(row, largest):
    nan = np.isnan(row)
    if largest:   # NaN first, then descending, ties by index
        return sorted(range(row.size), key=lambda i: (not nan[i], 0 if nan[i] else -row[i], i))
    return sorted(range(row.size), key=lambda i: (bool(nan[i]), 0 if nan[i] else row[i], i))


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("n,k", [(8, 3), (8, 8), (37, 5), (37, 37)])
def test_topk_nan_ranks_above_inf(isa, num_threads, largest, n, k):
    rng = np.random.default_rng(n + k)
    x = rng.integers(-3, 4, (3, n)).astype(np.float32)
    x[rng.random(x.shape) < 0.25] = np.nan
    x[0, 0], x[1, -1] = np.inf, -np.inf
    rt = pplpy.load(topk_model(k, largest, n).SerializeToString(), max_isa=isa,
                    num_threads=num_threads)
    out = rt.run({"x": x})
    for r in range(3):
        want = np.array(want_order(x[r], largest)[:k])
        np.testing.assert_array_equal(out["i"][r], want)
        np.testing.assert_array_equal(out["v"][r], x[r, want])


@pytest.mark.parametrize("bad", [5, -1])
def test_reverse_sequence_length_out_of_range_is_an_input_error(tmp_path, bad):
    """A sequence length outside [0, T] fed at run time (ONNX Runtime: "Invalid sequence
    length") is clamped in the step and makes the run raise an InputError naming it."""
    x = random_array((4, 3, 2), np.float32)
    model = model_of([helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0,
                                       batch_axis=1, name="rev")],
                     {"x": x, "l": I64(4, 1, 3)}, ["y"], opset=10)
    rt = load(tmp_path, model)
    with pytest.raises(pplpy.InputError, match=rf'node "rev" .*sequence length {bad} is out '
                                               r"of range for a time axis of 4"):
        rt.run({"x": x, "l": I64(4, bad, 3)})
    want = ReferenceEvaluator(model).run(None, {"x": x, "l": I64(4, 1, 3)})[0]
    np.testing.assert_array_equal(rt.run({"x": x, "l": I64(4, 1, 3)})["y"], want)
