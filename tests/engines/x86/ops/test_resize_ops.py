"""Resize, Upsample, RoiAlign and NonMaxSuppression through pplpy.load against onnx.reference
(and, for Resize-10 and Upsample, whose reference is partial, a numpy oracle of the semantics
ONNX Runtime gives them: output o reads o / scale, nearest floors (ceils when the axis
shrinks), linear interpolates between clamped neighbours).

Resize runs in NDARRAY and, after an identity 1x1 Conv, in N16CX where it keeps the channel
axis; every ISA tier; one and two threads give the same bytes.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(5)
C = 19  # not a multiple of 16: padding lanes matter
SHAPE = (2, C, 9, 7)
F32 = np.float32


def _f(values):
    return np.asarray(values, F32)


def _i(values):
    return np.asarray(values, np.int64)


# name -> (attributes, roi, scales, sizes, blocked: whether N16CX input stays N16CX)
RESIZE_CASES = {
    "nearest_up2": (dict(), None, _f([1, 1, 2, 2]), None, True),
    "nearest_floor_asymmetric": (dict(nearest_mode="floor",
                                      coordinate_transformation_mode="asymmetric"),
                                 None, _f([1, 1, 1.6, 0.7]), None, True),
    "nearest_ceil_half_pixel": (dict(nearest_mode="ceil"), None, _f([1, 1, 0.5, 2.5]), None,
                                True),
    "nearest_prefer_ceil_align": (dict(nearest_mode="round_prefer_ceil",
                                       coordinate_transformation_mode="align_corners"),
                                  None, None, _i([2, C, 13, 4]), True),
    "linear_half_pixel": (dict(mode="linear"), None, _f([1, 1, 1.7, 0.6]), None, True),
    "linear_align_corners": (dict(mode="linear", coordinate_transformation_mode="align_corners"),
                             None, None, _i([2, C, 13, 5]), True),
    "linear_pytorch_half_pixel": (dict(mode="linear",
                                       coordinate_transformation_mode="pytorch_half_pixel"),
                                  None, None, _i([2, C, 1, 11]), True),
    "linear_symmetric": (dict(mode="linear",
                              coordinate_transformation_mode="half_pixel_symmetric"),
                         None, _f([1, 1, 1.45, 0.55]), None, True),
    "linear_antialias_down": (dict(mode="linear", antialias=1), None, _f([1, 1, 0.45, 0.7]),
                              None, True),
    "cubic_up": (dict(mode="cubic"), None, _f([1, 1, 2.3, 1.5]), None, True),
    "cubic_exclude_outside": (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1,
                                   coordinate_transformation_mode="asymmetric"),
                              None, None, _i([2, C, 5, 12]), True),
    "cubic_antialias_down": (dict(mode="cubic", antialias=1), None, None, _i([2, C, 4, 3]),
                             True),
    "axes_not_larger": (dict(mode="linear", axes=[3, 2], keep_aspect_ratio_policy="not_larger"),
                        None, None, _i([10, 20]), True),
    "axes_not_smaller": (dict(axes=[-1, -2], keep_aspect_ratio_policy="not_smaller"),
                         None, None, _i([3, 4]), True),
    "tf_crop_and_resize": (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=-3.5),
                           _f([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3]), None, _i([2, C, 6, 8]), False),
    "tf_crop_axes": (dict(mode="cubic", coordinate_transformation_mode="tf_crop_and_resize",
                          axes=[2, 3]), _f([0.1, 0.3, 0.8, 0.6]), None, _i([5, 5]), False),
    "channels_and_batch": (dict(), None, _f([2, 0.5, 1, 1.5]), None, False),
}


def resize_model(name, blocked, opset=19, for_reference=False):
    attrs, roi, scales, sizes, _ = RESIZE_CASES[name]
    if for_reference and "axes" in attrs:
        # onnx.reference 1.23 mishandles negative axes; pplpy gets them as written.
        attrs = dict(attrs, axes=[a % len(SHAPE) for a in attrs["axes"]])
    inits = {"eye": np.eye(C, dtype=F32).reshape(C, C, 1, 1)} if blocked else {}
    names = ["t", "", "", ""]
    for i, (key, value) in enumerate((("roi", roi), ("scales", scales), ("sizes", sizes)), 1):
        if value is not None:
            inits[key] = value
            names[i] = key
    while names[-1] == "":
        names.pop()
    first = (helper.make_node("Conv", ["x", "eye"], ["t"]) if blocked
             else helper.make_node("Identity", ["x"], ["t"]))
    nodes = [first, helper.make_node("Resize", names, ["y"], **attrs)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _load(model, tmp_path, **kwargs):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(path, fusion=False, **kwargs)


PARAMS = [(name, blocked) for name, case in RESIZE_CASES.items()
          for blocked in (False, True)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name,blocked", PARAMS,
                         ids=[f"{n}-{'n16cx' if b else 'ndarray'}" for n, b in PARAMS])
def test_resize_matches_reference(name, blocked, isa, tmp_path):
    model = resize_model(name, blocked)
    x = RNG.standard_normal(SHAPE).astype(F32)
    want = ReferenceEvaluator(resize_model(name, blocked, for_reference=True)).run(
        None, {"x": x})[0]
    outputs = []
    for threads in (1, 2):
        rt = _load(model, tmp_path, max_isa=isa, num_threads=threads)
        (node,) = [n for n in rt.graph.nodes if n.op_type == "Resize"]
        stays_blocked = blocked and RESIZE_CASES[name][4]
        assert rt.formats[node.outputs[0]] is (DataFormat.N16CX if stays_blocked
                                               else DataFormat.NDARRAY)
        outputs.append(rt.run({"x": x})["y"])
    assert outputs[0].shape == want.shape
    np.testing.assert_allclose(outputs[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_resize_opset_11_13_and_fed_scales(tmp_path):
    """Scales fed at run time are part of the plan's signature: two values, two plans."""
    for opset in (11, 13, 18):
        node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear")
        graph = helper.make_graph(
            [node], "fed",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6]),
             helper.make_tensor_value_info("roi", TensorProto.FLOAT, [0]),
             helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        rt = _load(model, tmp_path)
        x = RNG.standard_normal((1, 3, 5, 6)).astype(F32)
        for scales in ([1, 1, 2, 0.5], [1, 1, 0.8, 1.5]):
            feeds = {"x": x, "roi": np.zeros(0, F32), "scales": _f(scales)}
            want = ReferenceEvaluator(model).run(None, feeds)[0]
            np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)


def test_resize_scales_from_a_run_time_node_is_refused(tmp_path):
    """Scales computed by a float op at run time cannot plan the output size."""
    nodes = [helper.make_node("Relu", ["s"], ["scales"]),
             helper.make_node("Resize", ["x", "", "scales"], ["y"])]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(_f([1, 1, 2, 2]), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # Relu on a constant folds: make its input a model input instead.
    graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [4]))
    del graph.initializer[:]
    with pytest.raises(pplpy.PplError):
        rt = _load(model, tmp_path)
        rt.run({"x": np.ones((1, 1, 2, 2), F32), "s": _f([1, 1, 2, 2])})


# ---------------------------------------------------------------------------------------
# Resize-10 and Upsample (7, 9)

def _legacy_oracle(x, scales, mode):
    out = x.astype(np.float64)
    for axis, s in enumerate(scales):
        n_in = out.shape[axis]
        n_out = int(np.floor(n_in * s))
        pos = np.arange(n_out) / s
        if mode == "nearest":
            idx = np.floor(pos) if s >= 1 else np.ceil(pos)
            out = np.take(out, np.clip(idx, 0, n_in - 1).astype(int), axis=axis)
        else:
            lo = np.clip(np.floor(pos), 0, n_in - 1).astype(int)
            hi = np.clip(lo + 1, 0, n_in - 1)
            frac = np.clip(pos, 0, n_in - 1) - lo
            shape = [1] * out.ndim
            shape[axis] = n_out
            frac = frac.reshape(shape)
            out = np.take(out, lo, axis=axis) * (1 - frac) + np.take(out, hi, axis=axis) * frac
    return out.astype(F32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type,opset", [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 0.6]])
def test_legacy_resize(op_type, opset, mode, scales, isa, tmp_path):
    scales = _f(scales)
    if opset == 7:
        node = helper.make_node(op_type, ["x"], ["y"], mode=mode, scales=[float(s) for s in scales])
        inits = []
    else:
        node = helper.make_node(op_type, ["x", "scales"], ["y"], mode=mode)
        inits = [numpy_helper.from_array(scales, "scales")]
    graph = helper.make_graph(
        [node], "legacy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = RNG.standard_normal((1, 2, 5, 4)).astype(F32)
    got = _load(model, tmp_path, max_isa=isa)
    got = got.run({"x": x})["y"]
    np.testing.assert_allclose(got, _legacy_oracle(x, scales, mode), rtol=1e-5, atol=1e-6)
    if mode == "nearest" and opset == 9 and all(float(s).is_integer() for s in scales):
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------
# RoiAlign

def _rois(count, h, w):
    corners = RNG.uniform(-2, max(h, w) + 2, (count, 2, 2)).astype(F32)
    lo, hi = corners.min(axis=1), corners.max(axis=1)
    return np.concatenate([lo, hi], axis=1)[:, [0, 1, 2, 3]].astype(F32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset,transform", [(10, None), (16, "half_pixel"),
                                             (16, "output_half_pixel"), (22, "half_pixel")])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(opset, transform, mode, sampling_ratio, isa, tmp_path):
    attrs = dict(mode=mode, output_height=3, output_width=4, sampling_ratio=sampling_ratio,
                 spatial_scale=0.5)
    if transform is not None:
        attrs["coordinate_transformation_mode"] = transform
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "roi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 10, 12]),
                        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 4]),
                        helper.make_tensor_value_info("batch", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = RNG.standard_normal((2, 5, 10, 12)).astype(F32)
    rois = _rois(7, 20, 24)
    feeds = {"x": x, "rois": rois, "batch": _i([0, 1, 1, 0, 1, 0, 0])}
    if opset == 10:
        # onnx.reference reads its default mode from the newest schema: give it explicitly.
        ref_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        ref_model.graph.node[0].attribute.append(helper.make_attribute(
            "coordinate_transformation_mode", "output_half_pixel"))
    else:
        ref_model = model
    want = ReferenceEvaluator(ref_model).run(None, feeds)[0]
    results = [_load(model, tmp_path, max_isa=isa, num_threads=t).run(feeds)["y"]
               for t in (1, 2)]
    np.testing.assert_allclose(results[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results[0], results[1])
    # No regions: an empty output.
    empty = {"x": x, "rois": np.zeros((0, 4), F32), "batch": np.zeros(0, np.int64)}
    assert _load(model, tmp_path, max_isa=isa).run(empty)["y"].shape == (0, 5, 3, 4)


def test_roi_align_of_a_huge_region_ends(tmp_path):
    """sampling_ratio 0 on a region 2e9 cells wide: each axis takes at most 256 samples a bin
    (it asked for 1e12 a bin and the run never ended).  Every sample lies outside the map,
    so the averages are 0; run in a child process so a regression fails, not hangs."""
    import subprocess
    import sys
    import textwrap

    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2,
                            output_width=3, sampling_ratio=0)
    graph = helper.make_graph(
        [node], "roi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5]),
                        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [1, 4]),
                        helper.make_tensor_value_info("batch", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "roi.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), path)
    code = textwrap.dedent(f"""
        import numpy as np, pplpy
        rt = pplpy.load({str(path)!r}, num_threads=1)
        y = rt.run({{"x": np.ones((1, 1, 5, 5), np.float32),
                    "rois": np.array([[-1e9, -1e9, 1e9, 1e9]], np.float32),
                    "batch": np.zeros(1, np.int64)}})["y"]
        print(y.shape, float(np.abs(y).max()))
    """)
    # (cwd: not the source tree, which would shadow the installed package)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "1,", "2,", "3)", "0.0"]


# ---------------------------------------------------------------------------------------
# NonMaxSuppression

def _nms_model(center, opset=11, constant_boxes=None):
    names = ["boxes", "scores", "max_out", "iou", "score"]
    node = helper.make_node("NonMaxSuppression", names, ["y"], center_point_box=center)
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [None, None, 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None, None]),
              helper.make_tensor_value_info("max_out", TensorProto.INT64, [1]),
              helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("score", TensorProto.FLOAT, [1])]
    graph = helper.make_graph([node], "nms", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("opset", [10, 11])
def test_nms_matches_reference(center, opset, isa, tmp_path):
    model = _nms_model(center, opset)
    rt = _load(model, tmp_path, max_isa=isa)
    for b, c, n, max_out, iou, score in ((2, 3, 40, 5, 0.3, 0.2), (1, 2, 200, 300, 0.5, -10),
                                         (1, 1, 8, 0, 0.5, 0.0)):
        xy = RNG.uniform(0, 10, (b, n, 2)).astype(F32)
        wh = RNG.uniform(0.5, 4, (b, n, 2)).astype(F32)
        boxes = (np.concatenate([xy, wh], axis=2) if center
                 else np.concatenate([xy, xy + wh], axis=2)[..., [1, 0, 3, 2]])
        scores = RNG.random((b, c, n)).astype(F32)
        scores[..., ::7] = 0.5   # ties: lower box index first
        feeds = {"boxes": boxes.astype(F32), "scores": scores, "max_out": _i([max_out]),
                 "iou": _f([iou]), "score": _f([score])}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        got = rt.run(feeds)["y"]
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got.reshape(-1, 3), want.reshape(-1, 3))


def test_nms_on_run_time_boxes(tmp_path):
    """Boxes computed by another node: the NonMaxSuppression is planned once they are (a
    staged plan), and matches the reference for boxes that change from run to run."""
    model = _nms_model(0)
    model.graph.node.insert(0, helper.make_node("Relu", ["raw"], ["boxes"]))
    model.graph.input[0].name = "raw"
    rt = _load(model, tmp_path)
    reference = ReferenceEvaluator(model)
    for _ in range(3):
        feeds = {"raw": RNG.random((1, 6, 4)).astype(F32) - 0.2,
                 "scores": RNG.random((1, 1, 6)).astype(F32),
                 "max_out": _i([4]), "iou": _f([0.3]), "score": _f([0.2])}
        np.testing.assert_array_equal(rt.run(feeds)["y"], reference.run(None, feeds)[0])
