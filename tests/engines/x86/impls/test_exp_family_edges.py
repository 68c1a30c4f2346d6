"""exp, sigmoid, swish and tanh of _activation_fp32.h at their edges, on every ISA variant
this CPU can run: a dense sweep against float64 numpy with the header's documented
tolerances, and the special values (NaN, +-inf, +-0, subnormals, the underflow and overflow
borders, huge |x|) one by one.

The tiers compute exp differently (AVX-512 scales by vscalefps, the others build 2**n from
exponent bits), so the contract checked here is the one all of them promise: relative
error < 2e-7 for exp on [-87.33, 88.72] and a few 1e-7 for the functions built on it,
0 or the correctly rounded subnormal where the result is below the normal range, inf above,
NaN for NaN.
"""

import numpy as np
import pytest
from impl_variants import variant_fixture

from pplpy.engines.x86.impls.post_ops import PostOp

m = variant_fixture("eltwise_fp32")

TINY = np.finfo(np.float32).tiny  # the least normal float
SUB = np.float32(2.0 ** -149)     # the least subnormal
EXP_LO, EXP_HI = -87.336544, 88.72283935546875


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# code, alpha, float64 reference, relative tolerance, where the relative check holds
FUNCTIONS = {
    "exp": (PostOp.EXP, 0.0, np.exp, 2e-7, lambda x: (x >= EXP_LO) & (x <= EXP_HI)),
    "sigmoid": (PostOp.SIGMOID, 0.0, _sigmoid, 3e-7, lambda x: x >= EXP_LO),
    "swish": (PostOp.SWISH, 1.0, lambda x: x * _sigmoid(x), 3e-7, lambda x: x >= EXP_LO),
    # alpha * x is rounded to float32 first, as the kernel does (its rounding error is the
    # input's, amplified by sigmoid's condition number |alpha x| for alpha x << 0)
    "swish_a": (PostOp.SWISH, 1.7,
                lambda x: x * _sigmoid((np.float32(1.7) * x.astype(np.float32)).astype(np.float64)),
                3e-7, lambda x: 1.7 * x >= EXP_LO),
    "tanh": (PostOp.TANH, 0.0, np.tanh, 3e-7, lambda x: np.isfinite(x)),
}


def _run(m, code, x, alpha=0.0):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    m.activation_fp32(x, y, int(code), alpha, 0.0, 1)
    return y


def _sweep():
    rng = np.random.default_rng(7)
    mags = 10.0 ** rng.uniform(-40, 1, 100_000)
    return np.concatenate([
        np.linspace(-120, 120, 1_200_001), np.linspace(-1, 1, 200_001),
        np.linspace(-110, -80, 300_001), np.linspace(80, 90, 100_001),
        mags, -mags]).astype(np.float32)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_dense_sweep_against_float64(m, name):
    code, alpha, ref, rtol, rel_domain = FUNCTIONS[name]
    x = _sweep()
    y = _run(m, code, x, alpha).astype(np.float64)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = ref(x64)
    # results in the normal range: relative error
    rel = rel_domain(x64) & (np.abs(want) >= TINY) & (np.abs(want) <= np.finfo(np.float32).max)
    err = np.abs(y[rel] - want[rel]) / np.abs(want[rel])
    worst = x[rel][err.argmax()]
    assert err.max() < rtol, f"{name}: relative error {err.max():.3g} at x = {worst!r}"
    # below the normal range (and below exp's domain): 0 or a subnormal near the truth
    small = ~rel & (np.abs(want) < TINY)
    assert (np.abs(y[small] - want[small]) <= TINY).all(), name
    # past float's top (where float32 rounding gives inf): inf of the right sign
    big = np.abs(want) >= (2 - 2.0 ** -24) * 2.0 ** 127
    assert (y[big] == np.sign(want[big]) * np.inf).all(), name


def test_exp_subnormals_on_avx512(m):
    """AVX-512's vscalefps rounds the scaled result once: the subnormals below -87.34 come
    out within one unit of the least subnormal (the generic tiers give 0 there)."""
    x = np.linspace(-103.9, -87.4, 20001).astype(np.float32)
    y = _run(m, PostOp.EXP, x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    if m.VLEN == 16:
        assert (np.abs(y - want) <= SUB).all()
    else:
        assert (y == 0).all()


NAN, INF = np.nan, np.inf
DENORMAL = 1e-40  # float32 subnormal input

# (function, x, exact result); NaN means NaN.  Zeros are compared with their sign where the
# result's sign is part of the contract (odd functions at +-0).
SPECIALS = [
    ("exp", [NAN, INF, -INF, 0.0, -0.0, DENORMAL, -DENORMAL, 89.0, 1e30, 3.4e38, -104.0,
             -1e30, -3.4e38],
            [NAN, INF, 0.0, 1.0, 1.0, 1.0, 1.0, INF, INF, INF, 0.0, 0.0, 0.0]),
    ("sigmoid", [NAN, INF, -INF, 0.0, -0.0, DENORMAL, 20.0, 88.7, 89.0, 1e30, -104.0, -1e30],
                [NAN, 1.0, 0.0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
    ("swish", [NAN, INF, -INF, 0.0, -0.0, 89.0, 1e30, 3.4e38, -104.0, -1e30, -3.4e38],
              [NAN, INF, 0.0, 0.0, -0.0, 89.0, 1e30, 3.4e38, 0.0, 0.0, 0.0]),
    ("swish_a", [NAN, INF, -INF, 0.0, 1e30, -1e30], [NAN, INF, 0.0, 0.0, 1e30, 0.0]),
    ("tanh", [NAN, INF, -INF, 0.0, -0.0, DENORMAL, -DENORMAL, 9.1, -9.1, 20.0, -20.0, 1e30,
              -1e30],
             [NAN, 1.0, -1.0, 0.0, -0.0, DENORMAL, -DENORMAL, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0]),
]


@pytest.mark.parametrize("name,xs,wants", SPECIALS, ids=[s[0] for s in SPECIALS])
def test_special_values(m, name, xs, wants):
    code, alpha = FUNCTIONS[name][:2]
    x = np.array(xs, np.float32)
    want = np.array(wants, np.float32)
    for n in (x.size, 1):  # the whole vector, and each value alone as a tail lane
        y = (_run(m, code, x, alpha) if n == x.size
             else np.concatenate([_run(m, code, x[i:i + 1], alpha) for i in range(x.size)]))
        np.testing.assert_array_equal(y, want, err_msg=f"{name}: x = {x}")
        signed = (want == 0) & (x == 0)
        assert (np.signbit(y) == np.signbit(want))[signed].all(), name


def test_swish_negative_alpha_limits(m):
    """alpha < 0: x * sigmoid(alpha x) is -inf at -inf and 0 at +inf."""
    x = np.array([-INF, INF, -1e30, 1e30, NAN], np.float32)
    y = _run(m, PostOp.SWISH, x, -0.7)
    np.testing.assert_array_equal(y, np.array([-INF, 0.0, -1e30, 0.0, NAN], np.float32))
