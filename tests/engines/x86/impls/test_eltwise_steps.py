"""The eltwise_fp32 steps (make_activation_step, make_eltwise_step and its passes) against
numpy, for every ISA variant this CPU can run: the vector activations of _activation_fp32.h
around each tier's vector width, tails that must not write past n, Sum chains, and the bytes
a step writes on one thread against two."""

import re
from pathlib import Path

import numpy as np
import pytest
from impl_variants import post_op_reference, variant_fixture

from pplpy.engines.x86.impls.broadcast import broadcast_strides
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.runtime.step import run_steps

IMPLS = Path(__file__).parents[4] / "pplpy" / "engines" / "x86" / "impls"

m = variant_fixture("eltwise_fp32")


def _x(n, seed=0, scale=4.0):
    x = (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)
    if n > 4:
        x[:4] = [0.0, -0.0, np.nan, -np.inf]
    return x


def _reference(code, x, p0=0.0, p1=0.0):
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if code == PostOp.RELU:
            return np.maximum(x, 0)
        if code == PostOp.LEAKY_RELU:
            return np.where(x >= 0, x, np.float32(p0) * x)
        if code == PostOp.CLIP:
            return np.clip(x, np.float32(p0), np.float32(p1))
        if code == PostOp.SIGMOID:
            return (1 / (1 + np.exp(-x64))).astype(np.float32)
        if code == PostOp.TANH:
            return np.tanh(x64).astype(np.float32)
        if code == PostOp.HARD_SWISH:
            return (x64 * np.clip(x64 / 6 + 0.5, 0, 1)).astype(np.float32)
    return x


# (code, p0, p1, rtol): the comparisons are exact where the formula is.  HardSwish's
# x / 6 + 1/2 cancels near x = -3 in float32 (as in ONNX Runtime): it gets an absolute
# tolerance, _atol below.
ACTIVATIONS = [
    (PostOp.NONE, 0, 0, 0),
    (PostOp.RELU, 0, 0, 0),
    (PostOp.LEAKY_RELU, 0.1, 0, 0),
    (PostOp.LEAKY_RELU, -2.5, 0, 0),
    (PostOp.CLIP, -1.5, 2.0, 0),
    (PostOp.CLIP, 0.0, 6.0, 0),
    (PostOp.SIGMOID, 0, 0, 1e-6),
    (PostOp.TANH, 0, 0, 2e-6),
    (PostOp.HARD_SWISH, 0, 0, 1e-6),
]


def _atol(code):
    return 2e-7 if code == PostOp.HARD_SWISH else 1e-37


def _sizes(vlen):
    """Around the tier's vector width and the parallel threshold."""
    return sorted({0, 1, vlen - 1, vlen, vlen + 1, 3 * vlen + 5, 1000, 65536 + 5})


@pytest.mark.parametrize("code,p0,p1,rtol", ACTIVATIONS, ids=lambda v: str(v))
def test_activation_step_against_numpy(m, code, p0, p1, rtol):
    for n in _sizes(m.VLEN):
        x = _x(n)
        guard = np.full(n + 40, 7.0, np.float32)  # y, then 40 floats that must stay 7
        step = m.make_activation_step(x.ctypes.data, guard.ctypes.data, n, int(code), p0, p1)
        assert step.parallel == (n >= 65536)
        run_steps([step], 2)
        want = _reference(code, x, p0, p1)
        if rtol:
            np.testing.assert_allclose(guard[:n], want, rtol=rtol, atol=_atol(code),
                                       err_msg=f"n={n}")
        else:
            np.testing.assert_array_equal(guard[:n], want, err_msg=f"n={n}")
        assert (guard[n:] == 7).all(), f"n={n}: wrote past the end"


@pytest.mark.parametrize("code", [PostOp.SIGMOID, PostOp.TANH, PostOp.HARD_SWISH])
def test_activation_extremes(m, code):
    x = np.array([-np.inf, -1000, -88, -87.4, -80, -20, -9, -0.7, -0.625, -0.6, -1e-3, -1e-8,
                  -0.0, 0, 1e-8, 1e-3, 0.6, 0.625, 0.7, 3, 9, 20, 80, 87.4, 88, 1000, np.inf,
                  np.nan], np.float32)
    y = np.empty_like(x)
    m.activation_fp32(x, y, int(code), 0, 0, 1)
    np.testing.assert_allclose(y, _reference(code, x), rtol=2e-6, atol=_atol(code))


def test_padding_lanes_stay_finite(m):
    """f(0) is finite for every activation whose ops may run in N16CX (the table's
    keeps_padding): such a buffer is processed as one flat one."""
    from pplpy.engines.x86.ops.onnx.elementwise import ACTIVATIONS as TABLE

    zeros = np.zeros(64, np.float32)
    blocked = {row.code for row in TABLE if row.keeps_padding}
    for code, p0, p1 in [(c, p0, p1) for c, p0, p1, _ in ACTIVATIONS] + MATH_ACTIVATIONS:
        y = np.empty_like(zeros)
        m.activation_fp32(zeros, y, int(code), p0, p1, 1)
        assert np.isfinite(y).all() == (code in blocked or code == PostOp.NONE), code


# The math activations after HARD_SWISH, with parameters (code, p0, p1), against float64
# formulas (impl_variants.post_op_reference) with rtol 2e-6 (about 16 ulp; measured: below
# 3e-7 for most, about 4e-7 near 0; erf GELU up to 1e-6 above x = -2 and 4.3e-6 in its left
# tail) and atol 1e-6 (results near 0: sin near pi, gelu's tail).
MATH_ACTIVATIONS = [(code, 0.0, 0.0) for code in PostOp if code > PostOp.HARD_SWISH]
MATH_ACTIVATIONS += [
    (PostOp.HARD_SIGMOID, 0.2, 0.5), (PostOp.HARD_SIGMOID, -1.5, 0.25),
    (PostOp.ELU, 1.0, 0.0), (PostOp.ELU, 0.3, 0.0),
    (PostOp.SELU, 1.67326319217681884765625, 1.05070102214813232421875), (PostOp.SELU, 2, 3),
    (PostOp.CELU, 1.0, 0.0), (PostOp.CELU, 0.25, 0.0),
    (PostOp.GELU, 1.0, 0.0),  # the tanh approximation
    (PostOp.THRESHOLDED_RELU, 1.0, 0.0), (PostOp.THRESHOLDED_RELU, -0.5, 0.0),
    (PostOp.SHRINK, 0.0, 0.5), (PostOp.SHRINK, 1.5, 0.3),
    (PostOp.SWISH, 1.0, 0.0), (PostOp.SWISH, -0.7, 0.0), (PostOp.SWISH, 2.5, 0.0),
]
MATH_ACTIVATIONS = [(c, p0, p1) for c, p0, p1 in MATH_ACTIVATIONS
                    if not ((c in (PostOp.ELU, PostOp.SELU, PostOp.CELU, PostOp.HARD_SIGMOID,
                                   PostOp.THRESHOLDED_RELU, PostOp.SHRINK)) and p0 == p1 == 0)]

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e-39, -3e-39, 1e-8,
                     -1e-8, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 88.5, 88.7, 88.8, -87.5,
                     -104, 89.5, -89.5, 1e7, -1e7, 2.0 ** 24 + 2, 1e30, -1e30, 3.4e38, -3.4e38],
                    np.float32)


def _math_inputs():
    grid = np.concatenate([np.linspace(-10, 10, 40001), np.linspace(-100, 100, 4001),
                           np.linspace(-1, 1, 4001), np.geomspace(1e-6, 1e6, 2001),
                           -np.geomspace(1e-6, 1e6, 2001)]).astype(np.float32)
    return np.concatenate([SPECIALS, grid])


@pytest.mark.parametrize("code,p0,p1", MATH_ACTIVATIONS, ids=lambda v: str(v))
def test_math_activations_against_float64(m, code, p0, p1):
    x = _math_inputs()
    if code == PostOp.TAN:  # tan's condition number: stay away from its poles
        with np.errstate(invalid="ignore"):
            x = x[(np.abs(np.cos(x.astype(np.float64))) > 1e-2) | ~np.isfinite(x)]
    guard = np.full(x.size + 40, 7.0, np.float32)
    run_steps([m.make_activation_step(x.ctypes.data, guard.ctypes.data, x.size, int(code),
                                      p0, p1)], 2)
    want = post_op_reference(x, code, np.float32(p0), np.float32(p1))
    np.testing.assert_allclose(guard[:x.size], want, rtol=2e-6, atol=1e-6)
    assert (guard[x.size:] == 7).all()
    # Tails: every length around the vector width gives the same values as the full run.
    for n in range(1, 2 * m.VLEN + 2):
        y = np.empty(n, np.float32)
        m.activation_fp32(x[:n].copy(), y, int(code), p0, p1, 1)
        np.testing.assert_array_equal(y, guard[:n])


def test_math_activation_exact_cases(m):
    """Values that must come out exactly: rounding ties, signed zeros, limits."""
    cases = {
        PostOp.ROUND: ([0.5, 1.5, 2.5, -0.5, -2.5, 8388609, -0.0], [0, 2, 2, -0.0, -2, 8388609,
                                                                     -0.0]),
        PostOp.FLOOR: ([-0.5, 0.5, -0.0, 2 ** 23 + 1], [-1, 0, -0.0, 2 ** 23 + 1]),
        PostOp.CEIL: ([-0.5, 0.5, -0.0], [-0.0, 1, -0.0]),
        PostOp.SIGN: ([-3, 0, 3, np.nan], [-1, 0, 1, np.nan]),
        PostOp.LOG: ([0, -1, 1, np.inf], [-np.inf, np.nan, 0, np.inf]),
        PostOp.EXP: ([0, -np.inf, np.inf, 88.72], [1, 0, np.inf, np.exp(np.float32(88.72))]),
        PostOp.SQRT: ([-1, 0, 4, np.inf], [np.nan, 0, 2, np.inf]),
        PostOp.RECIPROCAL: ([0, -0.0, 4], [np.inf, -np.inf, 0.25]),
        PostOp.ERF: ([0, np.inf, -np.inf, 5], [0, 1, -1, 1]),
        PostOp.TANH: ([np.inf, -np.inf], [1, -1]),
        # erf GELU: Phi is 0 or 1 past |x| = 4 sqrt(2) (5.66), as float32 erf rounds there
        PostOp.GELU: ([0, -0.0, np.inf, -np.inf, np.nan, -6, 6, -1e30, 1e30],
                      [0, -0.0, np.inf, 0, np.nan, 0, 6, 0, 1e30]),
        PostOp.SOFTPLUS: ([1000, -1000, np.inf], [1000, 0, np.inf]),
        PostOp.ATANH: ([1, -1, 2], [np.inf, -np.inf, np.nan]),
        PostOp.ACOSH: ([0, 1, np.inf], [np.nan, 0, np.inf]),
    }
    for code, (x, want) in cases.items():
        x = np.array(x, np.float32)
        y = np.empty_like(x)
        m.activation_fp32(x, y, int(code), 0, 0, 1)
        np.testing.assert_allclose(y, np.array(want, np.float32), rtol=1e-7, err_msg=code.name)
        want = np.array(want, np.float32)
        signed = ~np.isnan(want)
        assert (np.signbit(y) == np.signbit(want))[signed].all(), code.name


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("code", [PostOp.ABS, PostOp.NEG, PostOp.SIGN])
def test_int_unary(m, code, dtype):
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(-1000, 1000, 70_001).astype(dtype)
    x[:5] = [0, info.min, info.max, -1, 1]
    ref = {PostOp.ABS: np.abs, PostOp.NEG: np.negative, PostOp.SIGN: np.sign}[code]
    for nt in (1, 2):
        y = np.empty_like(x)
        m.int_unary(x, y, int(code), nt)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(y, ref(x))  # MIN wraps to MIN, as numpy
    with pytest.raises(ValueError, match="not ABS, NEG or SIGN"):
        m.make_int_unary_step(dtype, 0, 0, 0, int(PostOp.EXP))
    with pytest.raises(ValueError, match="int32 or int64"):
        m.make_int_unary_step(np.float32, 0, 0, 0, int(PostOp.ABS))


def test_activation_step_checks(m):
    with pytest.raises(ValueError, match="activation code 99"):
        m.make_activation_step(0, 0, 0, 99, 0, 0)
    with pytest.raises(ValueError, match="non-negative"):
        m.make_activation_step(0, 0, -1, 1, 0, 0)
    step = m.make_activation_step(0, 0, 0, int(PostOp.SIGMOID), 0, 0)  # n = 0: does nothing
    run_steps([step], 2)


def test_activation_codes_match_everywhere():
    header = (IMPLS / "_activation_fp32.h").read_text()
    pxd = (IMPLS / "post_ops.pxd").read_text()
    want = {op.name: int(op) for op in PostOp}
    assert {k: int(v) for k, v in re.findall(r"PPL_ACT_(\w+) = (\d+)", header)} == want
    assert {k: int(v) for k, v in re.findall(r"POST_(\w+) = (\d+)", pxd)} == want


# ---------------------------------------------------------------------------------------
# One thread against two: the same bytes.

def _bytes_1_vs_2(make):
    outs = []
    for nt in (1, 2):
        y, step = make()
        run_steps([step], nt)
        outs.append(y.tobytes())
    assert outs[0] == outs[1]


def test_threads_give_the_same_bytes(m):
    x = _x(300_001, seed=2)
    b = _x(301, seed=3)

    def activation(code=PostOp.SIGMOID, p0=0.0, p1=0.0):
        y = np.empty_like(x)
        return y, m.make_activation_step(x.ctypes.data, y.ctypes.data, x.size, int(code), p0,
                                         p1)

    a2 = x[:300_000].reshape(1000, 300)

    def broadcast():
        y = np.empty_like(a2)
        bv = b[:300]
        return y, m.make_binary_step(m.DIV, np.float32, a2.ctypes.data, a2.size, bv.ctypes.data,
                                     bv.size, y.ctypes.data, a2.shape,
                                     broadcast_strides(a2.shape, a2.shape),
                                     broadcast_strides(bv.shape, a2.shape))

    xb = x[:2 * 2 * 4096 * 16].reshape(2, 2, 4096, 16)

    def channel():
        y = np.empty_like(xb)
        return y, m.make_channel_binary_n16cx_step(m.SUB, xb.ctypes.data, b.ctypes.data, 19, 1,
                                                   y.ctypes.data, 2, 2, 4096, True, 19)

    math = [lambda c=c, p0=p0, p1=p1: activation(c, p0, p1) for c, p0, p1 in MATH_ACTIVATIONS]
    for make in (activation, broadcast, channel, *math):
        y, step = make()
        assert step.parallel
        _bytes_1_vs_2(make)


# ---------------------------------------------------------------------------------------
# Chains of passes (Sum) and channel passes read from a plain vector.

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_sum_chain(m, dtype, num_threads):
    rng = np.random.default_rng(4)
    out = (3, 70, 400)
    shapes = [(3, 70, 400), (400,), (1, 70, 1), (3, 1, 400)]
    terms = [(rng.standard_normal(s) * 10).astype(dtype) for s in shapes]
    y = np.empty(out, dtype)
    size = y.size
    passes = [m.binary_pass(m.ADD, terms[0].ctypes.data, terms[0].size, terms[1].ctypes.data,
                            terms[1].size, out, broadcast_strides(shapes[0], out),
                            broadcast_strides(shapes[1], out))]
    for t, s in zip(terms[2:], shapes[2:]):
        passes.append(m.binary_pass(m.ADD, y.ctypes.data, size, t.ctypes.data, t.size, out,
                                    broadcast_strides(out, out), broadcast_strides(s, out)))
    step = m.make_eltwise_step(dtype, y.ctypes.data, size, passes)
    assert step.parallel
    run_steps([step], num_threads)
    want = ((terms[0] + terms[1]) + terms[2]) + terms[3]
    np.testing.assert_array_equal(y, want)


def test_channel_pass_from_a_short_vector(m):
    """vec of C values (stride 1) or one value (stride 0); lanes past C are written 0."""
    rng = np.random.default_rng(6)
    n, c, s = 2, 19, 37
    x = rng.standard_normal((n, c, s)).astype(np.float32) + 3
    from impl_variants import to_n16cx

    xb = to_n16cx(x)
    for vec, stride in ((rng.standard_normal(c).astype(np.float32) + 3, 1),
                        (np.array([2.5], np.float32), 0)):
        y = np.full_like(xb, np.nan)
        step = m.make_channel_binary_n16cx_step(m.DIV, xb.ctypes.data, vec.ctypes.data, c,
                                                stride, y.ctypes.data, n, 2, s, False, c)
        run_steps([step], 2)
        full = np.broadcast_to(vec, (c,)).reshape(1, c, 1)
        np.testing.assert_allclose(y, to_n16cx(x / full), rtol=1e-6)


def test_eltwise_step_checks(m):
    a = np.zeros(6, np.float32)
    bp = m.binary_pass(m.ADD, a.ctypes.data, 6, a.ctypes.data, 6, [2, 3], [3, 1], [3, 1])
    with pytest.raises(ValueError, match="covers 6 elements, the output has 5"):
        m.make_eltwise_step(np.float32, a.ctypes.data, 5, [bp])
    with pytest.raises(ValueError, match="dtype float64"):
        m.make_eltwise_step(np.float64, a.ctypes.data, 6, [bp])
    cp = m.channel_pass(m.ADD, a.ctypes.data, a.ctypes.data, 1, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="needs float32"):
        m.make_eltwise_step(np.int32, a.ctypes.data, 16, [cp])
    with pytest.raises(ValueError, match="at least one pass"):
        m.make_eltwise_step(np.float32, a.ctypes.data, 6, [])
    with pytest.raises(ValueError, match="op 9"):
        m.channel_pass(9, 0, 0, 1, 0, 1, 1, 1)
