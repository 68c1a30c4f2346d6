"""ONNX Slice's clamping (slice_geometry): with a negative step a start below -dim clamps
to 0, the first element (the spec, ONNX Runtime), where Python's slices give an empty range."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import pplpy
from pplpy.oputils.onnx.shape_functions import slice_geometry

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def onnx_slice_indices(n, start, end, step):
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return list(range(start, end, step))


def test_slice_geometry_follows_onnx_clamping():
    values = [INT64_MIN, -9, -4, -3, -2, -1, 0, 1, 2, 3, 4, 9, 2 ** 31, INT64_MAX]
    for n, start, end, step in itertools.product(range(5), values, values, [-2, -1, 1, 2]):
        dims, firsts, steps = slice_geometry([n], [start], [end], [0], [step])
        got = [firsts[0] + k * steps[0] for k in range(dims[0])]
        assert got == onnx_slice_indices(n, start, end, step), (n, start, end, step)


@pytest.mark.parametrize("start", [-4, -100, INT64_MIN])
def test_negative_step_start_below_minus_dim(start):
    inits = [numpy_helper.from_array(np.array([v], np.int64), name)
             for name, v in (("s", start), ("e", INT64_MIN), ("a", 1), ("st", -1))]
    graph = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = pplpy.load(model.SerializeToString()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x[:, 0:1])
