"""The norm_fp32 impl family against numpy and onnx.reference, for every ISA variant this CPU
can run."""

import numpy as np
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


AFFINE_SHAPES = [(1, 1, 1), (2, 3, 1), (2, 17, 49), (1, 64, 3136), (3, 5, 30_000), (0, 4, 2),
                 (37, 45, 1), (5001, 19, 1)]  # S = 1: along rows (two threads cut a row)


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


@pytest.mark.parametrize("n", [5, 37, 196])
def test_softmax_rows_with_infinities_and_nan_follow_the_definition(m, n):
    """A row's maximum is subtracted first (ONNX's definition): -inf entries give 0 (log:
    -inf) beside a finite maximum; a row holding NaN or +inf, or -inf everywhere, comes out
    NaN everywhere, as x - max does in float64 numpy.  The row positions cover the vector
    body and the masked tail."""
    rows = np.random.default_rng(5).standard_normal((6, n)).astype(np.float32)
    rows[0, [0, n - 1]] = -np.inf
    rows[1, n // 2] = np.nan
    rows[2, n - 1] = np.inf
    rows[3] = -np.inf
    rows[4, 1] = np.nan
    rows[4, 2] = np.inf
    x = rows.reshape(6, n, 1)
    x64 = rows.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x64 - x64.max(1, keepdims=True)
        e = np.exp(shifted)
        want = e / e.sum(1, keepdims=True)
        want_log = shifted - np.log(e.sum(1, keepdims=True))
    for kernel, expect in ((m.softmax_fp32, want), (m.log_softmax_fp32, want_log)):
        y = np.empty_like(x)
        kernel(x, y, 1)
        got = y.reshape(6, n)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(expect))
        finite = np.isfinite(expect)
        np.testing.assert_allclose(got[finite], expect[finite], rtol=3e-6, atol=1e-9)


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


# ---------------------------------------------------------------------------------------
# Steps: run-time BN parameters, team sizes, the step makers themselves


def _bn_reference(x, scale, bias, mean, var, eps):
    a = scale / np.sqrt(var.astype(np.float64) + eps)
    return (x - mean[:, None]) * a[:, None] + bias[:, None]


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 19, 49), (1, 40, 3000), (2, 3, 0)], ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_batchnorm_with_run_time_parameters(m, shape, num_threads):
    rng = np.random.default_rng(7)
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = (np.abs(rng.standard_normal(c)) + 0.1).astype(np.float32)
    want = _bn_reference(x, scale, bias, mean, var, 1e-5)
    y = np.empty_like(x)
    m.batchnorm_ndarray_fp32(x, scale, bias, mean, var, 1e-5, y, num_threads)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    xb = to_n16cx(x)
    yb = np.full_like(xb, np.nan)
    m.batchnorm_n16cx_fp32(xb, scale, bias, mean, var, 1e-5, yb, num_threads)
    np.testing.assert_allclose(yb, to_n16cx(want), rtol=1e-5, atol=1e-5)  # padding lanes 0


def test_batchnorm_bad_arguments(m):
    x = np.zeros((1, 3, 4), np.float32)
    p3, p2 = np.ones(3, np.float32), np.ones(2, np.float32)
    with pytest.raises(ValueError, match="expected C = 3"):
        m.batchnorm_ndarray_fp32(x, p3, p3, p2, p3, 1e-5, x, 1)
    xb = np.zeros((1, 2, 4, 16), np.float32)
    with pytest.raises(ValueError, match="channel blocks"):
        m.batchnorm_n16cx_fp32(xb, p3, p3, p3, p3, 1e-5, xb, 1)


def _same_bytes(run):
    """run(num_threads) -> array; the arrays of a team of 1 and of 2 are the same bytes."""
    one, two = run(1), run(2)
    assert one.tobytes() == two.tobytes()


@pytest.mark.parametrize("c", [19, 64])
def test_one_and_two_threads_give_the_same_bytes(m, c):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, c, 2500)).astype(np.float32)     # parallel steps
    xb = to_n16cx(x)
    scale, shift = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(
        np.float32)
    var = (np.abs(scale) + 0.5).astype(np.float32)

    def affine(t):
        y = np.empty_like(x)
        m.channel_affine_ndarray_fp32(x, scale, shift, y, t)
        return y

    def affine_n16cx(t):
        y = np.empty_like(xb)
        m.channel_affine_n16cx_fp32(xb, _pad(scale), _pad(shift), y, t)
        return y

    def bn(t):
        y = np.empty_like(x)
        m.batchnorm_ndarray_fp32(x, scale, shift, shift, var, 1e-3, y, t)
        return y

    def bn_n16cx(t):
        y = np.empty_like(xb)
        m.batchnorm_n16cx_fp32(xb, scale, shift, shift, var, 1e-3, y, t)
        return y

    def lrn(t):
        y = np.empty_like(x)
        m.lrn_fp32(x, y, 5, 1e-3, 0.75, 1.0, t)
        return y

    def softmax(shape, log):
        def run(t):
            v = x.reshape(shape)
            y = np.empty_like(v)
            (m.log_softmax_fp32 if log else m.softmax_fp32)(v, y, t)
            return y
        return run

    for run in (affine, affine_n16cx, bn, bn_n16cx, lrn):
        _same_bytes(run)
    for shape in [(2 * c, 2500, 1), (2, c, 2500), (2 * c, 50, 50), (1, 2 * c * 2500, 1)]:
        _same_bytes(softmax(shape, False))
        _same_bytes(softmax(shape, True))


def test_steps_split_big_work_and_keep_small_work_serial(m):
    x = np.zeros((1, 64, 4096), np.float32)
    a = np.ones(64, np.float32)
    addr = x.__array_interface__["data"][0]
    a_addr = a.__array_interface__["data"][0]
    assert m.make_channel_affine_ndarray_step(addr, a_addr, a_addr, addr, 1, 64, 4096).parallel
    assert not m.make_channel_affine_ndarray_step(addr, a_addr, a_addr, addr, 1, 64, 16).parallel
    assert m.make_softmax_step(addr, addr, 64, 4096, 1).parallel
    assert not m.make_softmax_step(addr, addr, 1, 100, 1).parallel
    assert m.make_lrn_step(addr, addr, 1, 64, 4096, 5, 1e-3, 0.75, 1.0, 2).parallel
    with pytest.raises(ValueError, match="negative"):
        m.make_softmax_step(addr, addr, -1, 4, 1)


def test_lrn_step_on_a_team_larger_than_its_scratch(m):
    # The scratch is sized for the team the step was made for; a larger team must not
    # write past it (its extra threads stay idle) and must give the same result.
    from pplpy.runtime.step import run_steps

    x = np.random.default_rng(9).standard_normal((2, 17, 5000)).astype(np.float32)
    want = _lrn_numpy(x, 3, 0.01, 0.75, 1.0)
    y = np.empty_like(x)
    step = m.make_lrn_step(x.__array_interface__["data"][0], y.__array_interface__["data"][0],
                           2, 17, 5000, 3, 0.01, 0.75, 1.0, 1)
    run_steps([step], 2)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------
# Numeric edges: BN where the fold is not finite (var + epsilon == 0), LRN on huge, inf and
# NaN inputs.  The oracle is the spec's formula in numpy.


def _bn_spec(x, scale, bias, mean, var, eps):
    """(x - mean) / sqrt(var + epsilon) * scale + B, in float32 as written."""
    c = (slice(None), None)
    with np.errstate(all="ignore"):
        return ((x - mean[c]) / np.sqrt(var[c] + np.float32(eps)) * scale[c]
                + bias[c]).astype(np.float32)


def _bn_edge_params():
    """Channels: var 0 with scale > 0, < 0 and 0, mean 0 and not; a normal one; an inf
    and a NaN mean; 19 channels in all (two N16CX blocks)."""
    rng = np.random.default_rng(12)
    scale = rng.standard_normal(19).astype(np.float32)
    bias = rng.standard_normal(19).astype(np.float32)
    mean = rng.standard_normal(19).astype(np.float32)
    var = (np.abs(rng.standard_normal(19)) + 0.1).astype(np.float32)
    var[:6] = 0
    scale[1], scale[2] = -2, 0
    mean[3] = 0
    mean[7], mean[8] = np.inf, np.nan
    return scale, bias, mean, var


def _bn_edge_input(mean):
    x = np.random.default_rng(13).standard_normal((2, 19, 40)).astype(np.float32)
    finite = np.isfinite(mean)
    x[:, finite, 0] = mean[finite]          # x == mean: 0 / 0
    x[0, 0, 1], x[1, 9, 2] = np.inf, np.nan
    return x


def _assert_same_values(got, want):
    """Equal, NaN where NaN, the same infinities; finite values to float32 rounding."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(got[np.isinf(got)], want[np.isinf(want)])
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_batchnorm_var_zero_epsilon_zero_is_the_specs_arithmetic(m, num_threads):
    scale, bias, mean, var = _bn_edge_params()
    x = _bn_edge_input(mean)
    want = _bn_spec(x, scale, bias, mean, var, 0.0)
    assert np.isinf(want).sum() > 50 and np.isnan(want).any()   # the edge is exercised
    y = np.empty_like(x)
    m.batchnorm_ndarray_fp32(x, scale, bias, mean, var, 0.0, y, num_threads)
    _assert_same_values(y, want)
    yb = np.full_like(to_n16cx(x), 7.0)
    m.batchnorm_n16cx_fp32(to_n16cx(x), scale, bias, mean, var, 0.0, yb, num_threads)
    assert (yb.reshape(2, 2, 40, 16)[:, 1, :, 3:] == 0).all()   # padding lanes stay 0
    _assert_same_values(yb, to_n16cx(want))


@pytest.mark.parametrize("num_threads", [1, 2])
def test_channel_affine_with_a_center(m, num_threads):
    """The folded path of constant BN parameters: y = (x - center) * a + shift."""
    scale, bias, mean, var = _bn_edge_params()
    x = _bn_edge_input(mean)
    want = _bn_spec(x, scale, bias, mean, var, 0.0)
    with np.errstate(all="ignore"):
        a = scale / np.sqrt(var)
        b = bias - mean * a
    exact = ~(np.isfinite(a) & np.isfinite(b))
    center, shift = np.where(exact, mean, 0).astype(np.float32), np.where(exact, bias, b)
    shift = shift.astype(np.float32)
    y = np.empty_like(x)
    m.channel_affine_ndarray_fp32(x, a, shift, y, num_threads, center)
    _assert_same_values(y, want)
    yb = np.empty_like(to_n16cx(x))
    m.channel_affine_n16cx_fp32(to_n16cx(x), _pad(a), _pad(shift), yb, num_threads,
                                _pad(center))
    _assert_same_values(yb, to_n16cx(want))
    with pytest.raises(ValueError, match="center has 3 values"):
        m.channel_affine_ndarray_fp32(x, a, shift, y, 1, center[:3])
    # one pixel per channel (N, C, 1): the path along rows of channels
    rows = np.ascontiguousarray(np.tile(x.transpose(0, 2, 1).reshape(80, 19, 1), (50, 1, 1)))
    want_rows = _bn_spec(rows, scale, bias, mean, var, 0.0)
    y = np.empty_like(rows)
    m.channel_affine_ndarray_fp32(rows, a, shift, y, num_threads, center)
    _assert_same_values(y, want_rows)


def _bn_model(params, eps, blocked):
    """BatchNormalization with constant parameters, after an identity 1x1 Conv and a Relu
    (so its input is N16CX and no fold into the Conv applies) when ``blocked``."""
    from onnx import numpy_helper

    c = len(params[0])
    names = ["scale", "B", "mean", "var"]
    inits = [numpy_helper.from_array(v, n) for n, v in zip(names, params)]
    nodes = [helper.make_node("BatchNormalization", ["h" if blocked else "x", *names], ["y"],
                              name="bn", epsilon=eps)]
    if blocked:
        w = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
        inits.append(numpy_helper.from_array(w, "w"))
        # Relu after the identity Conv: x must be >= 0 for the Relu to be an identity.
        nodes[:0] = [helper.make_node("Conv", ["x", "w"], ["cv"], name="conv"),
                     helper.make_node("Relu", ["cv"], ["h"], name="relu")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2, c, 5, 8])],
                              [vi("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("blocked", [False, True], ids=["ndarray", "n16cx"])
def test_batchnorm_op_with_var_zero_epsilon_zero(blocked, isa):
    import pplpy

    scale, bias, mean, var = _bn_edge_params()
    mean[7], mean[8] = 1.5, -0.5        # finite statistics: the Conv in front adds no NaN
    x = _bn_edge_input(mean)
    if blocked:
        mean = np.abs(mean)
        x = np.abs(_bn_edge_input(mean))
    x = np.ascontiguousarray(np.nan_to_num(x, nan=0.5, posinf=3.0)).reshape(2, 19, 5, 8)
    want = _bn_spec(x.reshape(2, 19, 40), scale, bias, mean, var, 0.0).reshape(x.shape)
    assert np.isinf(want).any() and np.isnan(want).any()
    model = _bn_model((scale, bias, mean, var), 0.0, blocked)
    rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=2)
    if blocked:
        assert "n16cx" in str(rt.formats["h"]).lower()
    _assert_same_values(rt.run({"x": x})["y"], want)


LRN_EDGE_CASES = {
    # |x| ~ 1e20: x * x overflows float32; the true result is finite (~1e-7 here).
    "huge": lambda x: x * np.float32(1e20),
    "huge_mixed": lambda x: np.where(np.arange(x.shape[2]) % 3 == 0, x * np.float32(3e19), x),
    "inf": lambda x: _put(x, [(0, 2, 5, np.inf), (1, 0, 7, -np.inf)]),
    "nan": lambda x: _put(x, [(0, 4, 3, np.nan)]),
    "tiny": lambda x: x * np.float32(1e-30),    # squares underflow: matters for bias 0
}


def _put(x, items):
    x = x.copy()
    for n, c, s, v in items:
        x[n, c, s] = v
    return x


@pytest.mark.parametrize("bias", [1.0, 0.0])
@pytest.mark.parametrize("case", sorted(LRN_EDGE_CASES))
@pytest.mark.parametrize("num_threads", [1, 2])
def test_lrn_on_huge_inf_and_nan_inputs(m, case, bias, num_threads):
    x = LRN_EDGE_CASES[case](
        np.random.default_rng(14).standard_normal((2, 9, 300)).astype(np.float32))
    with np.errstate(all="ignore"):
        want = _lrn_numpy(x, 5, 1e-4, 0.75, bias)
    if case == "inf":
        assert np.isnan(want[0, 2, 5]) and want[0, 1, 5] == 0     # spec: inf / inf, x / inf
    y = np.empty_like(x)
    with np.errstate(all="ignore"):
        m.lrn_fp32(x, y, 5, 1e-4, 0.75, bias, num_threads)
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=0)     # NaN where NaN
        m.lrn_fp32(x, x, 5, 1e-4, 0.75, bias, num_threads)         # in place
    np.testing.assert_allclose(x, want, rtol=2e-6, atol=0)


def test_lrn_op_on_huge_and_inf_inputs(isa):
    import pplpy

    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], name="lrn", size=3, alpha=1e-4, beta=0.75)], "g",
        [vi("x", TensorProto.FLOAT, [1, 6, 4, 4])], [vi("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(15).standard_normal((1, 6, 4, 4)).astype(np.float32) * 1e20
    x[0, 1, 2, 2] = np.inf
    with np.errstate(all="ignore"):
        want = _lrn_numpy(x.reshape(1, 6, 16), 3, 1e-4, 0.75, 1.0).reshape(x.shape)
    got = pplpy.load(model.SerializeToString(), max_isa=isa).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    assert np.isfinite(got).sum() == got.size - 1


def test_conv_then_batchnorm_with_var_zero_epsilon_zero():
    import pplpy
    from onnx import numpy_helper

    c = 3
    z, one = np.zeros(c, np.float32), np.ones(c, np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in
             [("w", np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)), ("s", one), ("b", z),
              ("m", z), ("v", z)]]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], name="bn",
                          epsilon=0.0)],
        "g", [vi("x", TensorProto.FLOAT, [1, c, 1, 2])], [vi("y", TensorProto.FLOAT, None)],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    x = np.array([1, -2, 0, 3, 5, 0], np.float32).reshape(1, c, 1, 2)
    with np.errstate(all="ignore"):
        got = pplpy.load(model.SerializeToString()).run({"x": x})["y"]
    _assert_same_values(got.reshape(1, c, 2), _bn_spec(x.reshape(1, c, 2), one, z, z, z, 0.0))
