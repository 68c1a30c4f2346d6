"""Shape, Gather, Squeeze and Slice through the public API against onnx's
ReferenceEvaluator, under every ISA cap; the PyTorch-style shape subgraph at several batch
sizes.  These ops only move data: results must match exactly."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_builders import random_array

import pplpy

# Keeps every node a node (no constant folding), so the kernels run.
NO_FOLDING = [("dead_code_elimination", "once")]


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n)
                               for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(tmp_path, model, feeds, isa, passes=None, num_threads=1):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, passes=passes, num_threads=num_threads)
    got = rt.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for name, expected in zip(got, want):
        expected = np.asarray(expected)
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
    return rt


# -- Shape ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
# A rank-0 input is left out: the runtime feeds it as shape (1,) (np.ascontiguousarray).
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (0, 3)], ids=str)
def test_shape(tmp_path, isa, dtype, shape):
    model = make_model([helper.make_node("Shape", ["x"], ["y"])], [vi("x", dtype, shape)],
                       [vi("y", np.int64, None)], opset=13)
    check(tmp_path, model, {"x": random_array(shape, dtype)}, isa)


@pytest.mark.parametrize("start, end", [(0, None), (1, None), (-1, None), (0, -1), (-10, 10),
                                        (2, 1), (1, 3)])
def test_shape_15_start_end(tmp_path, isa, start, end):
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    model = make_model([helper.make_node("Shape", ["x"], ["y"], **attrs)],
                       [vi("x", np.float32, (2, 3, 4, 5))], [vi("y", np.int64, None)])
    check(tmp_path, model, {"x": random_array((2, 3, 4, 5), np.float32)}, isa)


def test_shape_of_an_n16cx_tensor_reports_logical_dims(tmp_path, isa):
    """Conv's output is N16CX (channels padded to 16); Shape sees the 5 logical channels."""
    w = random_array((5, 3, 3, 3), np.float32)
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Shape", ["c"], ["s"]),
         helper.make_node("Relu", ["c"], ["y"])],
        [vi("x", np.float32, (1, 3, 6, 6))], [vi("s", np.int64, None), vi("y", np.float32, None)],
        [("w", w)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa)
    got = rt.run({"x": random_array((1, 3, 6, 6), np.float32)})
    np.testing.assert_array_equal(got["s"], [1, 5, 6, 6])


# -- Gather --------------------------------------------------------------------------------


# Negative indices exist from opset 11 (before, the spec leaves them undefined).
GATHER_CASES = [
    pytest.param(opset, axis, indices, id=f"opset{opset}-{axis}-{indices}")
    for opset in (1, 11, 13)
    for axis, indices in ((0, [1, 0, 2]), (1, [[0, -1], [2, 2]]), (-1, [3]), (2, [-5, 4]))
    if opset >= 11 or min(np.ravel(indices)) >= 0]


@pytest.mark.parametrize("opset, axis, indices", GATHER_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.bool_])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_fed_indices(tmp_path, isa, opset, dtype, index_dtype, axis, indices):
    data = random_array((3, 4, 5), dtype)
    idx = np.asarray(indices, index_dtype)
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=axis)],
                       [vi("data", dtype, data.shape), vi("idx", index_dtype, idx.shape)],
                       [vi("y", dtype, None)], opset=max(opset, 7))
    check(tmp_path, model, {"data": data, "idx": idx}, isa)


@pytest.mark.parametrize("axis, index", [(0, 2), (1, -1), (-1, 0)])
def test_gather_scalar_constant_index(tmp_path, isa, axis, index):
    """A scalar index drops the axis.  (A scalar fed as a model input is left out: the
    runtime feeds rank-0 arrays as shape (1,).)"""
    data = random_array((3, 4, 5), np.float32)
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=axis)],
                       [vi("data", np.float32, data.shape)], [vi("y", np.float32, None)],
                       [("idx", np.array(index, np.int64))])
    check(tmp_path, model, {"data": data}, isa, passes=NO_FOLDING)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_gather_constant_indices_big(tmp_path, isa, num_threads):
    data = random_array((64, 3000), np.float32)
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
                       [vi("data", np.float32, data.shape)], [vi("y", np.float32, None)],
                       [("idx", np.array([63, 0, -1, 5] * 10, np.int64))])
    check(tmp_path, model, {"data": data}, isa, passes=NO_FOLDING, num_threads=num_threads)


def test_gather_out_of_range_constant_index_is_an_error(tmp_path, isa):
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], name="bad_gather",
                                         axis=1)],
                       [vi("data", np.float32, (2, 3))], [vi("y", np.float32, None)],
                       [("idx", np.array([0, 3], np.int64))])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(pplpy.PplError, match=r'bad_gather.*index 3 is out of range'):
        rt = pplpy.load(str(path), max_isa=isa, passes=NO_FOLDING)
        rt.run({"data": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("num_threads", [1, 2])
def test_gather_out_of_range_fed_index_is_an_input_error(tmp_path, isa, num_threads):
    """Indices known only at run time are never read out of bounds, and the run raises an
    InputError naming the node and the index (as ONNX Runtime does, instead of handing out
    zero rows); the runtime stays usable."""
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0,
                                         name="embed")],
                       [vi("data", np.float32, (3, 2)), vi("idx", np.int64, (3,))],
                       [vi("y", np.float32, None)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, num_threads=num_threads)
    data = random_array((3, 2), np.float32)
    with pytest.raises(pplpy.InputError, match=r'node "embed" .*index (7|-9) is out of range '
                                               r'for an axis of 3 \(valid: -3 to 2\)'):
        rt.run({"data": data, "idx": np.array([1, 7, -9], np.int64)})
    got = rt.run({"data": data, "idx": np.array([1, 2, -3], np.int64)})["y"]
    np.testing.assert_array_equal(got, data[[1, 2, 0]])


def test_gather_out_of_range_in_a_control_flow_body_is_an_input_error(tmp_path):
    """A body's plan raises as the main plan does; the If's error reaches the caller as
    the same InputError, and the runtime stays usable."""
    def branch(name, index_input):
        return helper.make_graph(
            [helper.make_node("Gather", ["data", index_input], [f"{name}_y"], name=name)],
            name, [], [vi(f"{name}_y", np.float32, None)])

    model = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("then_gather", "idx"),
                          else_branch=branch("else_gather", "zeros"))],
        [vi("c", np.bool_, ()), vi("data", np.float32, (3, 2)), vi("idx", np.int64, (3,))],
        [vi("y", np.float32, None)],
        [("zeros", np.zeros(3, np.int64))])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path))
    data = random_array((3, 2), np.float32)
    feeds = {"c": np.array(True), "data": data, "idx": np.array([0, 3, 1], np.int64)}
    with pytest.raises(pplpy.InputError, match=r'node "then_gather" .*index 3 is out of'):
        rt.run(feeds)
    feeds["idx"] = np.array([0, 2, 1], np.int64)
    np.testing.assert_array_equal(rt.run(feeds)["y"], data[[0, 2, 1]])


# -- Squeeze -------------------------------------------------------------------------------


# Negative axes exist from opset 11.
SQUEEZE_CASES = [pytest.param(axes, opset, id=f"{axes}-opset{opset}")
                 for axes in (None, [0], [-1], [0, 2]) for opset in (1, 11, 13)
                 if opset >= 11 or axes is None or min(axes) >= 0]


@pytest.mark.parametrize("axes, opset", SQUEEZE_CASES)
def test_squeeze(tmp_path, isa, axes, opset):
    x = random_array((1, 3, 1), np.float32)
    inits = []
    if opset >= 13:
        inputs = ["x"] if axes is None else ["x", "axes"]
        node = helper.make_node("Squeeze", inputs, ["y"])
        if axes is not None:
            inits = [("axes", np.array(axes, np.int64))]
    else:
        node = helper.make_node("Squeeze", ["x"], ["y"], **({} if axes is None else
                                                             {"axes": axes}))
    model = make_model([node], [vi("x", np.float32, x.shape)], [vi("y", np.float32, None)],
                       inits, opset=opset)
    check(tmp_path, model, {"x": x}, isa, passes=NO_FOLDING)


# -- Slice ---------------------------------------------------------------------------------

SLICES = [
    # starts, ends, axes, steps
    ([1], [3], [0], None),
    ([0, -3], [2, 1000], [1, 2], None),
    ([-1], [-1000], [2], [-1]),
    ([5], [0], [2], [-2]),
    ([1, 0, 4], [100, 3, 0], None, [2, 1, -3]),
    ([10], [20], [0], None),
    ([0], [-1], [-1], [2]),
]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICES, ids=str)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_slice_10(tmp_path, isa, starts, ends, axes, steps, index_dtype, num_threads):
    x = random_array((4, 5, 6), np.int64)
    names = ["x", "starts", "ends"]
    inits = [("starts", np.array(starts, index_dtype)), ("ends", np.array(ends, index_dtype))]
    if axes is not None or steps is not None:
        names.append("axes")
        inits.append(("axes", np.array(axes if axes is not None else range(len(starts)),
                                       index_dtype)))
    if steps is not None:
        names.append("steps")
        inits.append(("steps", np.array(steps, index_dtype)))
    model = make_model([helper.make_node("Slice", names, ["y"])], [vi("x", np.int64, x.shape)],
                       [vi("y", np.int64, None)], inits, opset=13)
    check(tmp_path, model, {"x": x}, isa, passes=NO_FOLDING, num_threads=num_threads)


@pytest.mark.parametrize("starts, ends, axes", [([1], [3], [0]), ([0, -3], [2, 1000], None),
                                                ([-2], [-1], [2])], ids=str)
def test_slice_1_attributes(tmp_path, isa, starts, ends, axes):
    x = random_array((4, 5, 6), np.float32)
    attrs = {"starts": starts, "ends": ends} | ({} if axes is None else {"axes": axes})
    model = make_model([helper.make_node("Slice", ["x"], ["y"], **attrs)],
                       [vi("x", np.float32, x.shape)], [vi("y", np.float32, None)], opset=9)
    check(tmp_path, model, {"x": x}, isa)


def test_slice_of_a_shape(tmp_path, isa):
    """Shape -> Slice (PyTorch's x.shape[2:]), then Concat onto a constant, as a Reshape
    target."""
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Slice", ["s", "start", "end"], ["hw"]),
         helper.make_node("Concat", ["minus_one", "hw"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [vi("x", np.float32, ("N", 3, 4, 5))], [vi("y", np.float32, None)],
        [("start", np.array([2], np.int64)), ("end", np.array([4], np.int64)),
         ("minus_one", np.array([-1], np.int64))])
    for batch in (1, 2):
        check(tmp_path, model, {"x": random_array((batch, 3, 4, 5), np.float32)}, isa)


# -- the PyTorch-style shape subgraph ------------------------------------------------------


def pytorch_flatten_model():
    """x.view(x.size(0), -1) as PyTorch exports it: Shape -> Gather(0) -> Unsqueeze ->
    Concat with [-1] -> Reshape, on an input with a symbolic batch dim."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    return make_model(
        nodes, [vi("x", np.float32, ("N", 3, 4, 5))], [vi("y", np.float32, None)],
        [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)),
         ("minus_one", np.array([-1], np.int64))], opset=13)


@pytest.mark.parametrize("pipeline", [None, NO_FOLDING], ids=["default", "no-folding"])
def test_pytorch_flatten_subgraph_at_several_batch_sizes(tmp_path, isa, pipeline):
    model = pytorch_flatten_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, passes=pipeline)
    reference = ReferenceEvaluator(model)
    for batch in (1, 3, 5):
        x = random_array((batch, 3, 4, 5), np.float32)
        got = rt.run({"x": x})["y"]
        (want,) = reference.run(None, {"x": x})
        assert got.shape == want.shape == (batch, 60)
        np.testing.assert_array_equal(got, want)


def test_transpose_and_concat_big_on_two_threads(tmp_path, isa):
    """Parallel copy steps: one and two threads give the same bytes as the reference."""
    model = make_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
         helper.make_node("Concat", ["t", "t"], ["y"], axis=2)],
        [vi("x", np.float32, (2, 64, 40, 40))], [vi("y", np.float32, None)])
    x = random_array((2, 64, 40, 40), np.float32)
    for threads in (1, 2):
        check(tmp_path, model, {"x": x}, isa, num_threads=threads)


def test_a_fault_then_a_failing_body_reports_the_first_and_leaves_no_record(tmp_path):
    """A Gather records a bad index, then a body (an If's Gather) fails in the same run:
    the run raises the first error, and no record of either is left for the next run (a
    stale record made the next good run fail)."""
    branch = helper.make_graph(
        [helper.make_node("Gather", ["emb", "j"], ["b"], axis=0, name="inner_gather")], "b",
        [], [vi("b", np.float32, None)])
    model = make_model(
        [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0, name="outer_gather"),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        [vi("ids", np.int64, ("K",)), vi("j", np.int64, ("L",)), vi("c", np.bool_, ())],
        [vi("e", np.float32, None), vi("y", np.float32, None)],
        [("emb", np.arange(20, dtype=np.float32).reshape(5, 4))])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), num_threads=1)
    good = {"ids": np.array([1, 2], np.int64), "j": np.array([0, 3], np.int64),
            "c": np.array(True)}
    want = rt.run(good)
    bad = dict(good, ids=np.array([1, 99], np.int64), j=np.array([0, 77], np.int64))
    with pytest.raises(pplpy.InputError, match='node "outer_gather" .*index 99'):
        rt.run(bad)
    got = rt.run(good)
    for name in ("e", "y"):
        np.testing.assert_array_equal(got[name], want[name])


def test_gather_from_an_empty_axis_says_no_index_is_valid(tmp_path):
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
                       [vi("data", np.float32, ("N", 2)), vi("idx", np.int64, (1,))],
                       [vi("y", np.float32, None)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path))
    with pytest.raises(pplpy.InputError, match=r"index 0 is out of range for an axis of 0 "
                                               r"\(the axis is empty: no index is valid\)"):
        rt.run({"data": np.zeros((0, 2), np.float32), "idx": np.array([0], np.int64)})
