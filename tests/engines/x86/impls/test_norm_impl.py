"""The norm_fp32 impl family against numpy and onnx.reference, for every ISA variant this CPU
can run."""

import numpy as np
import onnx
import pytest
from impl_variants import assert_variants_export_the_same_names, to_n16cx, variant_fixture
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


FAMILY = "norm_fp32"


m = variant_fixture(FAMILY)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _run_onnx(op_type, x, **attrs):
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [vi("x", TensorProto.FLOAT, x.shape)],
                              [vi("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _pad(v):
    out = np.zeros(-(-len(v) // 16) * 16, np.float32)
    out[: len(v)] = v
    return out


AFFINE_SHAPES = [(1, 1, 1), (2, 3, 1), (2, 17, 49), (1, 64, 3136), (3, 5, 30_000), (0, 4, 2)]


@pytest.mark.parametrize("shape", AFFINE_SHAPES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_channel_affine(m, shape, num_threads):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(shape[1]).astype(np.float32)
    shift = rng.standard_normal(shape[1]).astype(np.float32)
    want = x * scale[:, None] + shift[:, None]
    y = np.empty_like(x)
    m.channel_affine_ndarray_fp32(x, scale, shift, y, num_threads)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    xb = to_n16cx(x)
    yb = np.full_like(xb, np.nan)
    m.channel_affine_n16cx_fp32(xb, _pad(scale), _pad(shift), yb, num_threads)
    np.testing.assert_allclose(yb, to_n16cx(want), rtol=1e-6, atol=1e-6)
    # In place.
    m.channel_affine_ndarray_fp32(x, scale, shift, x, num_threads)
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=1e-6)
    m.channel_affine_n16cx_fp32(xb, _pad(scale), _pad(shift), xb, num_threads)
    np.testing.assert_allclose(xb, to_n16cx(want), rtol=1e-6, atol=1e-6)


def test_channel_affine_bad_arguments(m):
    x = np.zeros((1, 3, 4), np.float32)
    with pytest.raises(ValueError, match="expected C = 3"):
        m.channel_affine_ndarray_fp32(x, np.ones(2, np.float32), np.ones(3, np.float32), x, 1)
    xb = np.zeros((1, 1, 4, 16), np.float32)
    with pytest.raises(ValueError, match="padded"):
        m.channel_affine_n16cx_fp32(xb, np.ones(3, np.float32), np.ones(3, np.float32), xb, 1)


# (outer, n, inner): last-axis softmax (inner 1), a strided axis, tiles of 128 columns
# split between tasks, and size-1 axes.
SOFTMAX_SHAPES = [(1, 1, 1), (3, 1, 5), (4, 10, 1), (2, 1000, 1), (1, 70_000, 1), (2, 7, 33),
                  (1, 3, 300), (2, 64, 4096), (300, 300, 1)]


def _softmax64(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_softmax(m, shape, num_threads):
    # Against float64: a float32 sum of 70,000 terms is itself off by a few 1e-6.
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 5
    want = _softmax64(x)
    y = np.empty_like(x)
    m.softmax_fp32(x, y, num_threads)
    np.testing.assert_allclose(y, want, rtol=3e-6, atol=1e-9)
    m.log_softmax_fp32(x, y, num_threads)
    np.testing.assert_allclose(y, np.log(want), rtol=1e-5, atol=2e-6)
    # In place.
    m.softmax_fp32(x, x, num_threads)
    np.testing.assert_allclose(x, want, rtol=3e-6, atol=1e-9)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_matches_onnx_reference(m, op_type):
    x = np.random.default_rng(4).standard_normal((2, 3, 10, 5)).astype(np.float32)
    want = _run_onnx(op_type, x, axis=2)
    y = np.empty((6, 10, 5), np.float32)
    kernel = m.softmax_fp32 if op_type == "Softmax" else m.log_softmax_fp32
    kernel(x.reshape(6, 10, 5), y, 1)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=2e-6, atol=1e-6)


def test_softmax_is_stable_for_large_inputs(m):
    x = np.array([[[1000], [999], [-1000], [0]]], np.float32)
    y = np.empty_like(x)
    m.softmax_fp32(x, y, 1)
    e = np.exp(np.array([0, -1, -2000, -1000], np.float64))
    np.testing.assert_allclose(y.ravel(), e / e.sum(), rtol=1e-6, atol=1e-30)
    m.log_softmax_fp32(x, y, 1)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.ravel()[:2], np.log(e[:2] / e.sum()), rtol=1e-6)


def _lrn_numpy(x, size, alpha, beta, bias):
    """ONNX LRN's formula; onnx.reference's LRN loops over axis 0 instead of channels, so
    it is right only when N == C."""
    c = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = x.astype(np.float64) ** 2
    sums = np.stack([sq[:, max(0, i - lo): min(c, i + hi + 1)].sum(1) for i in range(c)], 1)
    return x / (bias + alpha / size * sums) ** beta


LRN_CASES = [
    ((1, 1, 1), 1, 1e-4, 0.75, 1.0),
    ((2, 5, 7), 3, 1e-2, 0.75, 1.0),
    ((1, 17, 49), 4, 0.5, 0.5, 2.0),    # even size: window one longer after c
    ((2, 64, 300), 5, 1e-3, 0.75, 1.0),
    ((1, 3, 5000), 7, 0.3, 1.3, 0.5),   # window wider than C
    ((1, 2000, 3), 5, 1e-1, 0.75, 1.0),  # many channels: narrow pixel tiles
    ((2, 6, 10), 3, 1.0, 0.75, 0.0),    # bias 0: the powf path
]


@pytest.mark.parametrize("case", LRN_CASES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_lrn(m, case, num_threads):
    shape, size, alpha, beta, bias = case
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 3
    want = _lrn_numpy(x, size, alpha, beta, bias)
    y = np.empty_like(x)
    m.lrn_fp32(x, y, size, alpha, beta, bias, num_threads)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-7)
    m.lrn_fp32(x, x, size, alpha, beta, bias, num_threads)    # in place
    np.testing.assert_allclose(x, want, rtol=2e-6, atol=1e-7)


def test_lrn_matches_onnx_reference(m):
    # N == C, the one case where onnx.reference's LRN is right (see _lrn_numpy).
    x = np.random.default_rng(3).standard_normal((6, 6, 4, 5)).astype(np.float32)
    want = _run_onnx("LRN", x, size=3, alpha=0.01, beta=0.75, bias=1.0)
    np.testing.assert_allclose(want, _lrn_numpy(x, 3, 0.01, 0.75, 1.0).reshape(want.shape),
                               rtol=1e-6)
    y = np.empty((6, 6, 20), np.float32)
    m.lrn_fp32(x.reshape(6, 6, 20), y, 3, 0.01, 0.75, 1.0, 1)
    np.testing.assert_allclose(y.reshape(want.shape), want, rtol=2e-6)
