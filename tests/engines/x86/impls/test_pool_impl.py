"""The pool_fp32 kernels of every ISA variant against onnx.reference and a brute-force oracle.

Each case draws a shape and ONNX attributes, resolves the geometry with resolve_pads (as the
kernel classes do), runs the kernel and compares with:

* ``ReferenceEvaluator`` on a one-node MaxPool / AveragePool / Global*Pool model, wherever
  onnx.reference (1.23) is right; ``_reference_trouble`` names the cases where it is not;
* ``_oracle``, a spec-following loop over output positions, everywhere (it is itself
  checked against onnx.reference by every case the reference handles).

N16CX kernels see the same data reordered to (N, ceil(C / 16), H, W, 16).
"""

import pathlib
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.errors import PplError
from pplpy.oputils.onnx.pool_geometry import resolve_pads
from pplpy.runtime.step import run_steps

FAMILY = "pool_fp32"
OPSET = 22
LANES = 16
CASES = settings(
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@pytest.fixture(params=ISA_NAMES, scope="module")
def mod(request):
    try:
        return load_variant(FAMILY, request.param)
    except PplError:
        pytest.skip(f"CPU lacks {request.param}")


# ---------------------------------------------------------------------------------------
# Reference, oracle and layout helpers


def _run_reference(op_type, x, n_outputs=1, **attrs):
    """Outputs of onnx.reference on a one-node model of op_type."""
    names = ["y", "indices"][:n_outputs]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    outputs = [
        helper.make_tensor_value_info(
            n, TensorProto.INT64 if n == "indices" else TensorProto.FLOAT, None
        )
        for n in names
    ]
    node = helper.make_node(op_type, ["x"], names, **attrs)
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty window
        return ReferenceEvaluator(model).run(None, {"x": x})


def _oracle(x, kind, geo, count_include_pad=False, storage_order=0):
    """Brute-force pooling of x (N, C, *spatial): y, and for max the ONNX Indices."""
    n, c, *in_spatial = x.shape
    out = geo["out"]
    rank = len(in_spatial)
    plane = int(np.prod(in_spatial))
    y = np.empty((n, c, *out), np.float32)
    indices = np.empty((n, c, *out), np.int64)
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape(n, c)
    for o in np.ndindex(*out):
        taps, counted = [], 0
        for k in np.ndindex(*geo["kernel"]):
            pos = [
                o[a] * geo["strides"][a] - geo["pads_begin"][a] + k[a] * geo["dilations"][a]
                for a in range(rank)
            ]
            inside = all(0 <= p < size for p, size in zip(pos, in_spatial))
            in_pads = all(
                -geo["pads_begin"][a] <= pos[a] < in_spatial[a] + geo["pads_end"][a]
                for a in range(rank)
            )
            taps += [pos] if inside else []
            counted += in_pads if count_include_pad else inside
        at = (slice(None), slice(None), *o)
        if not taps:
            y[at] = -np.inf if kind == "max" else (0.0 if counted else np.nan)
            indices[at] = -1
            continue
        coords = tuple(np.array(taps).T)
        vals = x[(slice(None), slice(None), *coords)]  # (N, C, taps), taps in row-major order
        if kind == "max":
            first = vals.argmax(axis=-1)  # first maximum, as ONNX Runtime and onnx.reference
            y[at] = vals.max(axis=-1)
            order = "F" if storage_order == 1 else "C"
            flat = np.ravel_multi_index(coords, in_spatial, order=order)
            indices[at] = base + flat[first]
        else:
            y[at] = vals.astype(np.float64).sum(axis=-1) / counted
    return y, indices


def _lift(shape_or_attr, fill):
    """Pad a per-axis tuple on the left to the kernels' three spatial axes."""
    return (fill,) * (3 - len(shape_or_attr)) + tuple(shape_or_attr)


def _to_5d(a):
    return a.reshape(*a.shape[:2], *_lift(a.shape[2:], 1))


def to_n16cx(x):
    """(N, C, H, W) -> (N, ceil(C / 16), H, W, 16), the channel padding zero-filled."""
    n, c, h, w = x.shape
    blocks = -(-c // LANES)
    padded = np.zeros((n, blocks * LANES, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, blocks, LANES, h, w).transpose(0, 1, 3, 4, 2))


def from_n16cx(x, channels):
    """(N, Cb, H, W, 16) -> (N, C, H, W), dropping the padding channels."""
    n, blocks, h, w, _ = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, blocks * LANES, h, w)[:, :channels]


# ---------------------------------------------------------------------------------------
# Case generation


def _window_has_no_input(geo, in_spatial):
    """Some output window holds no input cell (all its taps fall in padding or between)."""
    for axis, size in enumerate(in_spatial):
        for o in range(geo["out"][axis]):
            start = o * geo["strides"][axis] - geo["pads_begin"][axis]
            taps = [start + k * geo["dilations"][axis] for k in range(geo["kernel"][axis])]
            if not any(0 <= t < size for t in taps):
                return True
    return False


@st.composite
def pool_cases(draw, ranks=(1, 2, 3), kind="max"):
    rank = draw(st.sampled_from(ranks))
    max_size = {1: 14, 2: 9, 3: 6}[rank]
    in_spatial = tuple(draw(st.integers(1, max_size)) for _ in range(rank))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilations = tuple(draw(st.sampled_from([1, 1, 2, 3])) for _ in range(rank))
    auto_pad = draw(st.sampled_from(["NOTSET"] * 3 + ["VALID", "SAME_UPPER", "SAME_LOWER"]))
    pads = None
    if auto_pad == "NOTSET":
        pads = tuple(draw(st.integers(0, 2)) for _ in range(2 * rank))
    ceil_mode = auto_pad == "NOTSET" and draw(st.booleans())
    try:
        out, pads_begin, pads_end = resolve_pads(
            in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode
        )
    except ValueError:
        assume(False)
    geo = dict(
        out=out, kernel=kernel, strides=strides, dilations=dilations,
        pads_begin=pads_begin, pads_end=pads_end,
    )
    # Windows that see no input cell are legal but odd (and onnx.reference fails on them):
    # keep about one case in five.
    if draw(st.integers(0, 4)):
        assume(not _window_has_no_input(geo, in_spatial))
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations))
    if pads is not None:
        attrs["pads"] = list(pads)
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    if ceil_mode:
        attrs["ceil_mode"] = 1
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        # Few distinct values: ties test that the first maximum wins.
        x = rng.integers(-2, 3, size=(n, c, *in_spatial)).astype(np.float32)
    else:
        x = rng.standard_normal((n, c, *in_spatial)).astype(np.float32)
    return dict(x=x, geo=geo, attrs=attrs, auto_pad=auto_pad, ceil_mode=ceil_mode)


def _same_totals(geo, in_spatial):
    """The total SAME padding the spec's formula gives, before shape inference's max(0, .)."""
    return [
        (o - 1) * s + (k - 1) * d + 1 - n
        for o, s, k, d, n in zip(
            geo["out"], geo["strides"], geo["kernel"], geo["dilations"], in_spatial
        )
    ]


def _reference_trouble(op_type, case, with_indices=False):
    """Why onnx.reference 1.23 cannot judge this case, or None if it can (also a statistic)."""
    reason = _reference_trouble_reason(op_type, case, with_indices)
    event(f"onnx.reference skipped: {reason}" if reason else "onnx.reference compared")
    return reason


def _reference_trouble_reason(op_type, case, with_indices):
    geo, auto_pad = case["geo"], case["auto_pad"]
    in_spatial = case["x"].shape[2:]
    unit_steps = set(geo["strides"]) == {1} and set(geo["dilations"]) == {1}
    if _window_has_no_input(geo, in_spatial):
        return "np.max of an empty window raises; its avg and Indices outputs are ad hoc"
    if op_type == "MaxPool" and unit_steps:
        # MaxPool with unit strides and dilations takes _op_common_pool's path.
        if with_indices:
            return "its unit-step path computes Indices in output coordinates"
        if len(in_spatial) != 2:
            return "its unit-step path ignores pads and auto_pad outside 2-D"
        if case["ceil_mode"] and any(geo["pads_begin"] + geo["pads_end"]):
            return "its unit-step path counts pads twice with ceil_mode"
    if op_type == "MaxPool" and not unit_steps:
        if auto_pad == "SAME_LOWER":
            return "its strided/dilated path sizes SAME_LOWER with floor, pads it as SAME_UPPER"
        if auto_pad == "SAME_UPPER" and min(_same_totals(geo, in_spatial)) < 0:
            return "its strided/dilated path pads SAME_UPPER by a negative amount"
    if op_type == "AveragePool" and auto_pad != "NOTSET" and set(geo["dilations"]) != {1}:
        return "its auto_pad path ignores dilations"
    if op_type == "AveragePool" and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if min(_same_totals(geo, in_spatial)) < 0:
            return "it pads SAME by a negative amount when the kernel is shorter than the stride"
    if op_type == "AveragePool" and case["ceil_mode"]:
        for axis, n in enumerate(in_spatial):
            ek = (geo["kernel"][axis] - 1) * geo["dilations"][axis] + 1
            needed = (geo["out"][axis] - 1) * geo["strides"][axis] + ek
            extra = needed - n - geo["pads_begin"][axis] - geo["pads_end"][axis]
            if extra >= 2:
                return "with ceil_mode it puts part of the extra cells before the input"
            padded = n + geo["pads_begin"][axis] + geo["pads_end"][axis] + max(extra, 0)
            if (padded - ek) // geo["strides"][axis] + 1 != geo["out"][axis]:
                return "with ceil_mode it still visits the window the last-window rule drops"
    return None


def _check(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=what)


# ---------------------------------------------------------------------------------------
# NDARRAY MaxPool and AveragePool


@CASES
@given(case=pool_cases(), with_indices=st.booleans(), storage_order=st.sampled_from([0, 1]))
def test_maxpool_ndarray(mod, case, with_indices, storage_order):
    x, geo = case["x"], case["geo"]
    y = np.empty((*x.shape[:2], *geo["out"]), np.float32)
    indices = np.empty(y.shape, np.int64) if with_indices else None
    mod.maxpool_ndarray_fp32(
        _to_5d(x), _to_5d(y), None if indices is None else _to_5d(indices),
        _lift(geo["kernel"], 1), _lift(geo["strides"], 1), _lift(geo["pads_begin"], 0),
        _lift(geo["dilations"], 1), storage_order, 2,
    )
    want_y, want_indices = _oracle(x, "max", geo, storage_order=storage_order)
    _check(y, want_y, "y vs oracle")
    if with_indices:
        np.testing.assert_array_equal(indices, want_indices, err_msg="indices vs oracle")
    if _reference_trouble("MaxPool", case, with_indices) is None:
        attrs = dict(case["attrs"], storage_order=storage_order)
        ref = _run_reference("MaxPool", x, 2 if with_indices else 1, **attrs)
        _check(y, ref[0], "y vs onnx.reference")
        if with_indices:
            np.testing.assert_array_equal(indices, ref[1], err_msg="indices vs onnx.reference")


@CASES
@given(case=pool_cases(kind="avg"), count_include_pad=st.booleans())
def test_avgpool_ndarray(mod, case, count_include_pad):
    x, geo = case["x"], case["geo"]
    y = np.empty((*x.shape[:2], *geo["out"]), np.float32)
    mod.avgpool_ndarray_fp32(
        _to_5d(x), _to_5d(y), _lift(geo["kernel"], 1), _lift(geo["strides"], 1),
        _lift(geo["pads_begin"], 0), _lift(geo["pads_end"], 0), _lift(geo["dilations"], 1),
        count_include_pad, 2,
    )
    _check(y, _oracle(x, "avg", geo, count_include_pad)[0], "y vs oracle")
    if _reference_trouble("AveragePool", case) is None:
        attrs = dict(case["attrs"], count_include_pad=int(count_include_pad))
        _check(y, _run_reference("AveragePool", x, **attrs)[0], "y vs onnx.reference")


def test_ceil_mode_cells_beyond_pads_are_never_counted(mod):
    # in 5, kernel 3, stride 2, pads (1, 0), ceil_mode: windows start at -1, 1, 3; the last
    # covers 3, 4 and a ceil_mode cell at 5 that count_include_pad must not count.
    out, pb, pe = resolve_pads([5], [3], [2], None, [1, 0], "NOTSET", True)
    assert (out, pb, pe) == ((3,), (1,), (0,))
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 1, 1, 5)
    y = np.empty((1, 1, 1, 1, 3), np.float32)
    mod.avgpool_ndarray_fp32(x, y, (1, 1, 3), (1, 1, 2), (0, 0, 1), (0, 0, 0), (1, 1, 1), True, 1)
    np.testing.assert_allclose(y.ravel(), [(0 + 1 + 2) / 3, (2 + 3 + 4) / 3, (4 + 5) / 2])
    ref = _run_reference("AveragePool", x.reshape(1, 1, 5), kernel_shape=[3], strides=[2],
                         pads=[1, 0], ceil_mode=1, count_include_pad=1)[0]
    np.testing.assert_allclose(y.ravel(), ref.ravel())


def test_window_wholly_in_padding(mod):
    # pads 3 > kernel 2: the first window sees only padding.  MaxPool gives -inf and index
    # -1; AveragePool gives NaN (0 / 0) without count_include_pad and 0 with it.
    x = np.ones((1, 1, 1, 1, 2), np.float32)
    y = np.empty((1, 1, 1, 1, 4), np.float32)
    indices = np.empty(y.shape, np.int64)
    geometry = ((1, 1, 2), (1, 1, 2), (0, 0, 3))
    mod.maxpool_ndarray_fp32(x, y, indices, *geometry, (1, 1, 1), 0, 1)
    assert y.ravel().tolist() == [-np.inf, 1.0, 1.0, -np.inf]
    assert indices.ravel().tolist() == [-1, 0, 1, -1]
    mod.avgpool_ndarray_fp32(x, y, *geometry, (0, 0, 3), (1, 1, 1), False, 1)
    np.testing.assert_array_equal(y.ravel(), [np.nan, 1.0, 1.0, np.nan])
    mod.avgpool_ndarray_fp32(x, y, *geometry, (0, 0, 3), (1, 1, 1), True, 1)
    np.testing.assert_array_equal(y.ravel(), [0.0, 0.5, 0.5, 0.0])


def test_thread_counts_agree(mod):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 3, 17, 19)).astype(np.float32)
    geometry = ((2, 3, 3), (1, 2, 2), (1, 1, 1))
    results = []
    for threads in (0, 1, 2, 7):
        y = np.empty((2, 5, 4, 9, 10), np.float32)
        indices = np.empty(y.shape, np.int64)
        mod.maxpool_ndarray_fp32(x, y, indices, *geometry, (1, 1, 1), 1, threads)
        a = np.empty_like(y)
        mod.avgpool_ndarray_fp32(x, a, *geometry, (1, 1, 1), (1, 1, 1), True, threads)
        results.append((y, indices, a))
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            np.testing.assert_array_equal(got, want)


def test_resnet_stem_maxpool(mod):
    # 3x3 stride 2 pad 1 on 64 x 56 x 56: a larger shape, against the oracle.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    out, pb, pe = resolve_pads([56, 56], [3, 3], [2, 2], None, [1, 1, 1, 1], "NOTSET")
    geo = dict(out=out, kernel=(3, 3), strides=(2, 2), dilations=(1, 1), pads_begin=pb, pads_end=pe)
    y = np.empty((1, 64, *out), np.float32)
    mod.maxpool_ndarray_fp32(_to_5d(x), _to_5d(y), None, (1, 3, 3), (1, 2, 2), (0, 1, 1),
                             (1, 1, 1), 0, 2)
    want = _oracle(x, "max", geo)[0]
    np.testing.assert_array_equal(y, want)
    yb = np.empty((1, 4, *out, LANES), np.float32)
    mod.maxpool_n16cx_fp32(to_n16cx(x), yb, (3, 3), (2, 2), (1, 1), (1, 1), 2)
    np.testing.assert_array_equal(from_n16cx(yb, 64), want)


def test_arguments_are_checked(mod):
    x = np.zeros((1, 2, 1, 4, 4), np.float32)
    y = np.zeros((1, 2, 1, 2, 2), np.float32)
    ok = ((1, 2, 2), (1, 2, 2), (0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match="strides"):
        mod.maxpool_ndarray_fp32(x, y, None, ok[0], (1, 0, 2), ok[2], ok[3], 0, 1)
    with pytest.raises(ValueError, match="kernel: expected 3 values"):
        mod.maxpool_ndarray_fp32(x, y, None, (2, 2), *ok[1:], 0, 1)
    with pytest.raises(ValueError, match="indices"):
        mod.maxpool_ndarray_fp32(x, y, np.zeros((1, 2, 1, 2, 3), np.int64), *ok, 0, 1)
    with pytest.raises(ValueError, match="storage_order"):
        mod.maxpool_ndarray_fp32(x, y, None, *ok, 2, 1)
    with pytest.raises(ValueError, match="first 2 dims"):
        mod.avgpool_ndarray_fp32(x, np.zeros((1, 3, 1, 2, 2), np.float32), *ok[:3], (0, 0, 0),
                                 ok[3], False, 1)
    with pytest.raises(ValueError, match="16-channel block"):
        mod.maxpool_n16cx_fp32(x, y, (2, 2), (2, 2), (0, 0), (1, 1), 1)


# ---------------------------------------------------------------------------------------
# N16CX MaxPool and AveragePool (2-D)


@CASES
@given(case=pool_cases(ranks=(2,)))
def test_maxpool_n16cx(mod, case):
    x, geo = case["x"], case["geo"]
    c = x.shape[1]
    yb = np.empty((x.shape[0], -(-c // LANES), *geo["out"], LANES), np.float32)
    mod.maxpool_n16cx_fp32(to_n16cx(x), yb, geo["kernel"], geo["strides"], geo["pads_begin"],
                           geo["dilations"], 2)
    y = from_n16cx(yb, c)
    _check(y, _oracle(x, "max", geo)[0], "y vs oracle")
    if _reference_trouble("MaxPool", case) is None:
        _check(y, _run_reference("MaxPool", x, **case["attrs"])[0], "y vs onnx.reference")


@CASES
@given(case=pool_cases(ranks=(2,), kind="avg"), count_include_pad=st.booleans())
def test_avgpool_n16cx(mod, case, count_include_pad):
    x, geo = case["x"], case["geo"]
    c = x.shape[1]
    yb = np.empty((x.shape[0], -(-c // LANES), *geo["out"], LANES), np.float32)
    mod.avgpool_n16cx_fp32(to_n16cx(x), yb, geo["kernel"], geo["strides"], geo["pads_begin"],
                           geo["pads_end"], geo["dilations"], count_include_pad, 2)
    y = from_n16cx(yb, c)
    _check(y, _oracle(x, "avg", geo, count_include_pad)[0], "y vs oracle")
    if _reference_trouble("AveragePool", case) is None:
        attrs = dict(case["attrs"], count_include_pad=int(count_include_pad))
        _check(y, _run_reference("AveragePool", x, **attrs)[0], "y vs onnx.reference")


# ---------------------------------------------------------------------------------------
# Global pooling


@st.composite
def global_cases(draw, ranks=(1, 2, 3)):
    rank = draw(st.sampled_from(ranks))
    spatial = tuple(draw(st.integers(1, {1: 40, 2: 12, 3: 6}[rank])) for _ in range(rank))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return rng.standard_normal((n, c, *spatial)).astype(np.float32)


def _global_check(actual, expected, x, what):
    # A float32 sum's error grows with the magnitude of what it adds, not with the mean.
    n, c = x.shape[:2]
    scale = np.abs(x).reshape(n, c, -1).mean(axis=-1)
    error = np.abs(actual.reshape(n, c) - expected.reshape(n, c))
    np.testing.assert_array_less(error, 1e-5 * scale + 1e-7, err_msg=what)


@CASES
@given(x=global_cases())
def test_global_pool_ndarray(mod, x):
    n, c = x.shape[:2]
    rows = x.reshape(n * c, -1)
    y = np.empty(n * c, np.float32)
    mod.global_avgpool_ndarray_fp32(rows, y, 2)
    ref = _run_reference("GlobalAveragePool", x)[0].reshape(n, c)
    _global_check(y.reshape(n, c), ref, x, "avg vs onnx.reference")
    mod.global_maxpool_ndarray_fp32(rows, y, 2)
    np.testing.assert_array_equal(y, rows.max(axis=1), err_msg="max vs numpy")
    if x.ndim == 4:
        # onnx.reference's GlobalMaxPool reduces axes (rank - 2, rank - 1) + ..., right
        # only for 2-D spatial shapes.
        ref = _run_reference("GlobalMaxPool", x)[0].reshape(n, c)
        np.testing.assert_array_equal(y.reshape(n, c), ref, err_msg="max vs onnx.reference")


@CASES
@given(x=global_cases(ranks=(2,)))
def test_global_pool_n16cx(mod, x):
    n, c, h, w = x.shape
    xb = to_n16cx(x).reshape(n, -1, h * w, LANES)
    yb = np.empty((n, xb.shape[1], LANES), np.float32)
    mod.global_avgpool_n16cx_fp32(xb, yb, 2)
    ref = _run_reference("GlobalAveragePool", x)[0]
    _global_check(from_n16cx(yb.reshape(n, -1, 1, 1, LANES), c), ref, x, "avg vs onnx.reference")
    mod.global_maxpool_n16cx_fp32(xb, yb, 2)
    ref = _run_reference("GlobalMaxPool", x)[0]
    np.testing.assert_array_equal(from_n16cx(yb.reshape(n, -1, 1, 1, LANES), c), ref)


def test_global_avgpool_large_plane(mod):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 3136)) + 3).astype(np.float32)
    y = np.empty(4, np.float32)
    mod.global_avgpool_ndarray_fp32(x, y, 2)
    np.testing.assert_allclose(y, x.astype(np.float64).mean(axis=1), rtol=2e-6)


# ---------------------------------------------------------------------------------------
# The variants


def test_variants_are_one_body():
    # Every variant is the shared body after its vector width (the post-op chains' vectors)
    # and nothing else, so all export the same names even where a tier cannot be imported
    # on this CPU.
    here = pathlib.Path(__file__).resolve()
    impls = here.parents[4] / "pplpy" / "engines" / "x86" / "impls"
    widths = {"avx512": 16, "fma": 8, "sse": 4}
    for isa in ISA_NAMES:
        lines = (impls / f"_{FAMILY}_{isa}.pyx").read_text().splitlines()
        code = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        assert code == ["cdef extern from *:", '"""', f"#define PPL_VLEN {widths[isa]}", '"""',
                        f'include "_{FAMILY}.pxi"'], isa


def test_loadable_variants_export_the_same_names():
    public = {}
    for isa in ISA_NAMES:
        try:
            module = load_variant(FAMILY, isa)
        except PplError:
            continue  # a tier the CPU lacks cannot be imported: see test_variants_are_one_body
        public[isa] = sorted(name for name in dir(module) if not name.startswith("_"))
    assert public, "no variant of pool_fp32 could be loaded"
    pools = [f"{kind}_{layout}" for kind in ("maxpool", "avgpool", "global_maxpool",
                                             "global_avgpool") for layout in ("ndarray", "n16cx")]
    # The test wrappers, the step makers the kernels call, run_steps the wrappers use, and
    # the post-op names _post_chain_fp32.pxi imports.
    expected = sorted([f"{p}_fp32" for p in pools] + [f"make_{p}_step" for p in pools]
                      + ["run_steps", "BinaryAlg", "Broadcast", "MAX_POST_OPS", "PostOp",
                         "PostOpKind"])
    for isa, names in public.items():
        assert names == expected, isa


# ---------------------------------------------------------------------------------------
# Steps: team sizes, N16CX beyond 2-D, the step makers themselves


def _address(a):
    return a.__array_interface__["data"][0]


def test_n16cx_and_global_thread_counts_agree(mod):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 19, 40, 41)).astype(np.float32)   # 19: a padded block
    xb = to_n16cx(x)
    geometry = ((3, 3), (2, 2), (1, 1))

    def runs(threads):
        y = np.empty((2, 2, 20, 21, LANES), np.float32)
        mod.maxpool_n16cx_fp32(xb, y, *geometry, (1, 1), threads)
        a = np.empty_like(y)
        mod.avgpool_n16cx_fp32(xb, a, *geometry, (1, 1), (1, 1), False, threads)
        g = np.empty((2 * 19,), np.float32)
        mod.global_avgpool_ndarray_fp32(x.reshape(2 * 19, -1), g, threads)
        gb = np.empty((2, 2, LANES), np.float32)
        mod.global_avgpool_n16cx_fp32(xb.reshape(2, 2, -1, LANES), gb, threads)
        return [y, a, g, gb]

    for got, want in zip(runs(2), runs(1)):
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("spatial", [(11,), (4, 5, 6)], ids=str)
def test_n16cx_steps_take_1d_and_3d(mod, spatial):
    # The one row driver serves N16CX of any rank 1-3; compare with the NDARRAY kernels.
    rng = np.random.default_rng(4)
    n, c = 2, 19
    rank = len(spatial)
    x = rng.standard_normal((n, c, *spatial)).astype(np.float32)
    out, pb, pe = resolve_pads(spatial, [3] * rank, [2] * rank, None, [1] * (2 * rank),
                               "NOTSET", True)
    blocks = -(-c // LANES)
    flat = to_n16cx(x.reshape(n, c, 1, -1)).reshape(n, blocks, *spatial, LANES)
    for kind in ("max", "avg"):
        want = _oracle(x, kind, dict(out=out, kernel=(3,) * rank, strides=(2,) * rank,
                                     dilations=(1,) * rank, pads_begin=pb, pads_end=pe),
                       count_include_pad=True)[0]
        yb = np.full((n, blocks, *out, LANES), np.nan, np.float32)
        common = ((3,) * rank, (2,) * rank, pb)
        if kind == "max":
            step = mod.make_maxpool_n16cx_step(_address(flat), _address(yb), flat.shape,
                                               yb.shape, *common, (1,) * rank)
        else:
            step = mod.make_avgpool_n16cx_step(_address(flat), _address(yb), flat.shape,
                                               yb.shape, *common, pe, (1,) * rank, True)
        run_steps([step], 2)
        got = from_n16cx(yb.reshape(n, blocks, 1, -1, LANES), c).reshape(want.shape)
        _check(got, want, kind)


def test_step_makers_check_and_size_their_steps(mod):
    x = np.zeros((1, 64, 1, 112, 112), np.float32)
    y = np.zeros((1, 64, 1, 56, 56), np.float32)
    big = mod.make_maxpool_ndarray_step(_address(x), _address(y), 0, x.shape, y.shape,
                                        (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1))
    assert big.parallel
    small = mod.make_maxpool_ndarray_step(_address(x), _address(y), 0, (1, 1, 1, 8, 8),
                                          (1, 1, 1, 4, 4), (1, 2, 2), (1, 2, 2), (0, 0, 0),
                                          (1, 1, 1))
    assert not small.parallel
    assert not mod.make_global_avgpool_ndarray_step(_address(x), _address(y), 8, 49).parallel
    with pytest.raises(ValueError, match="1 to 3 spatial dims"):
        mod.make_avgpool_ndarray_step(_address(x), _address(y), (1, 64), (1, 64), (), (), (),
                                      (), (), False)
    with pytest.raises(ValueError, match="empty spatial size"):
        mod.make_global_maxpool_n16cx_step(_address(x), _address(y), 4, 0)


def _nan_cases(rng):
    x = rng.standard_normal((2, 20, 9, 11)).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = np.nan
    x[0, 3] = np.nan  # a plane wholly NaN
    x[1, 4, :, 2] = np.inf
    x[1, 5] = -np.inf
    x[1, 6] = np.inf  # a plane wholly +inf: inf, not NaN
    return x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernel,stride,pad", [(3, 2, 1), (2, 1, 0), (3, 1, 1)])
def test_a_nan_in_a_window_makes_its_max_nan(mod, kernel, stride, pad, threads):
    """numpy's max (and PyTorch's max_pool): a NaN anywhere in a window gives NaN, in every
    layout and path; infinities stay what they are.  (onnx.reference keeps a NaN only as a
    window's first tap, ONNX Runtime only as its last.)"""
    x = _nan_cases(np.random.default_rng(5))
    n, c = x.shape[:2]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kernel, kernel), axis=(2, 3))
    want = windows[:, :, ::stride, ::stride].max(axis=(-1, -2))
    assert np.isnan(want).any() and np.isinf(want).any()
    y = np.empty(want.shape, np.float32)
    args = ((1, kernel, kernel), (1, stride, stride), (0, pad, pad), (1, 1, 1))
    mod.maxpool_ndarray_fp32(_to_5d(x), _to_5d(y), None, *args, 0, threads)
    np.testing.assert_array_equal(y, want)
    indices = np.empty(want.shape, np.int64)
    mod.maxpool_ndarray_fp32(_to_5d(x), _to_5d(y), _to_5d(indices), *args, 0, threads)
    np.testing.assert_array_equal(y, want)
    # Where the max is NaN, its index is one of the window's NaN.
    assert np.isnan(x.reshape(-1)[indices[np.isnan(want)]]).all()
    yb = np.empty((n, 2, *want.shape[2:], LANES), np.float32)
    mod.maxpool_n16cx_fp32(to_n16cx(x), yb, (kernel, kernel), (stride, stride), (pad, pad),
                           (1, 1), threads)
    np.testing.assert_array_equal(from_n16cx(yb, c), want)


@pytest.mark.parametrize("threads", [1, 2])
def test_global_max_of_a_plane_with_a_nan_is_nan(mod, threads):
    x = _nan_cases(np.random.default_rng(6))
    n, c, h, w = x.shape
    want = x.reshape(n, c, -1).max(axis=-1)
    assert np.isnan(want).any() and (want == np.inf).any() and (want == -np.inf).any()
    rows = x.reshape(n * c, -1)
    y = np.empty(n * c, np.float32)
    mod.global_maxpool_ndarray_fp32(rows, y, threads)
    np.testing.assert_array_equal(y.reshape(n, c), want)
    xb = to_n16cx(x).reshape(n, -1, h * w, LANES)
    yb = np.empty((n, xb.shape[1], LANES), np.float32)
    mod.global_maxpool_n16cx_fp32(xb, yb, threads)
    np.testing.assert_array_equal(from_n16cx(yb.reshape(n, -1, 1, 1, LANES), c),
                                  want.reshape(n, c, 1, 1))
