"""Test helpers for impl families: a fixture yielding each ISA variant the CPU can run (a
tier it lacks is skipped with that reason), and the check that variants export one API."""

import math

import numpy as np
import pytest

from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.engines.x86.impls.dispatch import load_variant


def variant_fixture(family):
    """A pytest fixture, parametrised over every ISA tier, giving ``family``'s module."""

    @pytest.fixture(params=ISA_NAMES)
    def variant(request):
        isa = request.param
        if isa not in supported_isas():
            pytest.skip(f"CPU lacks {isa}")
        return load_variant(family, isa)

    return variant


def assert_variants_export_the_same_names(family):
    names = {}
    for isa in ISA_NAMES:
        if isa in supported_isas():
            module = load_variant(family, isa)
            names[isa] = {n for n in dir(module) if not n.startswith("_")}
    assert len(set(map(frozenset, names.values()))) == 1, names


def post_op_reference(y, post_op, p0, p1):
    """numpy version of the post-op codes in pplpy.engines.x86.impls.post_ops: float64
    formulas (limits at +-inf, NaN for NaN), cast back to y's dtype."""
    from pplpy.engines.x86.impls.post_ops import PostOp

    if post_op == PostOp.RELU:
        return np.maximum(y, 0)
    if post_op == PostOp.LEAKY_RELU:
        return np.where(y > 0, y, y * p0)
    if post_op == PostOp.CLIP:
        return np.clip(y, p0, p1)
    if post_op == PostOp.SIGMOID:
        return 1 / (1 + np.exp(-y))
    fn = _REFERENCES.get(post_op)
    if fn is None:
        return y
    x = np.asarray(y, np.float64)
    with np.errstate(all="ignore"):
        return np.asarray(fn(x, p0, p1)).astype(np.asarray(y).dtype)


def _erf(x):
    return np.vectorize(lambda t: t if math.isnan(t) else math.erf(t), otypes=[float])(x)


def _erfc(x):
    return np.vectorize(lambda t: t if math.isnan(t) else math.erfc(t), otypes=[float])(x)


def _keep_nan(x, y):
    return np.where(np.isnan(x), x, y)


def _gelu(x, p0, p1):
    if p0:
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        y = x / (1 + np.exp(-2 * u))
    else:
        y = 0.5 * x * _erfc(-x / math.sqrt(2))
    return np.where(x == -np.inf, 0, y)


def _build_references():
    from pplpy.engines.x86.impls.post_ops import PostOp as P

    return {
        P.TANH: lambda x, a, b: np.tanh(x),
        P.HARD_SWISH: lambda x, a, b: x * np.clip(x / 6 + 0.5, 0, 1),
        P.ABS: lambda x, a, b: np.abs(x),
        P.NEG: lambda x, a, b: -x,
        P.EXP: lambda x, a, b: np.exp(x),
        P.LOG: lambda x, a, b: np.log(x),
        P.SQRT: lambda x, a, b: np.sqrt(x),
        P.RECIPROCAL: lambda x, a, b: 1 / x,
        P.FLOOR: lambda x, a, b: np.floor(x),
        P.CEIL: lambda x, a, b: np.ceil(x),
        P.ROUND: lambda x, a, b: np.round(x),
        P.SIGN: lambda x, a, b: np.sign(x),
        P.ERF: lambda x, a, b: _erf(x),
        P.SIN: lambda x, a, b: np.sin(x),  # past 2**23 too (libm's lanes there)
        P.COS: lambda x, a, b: np.cos(x),
        P.TAN: lambda x, a, b: np.tan(x),
        P.ASIN: lambda x, a, b: np.arcsin(x),
        P.ACOS: lambda x, a, b: np.arccos(x),
        P.ATAN: lambda x, a, b: np.arctan(x),
        P.SINH: lambda x, a, b: np.sinh(x),
        P.COSH: lambda x, a, b: np.cosh(x),
        P.ASINH: lambda x, a, b: np.arcsinh(x),
        P.ACOSH: lambda x, a, b: np.arccosh(x),
        P.ATANH: lambda x, a, b: np.arctanh(x),
        P.HARD_SIGMOID: lambda x, a, b: _keep_nan(x, np.clip(a * x + b, 0, 1)),
        P.SOFTPLUS: lambda x, a, b: np.logaddexp(0, x),
        P.SOFTSIGN: lambda x, a, b: np.where(np.isinf(x), np.sign(x), x / (1 + np.abs(x))),
        P.ELU: lambda x, a, b: np.where(x < 0, a * np.expm1(x), x),
        P.SELU: lambda x, a, b: b * np.where(x <= 0, a * np.expm1(x), x),
        P.CELU: lambda x, a, b: np.maximum(x, 0) + np.minimum(0, a * np.expm1(x / a)),
        P.GELU: _gelu,
        P.MISH: lambda x, a, b: np.where(x == -np.inf, 0, x * np.tanh(np.logaddexp(0, x))),
        P.THRESHOLDED_RELU: lambda x, a, b: np.where(x > a, x, 0),  # NaN: 0, as the spec
        P.SHRINK: lambda x, a, b: np.where(x < -b, x + a, np.where(x > b, x - a, 0)),
        # x * sigmoid(a x), written so that its limit 0 (not -inf * 0) comes out where the
        # sigmoid underflows.
        P.SWISH: lambda x, a, b: np.where(np.isinf(x) & (a * x < 0), 0, x / (1 + np.exp(-a * x))),
    }


class _LazyReferences(dict):
    def get(self, key, default=None):
        if not self:
            self.update(_build_references())
        return super().get(key, default)


_REFERENCES = _LazyReferences()


def to_n16cx(x):
    """(N, C, S) float32 -> (N, ceil(C/16), S, 16) with zero padding lanes."""
    n, c, s = x.shape
    cb = -(-c // 16)
    xp = np.zeros((n, cb * 16, s), np.float32)
    xp[:, :c] = x
    return np.ascontiguousarray(xp.reshape(n, cb, 16, s).transpose(0, 1, 3, 2))
