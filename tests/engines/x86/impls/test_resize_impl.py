"""The resize_fp32 kernels of every ISA variant against numpy.

* the separable resize pass: random taps (gathered indices and weights, outside flags) on
  random (outer, in, inner) shapes, inner 1 (a gather along rows), 16 (an N16CX pixel) and
  more; several passes chained through scratch; one and two threads give the same bytes;
* RoiAlign against onnx.reference;
* NonMaxSuppression against onnx.reference, with ties and degenerate boxes;
* the Python-visible builders refuse what would read outside memory.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from impl_variants import assert_variants_export_the_same_names
from onnx.reference import ReferenceEvaluator

from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.errors import PplError

FAMILY = "resize_fp32"
CASES = settings(derandomize=True, deadline=None, max_examples=40,
                 suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(params=ISA_NAMES, scope="module")
def mod(request):
    try:
        return load_variant(FAMILY, request.param)
    except PplError:
        pytest.skip(f"CPU lacks {request.param}")


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _pass_oracle(x, axis, index, weight, outside, fill):
    x = x.astype(np.float64)
    taken = np.take(x, index, axis=axis)          # (..., out, taps, ...)
    shape = [1] * x.ndim
    shape.insert(axis + 1, weight.shape[1])
    shape[axis] = weight.shape[0]
    y = (taken * weight.reshape(shape)).sum(axis=axis + 1)
    if outside is not None:
        mask = np.asarray(outside, bool).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
        y = np.where(mask, fill, y)
    return y


@st.composite
def _resize_case(draw):
    rank = draw(st.integers(1, 4))
    dims = [draw(st.integers(1, 9)) for _ in range(rank)]
    if draw(st.booleans()):
        dims[-1] = 16   # an N16CX pixel as the inner axis
    n_passes = draw(st.integers(1, min(rank, 3)))
    axes = draw(st.permutations(range(rank)))[:n_passes]
    seed = draw(st.integers(0, 2**31))
    return dims, list(axes), seed


@CASES
@given(case=_resize_case())
def test_resize_passes_match_numpy(mod, case):
    dims, axes, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(dims).astype(np.float32)
    want = x.astype(np.float64)
    passes, current = [], list(dims)
    for axis in axes:
        n_out = int(rng.integers(1, 12))
        taps = int(rng.integers(1, 5))
        index = rng.integers(0, current[axis], (n_out, taps))
        weight = rng.standard_normal((n_out, taps)).astype(np.float32)
        outside = rng.random(n_out) < 0.2 if rng.random() < 0.5 else None
        fill = float(rng.standard_normal())
        passes.append((axis, index, weight, outside, fill))
        want = _pass_oracle(want, axis, index, weight, outside, np.float32(fill))
        current[axis] = n_out
    got = mod.resize(x, passes, current, num_threads=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mod.resize(x, passes, current, num_threads=2), got)


def test_resize_large_parallel_pass(mod):
    """A pass big enough to run on the team splits rows and row pieces exactly."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 37, 501)).astype(np.float32)
    index = np.clip(np.arange(1003)[:, None] // 2 + np.arange(2)[None, :], 0, 500)
    weight = rng.random((1003, 2)).astype(np.float32)
    passes = [(2, index, weight, None, 0.0)]
    got = mod.resize(x, passes, (3, 37, 1003), num_threads=2)
    np.testing.assert_allclose(got, _pass_oracle(x, 2, index, weight, None, 0), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(mod.resize(x, passes, (3, 37, 1003), num_threads=1), got)


def test_resize_without_passes_copies(mod):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(mod.resize(x, [], x.shape), x)


def test_resize_builder_refuses_bad_taps(mod):
    x = np.zeros((2, 3), np.float32)
    y = np.zeros((2, 2), np.float32)
    addr = lambda a: a.__array_interface__["data"][0]  # noqa: E731
    with pytest.raises(ValueError, match="index out of range"):
        mod.make_resize_axis_step(addr(x), addr(y), 2, 3, 1, [[0], [3]], [[1], [1]])
    with pytest.raises(ValueError, match="same"):
        mod.make_resize_axis_step(addr(x), addr(y), 2, 3, 1, [[0], [1]], [[1, 1], [1, 1]])
    with pytest.raises(ValueError, match="flags"):
        mod.make_resize_axis_step(addr(x), addr(y), 2, 3, 1, [[0], [1]], [[1], [1]],
                                  outside=[0, 0, 1])


# ---------------------------------------------------------------------------------------
# RoiAlign

def _roi_reference(x, rois, batch, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "roi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("batch", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    return ReferenceEvaluator(model).run(None, {"x": x, "rois": rois, "batch": batch})[0]


@pytest.mark.parametrize("half_pixel", [True, False])
@pytest.mark.parametrize("mode_max", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 3])
def test_roi_align_matches_reference(mod, half_pixel, mode_max, sampling_ratio):
    rng = np.random.default_rng(sampling_ratio)
    x = rng.standard_normal((3, 4, 11, 8)).astype(np.float32)
    corners = rng.uniform(-3, 14, (9, 2, 2)).astype(np.float32)
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    rois[0] = [2, 2, 2, 2]            # an empty region
    rois[1] = [5, 6, 3, 1]            # a reversed one
    batch = rng.integers(0, 3, 9).astype(np.int64)
    got = mod.roi_align(x, rois, batch, 2, 5, sampling_ratio, 0.75, half_pixel, mode_max)
    want = _roi_reference(x, rois, batch, output_height=2, output_width=5,
                          sampling_ratio=sampling_ratio, spatial_scale=0.75,
                          mode="max" if mode_max else "avg",
                          coordinate_transformation_mode="half_pixel" if half_pixel
                          else "output_half_pixel")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(
        mod.roi_align(x, rois, batch, 2, 5, sampling_ratio, 0.75, half_pixel, mode_max,
                      num_threads=2), got)


def test_roi_align_bad_batch_index_gives_nan(mod):
    x = np.ones((1, 2, 4, 4), np.float32)
    rois = np.array([[0, 0, 2, 2], [0, 0, 2, 2]], np.float32)
    got = mod.roi_align(x, rois, np.array([0, 5], np.int64), 2, 2)
    assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()


# ---------------------------------------------------------------------------------------
# NonMaxSuppression

def _nms_reference(boxes, scores, max_out, iou, score, center):
    names = ["boxes", "scores", "max_out", "iou"] + (["score"] if score is not None else [])
    node = helper.make_node("NonMaxSuppression", names, ["y"], center_point_box=center)
    types = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT,
             TensorProto.FLOAT]
    graph = helper.make_graph(
        [node], "nms", [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    feeds = {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
             "iou": np.array([iou], np.float32)}
    if score is not None:
        feeds["score"] = np.array([score], np.float32)
    return ReferenceEvaluator(model).run(None, feeds)[0].reshape(-1, 3)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_nms_matches_reference(mod, center, seed):
    rng = np.random.default_rng(seed)
    b, c, n = 2, 3, 30
    boxes = rng.uniform(0, 6, (b, n, 4)).astype(np.float32)
    boxes[:, 3] = boxes[:, 2]                         # a box twice
    boxes[:, 4, 2:] = boxes[:, 4, :2]                 # a box without area
    scores = rng.random((b, c, n)).astype(np.float32)
    scores[:, :, 10:14] = 0.75                        # ties
    score = None if seed % 2 else 0.3
    max_out = [3, 100, 1, 0][seed]
    got = mod.non_max_suppression(boxes, scores, max_out, 0.4, score, center)
    want = _nms_reference(boxes, scores, max_out, 0.4, score, int(center))
    np.testing.assert_array_equal(got, want)
