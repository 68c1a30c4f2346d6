"""GridSample, AffineGrid, Col2Im, CenterCropPad and DeformConv through pplpy.load against
onnx.reference on random inputs, under every ISA tier; one and two threads give the same
bytes.

Where onnx.reference cannot be the oracle it is still the oracle of an equivalent case:
GridSample-16 against the reference of GridSample-20 with the mode renamed (the reference
knows only the new names), 1-D and 3-D DeformConv (the reference runs 2-D only) against the
2-D reference of the same convolution with a dimension added.  Bad inputs raise pplpy errors
that name the input to fix.
"""

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.errors import ShapeError, UnsupportedOpError

RNG = np.random.default_rng(11)
F32 = np.float32
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _model(node, inputs, opset, initializers=()):
    """A one-node model; inputs are (name, elem_type, dims) and the output's shape is left
    to inference."""
    graph = helper.make_graph(
        [node], node.op_type, [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(name, FLOAT if node.op_type != "CenterCropPad"
                                       else inputs[0][1], None) for name in node.output],
        [numpy_helper.from_array(v, k) for k, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _load(model, tmp_path, **kwargs):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(path, **kwargs)


def _check(model, feeds, isa, tmp_path, want, rtol=1e-5, atol=1e-5):
    """pplpy on one and two threads matches ``want`` and gives the same bytes both times."""
    results = [_load(model, tmp_path, max_isa=isa, num_threads=t).run(feeds)
               for t in (1, 2)]
    name = model.graph.output[0].name
    got = results[0][name]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(got, results[1][name])
    return got


def _reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)[0]


# ---------------------------------------------------------------------------------------
# GridSample

X_DIMS = {1: (2, 3, 6), 2: (2, 3, 5, 4), 3: (2, 3, 4, 3, 5)}
OUT_DIMS = {1: (7,), 2: (6, 7), 3: (3, 4, 5)}
MODES = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}  # opset 20 -> 16
PADDINGS = ("zeros", "border", "reflection")


def _grid_sample_model(x_dims, grid_dims, opset, mode, padding, align):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=align)
    return _model(node, [("x", FLOAT, list(x_dims)), ("grid", FLOAT, list(grid_dims))], opset)


def _grid(batch, out_dims, rank, spread=1.6):
    """Normalised coordinates, some beyond [-1, 1] so that every padding mode matters, and
    some exactly on pixel centres and edges."""
    grid = RNG.uniform(-spread, spread, (batch, *out_dims, rank)).astype(F32)
    flat = grid.reshape(-1)
    flat[::7] = np.round(flat[::7] * 4) / 4
    return grid


GRID_CASES = [(rank, mode, padding, align) for rank in (1, 2, 3) for mode in MODES
              for padding in PADDINGS for align in (0, 1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rank,mode,padding,align", GRID_CASES,
                         ids=[f"{r}d-{m}-{p}-align{a}" for r, m, p, a in GRID_CASES])
def test_grid_sample(rank, mode, padding, align, isa, tmp_path):
    x_dims = X_DIMS[rank]
    grid_dims = (x_dims[0], *OUT_DIMS[rank], rank)
    model = _grid_sample_model(x_dims, grid_dims, 20, mode, padding, align)
    feeds = {"x": RNG.standard_normal(x_dims).astype(F32),
             "grid": _grid(x_dims[0], OUT_DIMS[rank], rank)}
    want = _reference(model, feeds)
    _check(model, feeds, isa, tmp_path, want)
    # GridSample-22 is GridSample-20 with bfloat16 added: the same results.
    _check(_grid_sample_model(x_dims, grid_dims, 22, mode, padding, align), feeds, isa,
           tmp_path, want)


GRID16_CASES = list(itertools.product(MODES, PADDINGS, (0, 1)))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mode,padding,align", GRID16_CASES,
                         ids=[f"{MODES[m]}-{p}-align{a}" for m, p, a in GRID16_CASES])
def test_grid_sample_16(mode, padding, align, isa, tmp_path):
    """GridSample-16 names its modes bilinear / bicubic; the reference knows opset 20's."""
    x_dims, grid_dims = X_DIMS[2], (2, *OUT_DIMS[2], 2)
    feeds = {"x": RNG.standard_normal(x_dims).astype(F32), "grid": _grid(2, OUT_DIMS[2], 2)}
    want = _reference(_grid_sample_model(x_dims, grid_dims, 20, mode, padding, align), feeds)
    _check(_grid_sample_model(x_dims, grid_dims, 16, MODES[mode], padding, align), feeds, isa,
           tmp_path, want)


@pytest.mark.parametrize("mode", list(MODES))
def test_grid_sample_parallel(mode, tmp_path):
    """A grid large enough for a parallel step: every thread count, the same bytes."""
    x_dims, grid_dims = (2, 6, 16, 12), (2, 20, 18, 2)
    model = _grid_sample_model(x_dims, grid_dims, 20, mode, "reflection", 0)
    feeds = {"x": RNG.standard_normal(x_dims).astype(F32), "grid": _grid(2, (20, 18), 2)}
    want = _reference(model, feeds)
    got = [_load(model, tmp_path, num_threads=t).run(feeds)["y"] for t in (1, 2, 3)]
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], got[2])


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", list(MODES))
def test_grid_sample_non_finite_grid(mode, padding, tmp_path):
    """NaN, inf and huge coordinates read nothing outside X: NaN (and, under reflection,
    which has no reflection of infinity, inf) gives NaN, far points give zeros (zeros
    padding) or values of X (border, reflection)."""
    x = RNG.standard_normal((1, 2, 4, 5)).astype(F32)
    values = [np.nan, np.inf, -np.inf, 1e30, -1e30, 3e5]
    grid = np.array([[[[v, 0.1] for v in values], [[0.2, v] for v in values]]], F32)
    model = _grid_sample_model(x.shape, grid.shape, 20, mode, padding, 0)
    y = _load(model, tmp_path).run({"x": x, "grid": grid})["y"]
    undefined = np.isnan(grid) | (np.isinf(grid) if padding == "reflection" else False)
    nan = undefined.any(axis=-1)[None].repeat(2, axis=1)
    assert np.isnan(y[nan]).all()
    finite = y[~nan]
    if padding == "zeros":
        np.testing.assert_array_equal(finite, 0)
    else:
        assert np.isfinite(finite).all() and np.abs(finite).max() <= 4 * np.abs(x).max()
    if padding == "border":  # the reference clamps inf and huge values, as pplpy
        keep = np.where(np.isnan(grid), F32(0), grid)
        want = _reference(model, {"x": x, "grid": keep})
        got = _load(model, tmp_path).run({"x": x, "grid": keep})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_grid_sample_bad_inputs(tmp_path):
    x4 = (1, 2, 4, 4)
    with pytest.raises(ShapeError, match="grid's last dim is 3"):
        _load(_grid_sample_model(x4, (1, 3, 3, 3), 20, "linear", "zeros", 0), tmp_path)
    with pytest.raises(ShapeError, match="grid must have rank 4"):
        _load(_grid_sample_model(x4, (1, 3, 2), 20, "linear", "zeros", 0), tmp_path)
    with pytest.raises(ShapeError, match="grid's batch dim 2"):
        _load(_grid_sample_model(x4, (2, 3, 3, 2), 20, "linear", "zeros", 0), tmp_path)
    with pytest.raises(ShapeError, match="4-D X"):
        _load(_grid_sample_model((1, 2, 3, 3, 3), (1, 2, 2, 2, 3), 16, "bilinear", "zeros", 0),
              tmp_path)
    with pytest.raises(ShapeError, match="no pixels"):
        rt = _load(_grid_sample_model((1, 2, 0, 4), (1, 3, 3, 2), 20, "linear", "zeros", 0),
                   tmp_path)
        rt.run({"x": np.zeros((1, 2, 0, 4), F32), "grid": np.zeros((1, 3, 3, 2), F32)})
    for opset, mode in ((16, "linear"), (20, "bilinear"), (20, "area")):
        with pytest.raises(UnsupportedOpError, match="mode"):
            _load(_grid_sample_model(x4, (1, 3, 3, 2), opset, mode, "zeros", 0), tmp_path)
    with pytest.raises(UnsupportedOpError, match="padding_mode"):
        _load(_grid_sample_model(x4, (1, 3, 3, 2), 20, "linear", "wrap", 0), tmp_path)
    with pytest.raises(UnsupportedOpError, match="4 spatial dims"):
        _load(_grid_sample_model((1, 1, 2, 2, 2, 2), (1, 2, 2, 2, 2, 4), 20, "linear",
                                 "zeros", 0), tmp_path)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    model = _model(node, [("x", TensorProto.DOUBLE, list(x4)), ("grid", FLOAT, [1, 3, 3, 2])],
                   20)
    with pytest.raises(UnsupportedOpError, match="float32"):
        _load(model, tmp_path)


def test_grid_sample_bad_grid_fed_at_run_time(tmp_path):
    """Symbolic grid dims: the wrong last dim is caught when the run feeds it."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    model = _model(node, [("x", FLOAT, [1, 2, 4, 4]), ("grid", FLOAT, [1, "h", "w", "r"])],
                   20)
    rt = _load(model, tmp_path)
    x = np.ones((1, 2, 4, 4), F32)
    assert rt.run({"x": x, "grid": np.zeros((1, 3, 5, 2), F32)})["y"].shape == (1, 2, 3, 5)
    with pytest.raises(ShapeError, match="grid's last dim is 3"):
        rt.run({"x": x, "grid": np.zeros((1, 3, 5, 3), F32)})


# ---------------------------------------------------------------------------------------
# AffineGrid

AFFINE_SIZES = [(2, 3, 5, 7), (2, 1, 1, 4), (3, 2, 4, 3, 6), (1, 1, 2, 1, 3)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("align", (0, 1))
@pytest.mark.parametrize("size", AFFINE_SIZES, ids=["x".join(map(str, s)) for s in AFFINE_SIZES])
@pytest.mark.parametrize("constant_size", (False, True), ids=("fed-size", "constant-size"))
def test_affine_grid(size, align, constant_size, isa, tmp_path):
    rank = len(size) - 2
    theta = RNG.standard_normal((size[0], rank, rank + 1)).astype(F32)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    inputs = [("theta", FLOAT, list(theta.shape))]
    feeds = {"theta": theta}
    size = np.array(size, np.int64)
    if constant_size:
        model = _model(node, inputs, 20, [("size", size)])
    else:
        model = _model(node, inputs + [("size", INT64, [len(size)])], 20)
        feeds["size"] = size
    want = _reference(_model(node, inputs + [("size", INT64, [len(size)])], 20),
                      {"theta": theta, "size": size})
    _check(model, feeds, isa, tmp_path, want)


def test_affine_grid_bad_inputs(tmp_path):
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"])
    for theta_dims, size, match in (((2, 3, 4), [2, 1, 4, 4], "theta must have shape"),
                                    ((1, 2, 3), [2, 1, 4, 4], "theta must have shape"),
                                    ((1, 2, 3), [1, 4, 4], "size")):
        model = _model(node, [("theta", FLOAT, list(theta_dims))], 20,
                       [("size", np.array(size, np.int64))])
        with pytest.raises(ShapeError, match=match):
            _load(model, tmp_path)


# ---------------------------------------------------------------------------------------
# Col2Im

# image_shape, block_shape, attributes
COL2IM_CASES = {
    "2d": ((5, 6), (2, 3), {}),
    "2d_strides_pads": ((7, 6), (3, 2), dict(strides=[2, 1], pads=[1, 0, 2, 1])),
    "2d_dilations": ((8, 7), (2, 2), dict(dilations=[3, 2], strides=[1, 2])),
    "1d": ((11,), (3,), dict(strides=[2], pads=[1, 2], dilations=[2])),
    "3d": ((4, 5, 3), (2, 3, 2), dict(strides=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1])),
}


def _blocks(image, block, attrs):
    rank = len(image)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    return int(np.prod([(i + pads[k] + pads[k + rank] - (dilations[k] * (b - 1) + 1))
                        // strides[k] + 1 for k, (i, b) in enumerate(zip(image, block))]))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(COL2IM_CASES))
def test_col2im(name, isa, tmp_path):
    image, block, attrs = COL2IM_CASES[name]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), _blocks(image, block, attrs)))
    x = x.astype(F32)
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], **attrs)
    rank = len(image)
    model = _model(node, [("x", FLOAT, list(x.shape)), ("image_shape", INT64, [rank]),
                          ("block_shape", INT64, [rank])], 18)
    feeds = {"x": x, "image_shape": np.array(image, np.int64),
             "block_shape": np.array(block, np.int64)}
    _check(model, feeds, isa, tmp_path, _reference(model, feeds))


def test_col2im_parallel(tmp_path):
    image, block, attrs = (24, 20), (3, 3), dict(pads=[1, 1, 1, 1])
    x = RNG.standard_normal((1, 16 * 9, _blocks(image, block, attrs))).astype(F32)
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], **attrs)
    model = _model(node, [("x", FLOAT, list(x.shape))], 18,
                   [("image_shape", np.array(image, np.int64)),
                    ("block_shape", np.array(block, np.int64))])
    want = _reference(model, {"x": x})
    got = [_load(model, tmp_path, num_threads=t).run({"x": x})["y"] for t in (1, 3)]
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[0], got[1])


def test_col2im_bad_inputs(tmp_path):
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"])
    for x_dims, image, block, match in (
            ((1, 12, 19), (5, 6), (2, 3), "input's dim 2 \\(19\\) must be the number of block "
                                          "positions, 4 x 4 = 16"),
            ((1, 13, 16), (5, 6), (2, 3), "input's dim 1 \\(13\\) must be a multiple"),
            ((1, 12, 16), (5, 6), (2, 3, 1), "same length"),
            ((12, 16), (5, 6), (2, 3), "input must be"),
            ((1, 12, 16), (1, 6), (2, 3), "smaller than the effective kernel")):
        model = _model(node, [("x", FLOAT, list(x_dims))], 18,
                       [("image_shape", np.array(image, np.int64)),
                        ("block_shape", np.array(block, np.int64))])
        with pytest.raises(ShapeError, match=match):
            _load(model, tmp_path)


# ---------------------------------------------------------------------------------------
# CenterCropPad

# input dims, target shape, axes
CROP_CASES = {
    "crop_all": ((9, 8, 3), (4, 5, 3), None),
    "pad_all": ((3, 4, 2), (8, 7, 2), None),
    "crop_and_pad": ((9, 3, 5), (6, 6, 5), None),
    "axes": ((2, 9, 4), (3, 7), [0, 1]),
    "negative_axes": ((6, 5, 3), (3, 8), [-3, -2]),
    "empty_target": ((4, 5), (0,), [1]),
}
CROP_TYPES = (np.float32, np.int64, np.uint8, np.bool_)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", CROP_TYPES, ids=[np.dtype(t).name for t in CROP_TYPES])
@pytest.mark.parametrize("name", list(CROP_CASES))
def test_center_crop_pad(name, dtype, isa, tmp_path):
    dims, shape, axes = CROP_CASES[name]
    x = (RNG.standard_normal(dims) * 10).astype(dtype)
    kwargs = {} if axes is None else dict(axes=axes)
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **kwargs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model(node, [("x", elem, list(dims)), ("shape", INT64, [len(shape)])], 18)
    feeds = {"x": x, "shape": np.array(shape, np.int64)}
    _check(model, feeds, isa, tmp_path, _reference(model, feeds), rtol=0, atol=0)


def test_center_crop_pad_int32_shape(tmp_path):
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[1])
    model = _model(node, [("x", FLOAT, [2, 5])], 18, [("shape", np.array([2], np.int32))])
    x = RNG.standard_normal((2, 5)).astype(F32)
    np.testing.assert_array_equal(_load(model, tmp_path).run({"x": x})["y"], x[:, 1:3])


def test_center_crop_pad_bad_inputs(tmp_path):
    for shape, axes, match in (((3, 3), [0], "one dim per axis"),
                               ((3, 3), [0, 0], "repeat"),
                               ((3,), [2], "axis"),
                               ((-1,), [0], "non-negative")):
        node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=axes)
        model = _model(node, [("x", FLOAT, [4, 4])], 18, [("shape", np.array(shape, np.int64))])
        with pytest.raises(ShapeError, match=match):
            _load(model, tmp_path)


# ---------------------------------------------------------------------------------------
# DeformConv

# x dims, W dims, attributes, with bias, with mask
DEFORM_CASES = {
    "plain": ((1, 2, 5, 6), (3, 2, 2, 2), {}, False, False),
    "bias_mask": ((2, 2, 5, 5), (2, 2, 3, 3), {}, True, True),
    "pads_strides": ((1, 3, 7, 6), (2, 3, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 1]),
                     True, False),
    "dilations": ((1, 2, 7, 7), (2, 2, 2, 3), dict(dilations=[2, 1]), False, True),
    "groups": ((2, 4, 5, 4), (6, 2, 2, 2), dict(group=2, offset_group=2), True, True),
    "offset_groups": ((1, 4, 4, 5), (2, 4, 2, 2), dict(offset_group=4, pads=[1, 1, 1, 1]),
                      False, False),
    "kernel_shape": ((1, 1, 4, 4), (1, 1, 3, 3), dict(kernel_shape=[3, 3]), True, False),
}


def _deform_model(x_dims, w_dims, attrs, bias, mask, opset=19):
    rank = len(x_dims) - 2
    names = ["x", "w", "offset", "b" if bias else "", "mask" if mask else ""]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], **attrs)
    group = attrs.get("offset_group", 1)
    taps = int(np.prod(w_dims[2:]))
    out = _deform_out(x_dims, w_dims, attrs)
    inputs = [("x", FLOAT, list(x_dims)), ("w", FLOAT, list(w_dims)),
              ("offset", FLOAT, [x_dims[0], group * taps * rank, *out])]
    if bias:
        inputs.append(("b", FLOAT, [w_dims[0]]))
    if mask:
        inputs.append(("mask", FLOAT, [x_dims[0], group * taps, *out]))
    return _model(node, inputs, opset)


def _deform_out(x_dims, w_dims, attrs):
    rank = len(x_dims) - 2
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    return [(x_dims[2 + k] + pads[k] + pads[k + rank] - dilations[k] * (w_dims[2 + k] - 1) - 1)
            // strides[k] + 1 for k in range(rank)]


def _deform_feeds(model):
    """Random values for every input; offsets up to a few pixels, some off the image."""
    feeds = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        scale = 2.0 if i.name == "offset" else 1.0
        feeds[i.name] = (RNG.standard_normal(dims) * scale).astype(F32)
    return feeds


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", (19, 22))
@pytest.mark.parametrize("name", list(DEFORM_CASES))
def test_deform_conv(name, opset, isa, tmp_path):
    model = _deform_model(*DEFORM_CASES[name], opset=opset)
    feeds = _deform_feeds(model)
    _check(model, feeds, isa, tmp_path, _reference(model, feeds), rtol=1e-4, atol=1e-5)


def _add_depth(feeds):
    """2-D DeformConv feeds -> those of the 3-D one with a depth of 1: X, W, offset and mask
    get a depth dim of 1, each tap a depth offset of 0."""
    n, _, *o = feeds["offset"].shape
    coords = feeds["offset"].reshape(n, -1, 2, *o)
    offset = np.concatenate([np.zeros_like(coords[:, :, :1]), coords], axis=2)
    out = {"x": feeds["x"][:, :, None], "w": feeds["w"][:, :, None],
           "offset": offset.reshape(n, -1, 1, *o)}
    if "b" in feeds:
        out["b"] = feeds["b"]
    if "mask" in feeds:
        out["mask"] = feeds["mask"][:, :, None]
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["bias_mask", "groups", "pads_strides"])
def test_deform_conv_3d(name, isa, tmp_path):
    """3-D DeformConv with a depth of 1 is the 2-D one (the reference runs 2-D only)."""
    x_dims, w_dims, attrs, bias, mask = DEFORM_CASES[name]
    model_2d = _deform_model(x_dims, w_dims, attrs, bias, mask)
    feeds = _deform_feeds(model_2d)
    want = _reference(model_2d, feeds)
    attrs_3d = {k: ([1] + v if k != "pads" else [0] + v[:2] + [0] + v[2:])
                if isinstance(v, list) else v for k, v in attrs.items()}
    model = _deform_model((x_dims[0], x_dims[1], 1, *x_dims[2:]),
                          (w_dims[0], w_dims[1], 1, *w_dims[2:]), attrs_3d, bias, mask)
    _check(model, _add_depth(feeds), isa, tmp_path, want[:, :, None],
           rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_deform_conv_1d(isa, tmp_path):
    """1-D DeformConv is row 0 of a 2-D one whose kernel is 1 high with zero offsets along H
    (two rows: the reference needs H > 1)."""
    x = RNG.standard_normal((2, 2, 2, 9)).astype(F32)
    attrs = dict(strides=[1, 2], pads=[0, 1, 0, 2], dilations=[1, 2])
    model_2d = _deform_model(x.shape, (3, 2, 1, 3), attrs, True, True)
    feeds = _deform_feeds(model_2d)
    feeds["x"] = x
    feeds["offset"].reshape(2, 3, 2, -1)[:, :, 0] = 0  # no move along H
    want = _reference(model_2d, feeds)[:, :, 0]
    model = _deform_model((2, 2, 9), (3, 2, 3), dict(strides=[2], pads=[1, 2], dilations=[2]),
                          True, True)
    feeds_1d = {"x": x[:, :, 0], "w": feeds["w"][:, :, 0], "b": feeds["b"],
                "offset": feeds["offset"].reshape(2, 3, 2, 2, -1)[:, :, 1, 0],
                "mask": feeds["mask"][:, :, 0]}
    _check(model, feeds_1d, isa, tmp_path, want, rtol=1e-4, atol=1e-5)


def test_deform_conv_parallel_and_nan(tmp_path):
    """A size that makes both steps parallel: every thread count gives the same bytes; a NaN
    offset gives NaN where it is used, and nothing outside X is read."""
    model = _deform_model((1, 8, 16, 16), (4, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True, True)
    feeds = _deform_feeds(model)
    feeds["offset"][0, 0, 3, 4] = np.nan
    feeds["offset"][0, 1, 5, 5] = 1e30
    got = [_load(model, tmp_path, num_threads=t).run(feeds)["y"] for t in (1, 2, 3)]
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], got[2])
    assert np.isnan(got[0][0, :, 3, 4]).all()
    assert np.isfinite(np.delete(got[0].reshape(4, -1), 3 * 16 + 4, axis=1)).all()


def test_deform_conv_bad_inputs(tmp_path):
    model = _deform_model((1, 2, 5, 5), (2, 2, 2, 2), {}, True, True)
    inputs = model.graph.input
    for index, dims, match in ((2, [1, 8, 4, 3], "offset must have shape \\[1, 8, 4, 4\\]"),
                               (4, [1, 4, 4, 5], "mask must have shape \\[1, 4, 4, 4\\]"),
                               (3, [3], "B must have shape \\[2\\]"),
                               (1, [2, 3, 2, 2], "channels do not match"),
                               (1, [2, 2, 2], "W must have X's rank")):
        bad = onnx.ModelProto()
        bad.CopyFrom(model)
        bad.graph.input[index].CopyFrom(helper.make_tensor_value_info(inputs[index].name,
                                                                      FLOAT, dims))
        with pytest.raises(ShapeError, match=match):
            _load(bad, tmp_path)
    with pytest.raises(ShapeError, match="offset_group"):
        _load(_deform_model((1, 3, 5, 5), (2, 3, 2, 2), dict(offset_group=2), False, False),
              tmp_path)
    with pytest.raises(ShapeError, match="kernel_shape"):
        _load(_deform_model((1, 2, 5, 5), (2, 2, 2, 2), dict(kernel_shape=[3, 3]), False,
                            False), tmp_path)
