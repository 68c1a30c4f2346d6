"""The layernorm_fp32 impl family (row-wise normalisations as compiled steps) against numpy,
for every ISA variant this CPU can run, at 1 and 2 threads."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, to_n16cx, variant_fixture

FAMILY = "layernorm_fp32"

m = variant_fixture(FAMILY)
RNG = np.random.default_rng(5)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _randn(*shape, offset=0.0):
    return (RNG.standard_normal(shape) + offset).astype(np.float32)


def _stats(x, rms=False):
    x64 = x.astype(np.float64)
    mean = np.zeros((x.shape[0], 1)) if rms else x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    return mean, var


# (rows, n): single rows, lanes-and-tail lengths, a long row (partial-sum flushes), many rows.
ROW_SHAPES = [(1, 1), (3, 7), (5, 16), (4, 33), (2, 5000), (300, 257), (2, 70_000)]


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_layer_norm_rows(m, shape, num_threads, rms):
    rows, n = shape
    x = _randn(rows, n, offset=3.0)
    scale, bias = _randn(n), _randn(n)
    mean_out = np.full(rows, np.nan, np.float32)
    inv_out = np.full(rows, np.nan, np.float32)
    y = np.full_like(x, np.nan)
    eps = 1e-3
    m.row_norm_fp32(x, y, mean_out, inv_out, scale, None if rms else bias, 1, n, 1, eps, rms,
                    num_threads)
    mean, var = _stats(x, rms)
    inv = 1 / np.sqrt(var + eps)
    want = (x - mean) * inv * scale + (0 if rms else bias)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean_out, mean[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv_out, inv[:, 0], rtol=1e-4)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_layer_norm_broadcast_scale_by_strides(m, num_threads):
    """Scale (1, 5) and bias (4, 1) broadcast to a row of (4, 5), expanded per thread."""
    x = _randn(600, 20)
    scale, bias = _randn(1, 5), _randn(4, 1)
    y = np.empty_like(x)
    m.row_norm_fp32(x, y, None, None, scale, bias, 1, 20, 1, 1e-5, False, num_threads,
                    expand=((4, 5), (0, 1), (1, 0)))
    mean, var = _stats(x)
    want = ((x - mean) / np.sqrt(var + 1e-5)).reshape(600, 4, 5) * scale + bias
    np.testing.assert_allclose(y, want.reshape(600, 20), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("N,C,G,S", [(1, 4, 2, 9), (2, 6, 3, 100), (3, 32, 8, 3136)])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_instance_and_group_norm(m, N, C, G, S, num_threads):
    x = _randn(N, C, S, offset=10.0)
    scale, bias = _randn(C), _randn(C)
    # Instance: a row per plane, one scale value per row.
    y = np.empty_like(x)
    m.row_norm_fp32(x.reshape(N * C, S), y.reshape(N * C, S), None, None, scale, bias, C, 1, S,
                    1e-5, False, num_threads)
    mean = x.mean(axis=2, keepdims=True, dtype=np.float64)
    var = x.var(axis=2, keepdims=True, dtype=np.float64)
    want = (x - mean) / np.sqrt(var + 1e-5) * scale[:, None] + bias[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    # Group (opset 21): a row per group, a scale value per channel segment of S.
    xg = x.reshape(N, G, C // G * S)
    m.row_norm_fp32(x.reshape(N * G, -1), y.reshape(N * G, -1), None, None, scale, bias, G,
                    C // G, S, 1e-5, False, num_threads)
    mean = xg.mean(axis=2, keepdims=True, dtype=np.float64)
    var = xg.var(axis=2, keepdims=True, dtype=np.float64)
    want = ((xg - mean) / np.sqrt(var + 1e-5)).reshape(N, C, S) * scale[:, None] + bias[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("N,C,S,groups", [(1, 3, 5, 3), (2, 19, 63, 19), (2, 40, 3136, 40),
                                          (2, 40, 3136, 1), (1, 48, 1030, 3), (3, 12, 7, 4),
                                          (1, 64, 49, 32), (2, 96, 520, 6)])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_group_and_instance_norm_n16cx(m, N, C, S, groups, num_threads):
    """Groups of whole blocks, of parts of one, across blocks; planes of one chunk (512
    pixels) and of several with a short last one; groups == C is InstanceNormalization."""
    x = _randn(N, C, S, offset=-2.0)
    scale, bias = _randn(C), _randn(C)
    pad = -(-C // 16) * 16 - C
    xb = to_n16cx(x)
    yb = np.full_like(xb, np.nan)
    m.blocked_norm_fp32(xb, yb, np.pad(scale, (0, pad)), np.pad(bias, (0, pad)), C, groups,
                        1e-5, num_threads)
    xg = x.reshape(N, groups, -1)
    mean = xg.mean(axis=2, keepdims=True, dtype=np.float64)
    var = xg.var(axis=2, keepdims=True, dtype=np.float64)
    want = ((xg - mean) / np.sqrt(var + 1e-5)).reshape(N, C, S) * scale[:, None] \
        + bias[:, None]
    np.testing.assert_allclose(yb, to_n16cx(want.astype(np.float32)), rtol=1e-4, atol=1e-4)
    assert np.isfinite(yb).all()  # padding lanes too


def test_group_norm_n16cx_keeps_precision_far_from_zero(m):
    """A large mean and a small spread: the statistics come from deviations, not from
    E[x^2] - E[x]^2, and the output from x - mean.  The mean rounded to float32 (half an ulp
    of 1000 is 0.3% of the spread) bounds the error."""
    x = (1000.0 + 0.01 * _randn(1, 32, 2000)).astype(np.float32)
    ones, zeros = np.ones(32, np.float32), np.zeros(32, np.float32)
    yb = np.empty_like(to_n16cx(x))
    m.blocked_norm_fp32(to_n16cx(x), yb, ones, zeros, 32, 2, 1e-12, 2)
    xg = x.reshape(1, 2, -1).astype(np.float64)
    want = ((xg - xg.mean(-1, keepdims=True)) / xg.std(-1, keepdims=True)).reshape(1, 32, -1)
    np.testing.assert_allclose(yb, to_n16cx(want.astype(np.float32)), rtol=0, atol=5e-3)


@pytest.mark.parametrize("shape,axes", [((2, 3, 4, 5), (0, 2, 3)), ((2, 3, 4, 5), (1,)),
                                        ((2, 3, 4, 5), (3,)), ((3, 70, 400), (0, 1, 2)),
                                        ((4, 6, 50), (1, 2)), ((2, 3, 4, 5), (0, 2))])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_mvn(m, shape, axes, num_threads):
    x = _randn(*shape, offset=1.0)
    y = np.empty_like(x)
    m.mvn_fp32(x, y, axes, num_threads)
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    std = x.std(axis=axes, keepdims=True, dtype=np.float64)
    np.testing.assert_allclose(y, (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-4)


def _axis_reference(x, kind):
    if kind == "log_softmax":
        z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    if kind == "hardmax":
        idx = np.argmax(x, axis=1)
        y = np.zeros_like(x)
        np.put_along_axis(y, idx[:, None], 1, axis=1)
        return y
    p = 1 if kind == "l1" else 2
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=1, keepdims=True) ** (1 / p)
    return np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))


AXIS_SHAPES = [(1, 1, 1), (3, 17, 1), (2, 5, 7), (2, 4, 300), (1, 70_000, 1), (600, 33, 1),
               (3, 9, 2000)]


@pytest.mark.parametrize("kind", ["log_softmax", "hardmax", "l1", "l2"])
@pytest.mark.parametrize("shape", AXIS_SHAPES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_axis_ops(m, kind, shape, num_threads):
    x = _randn(*shape) * 4
    if kind == "hardmax":  # ties: the first maximum wins
        x = np.round(x)
    if kind in ("l1", "l2") and shape[0] > 1:
        x[0] = 0  # zero norm gives 0
    y = np.full_like(x, np.nan)
    m.axis_fp32(x, y, kind, num_threads)
    np.testing.assert_allclose(y, _axis_reference(x, kind), rtol=1e-5, atol=2e-6)


def test_invalid_arguments_are_refused(m):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError):
        m.row_norm_fp32(x, x, None, None, np.zeros(3, np.float32), None, 1, 2, 1, 1e-5, False, 1)
    with pytest.raises(ValueError):
        m.axis_fp32(x.reshape(1, 2, 3), x.reshape(1, 2, 3), "softmax", 1)
