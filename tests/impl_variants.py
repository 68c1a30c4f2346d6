"""Test helpers for impl families: a fixture yielding each ISA variant the CPU can run (a
tier it lacks is skipped with that reason), and the check that variants export one API."""

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
    """numpy version of the post-op codes in pplpy.engines.x86.impls.post_ops."""
    from pplpy.engines.x86.impls.post_ops import PostOp

    if post_op == PostOp.RELU:
        return np.maximum(y, 0)
    if post_op == PostOp.LEAKY_RELU:
        return np.where(y > 0, y, y * p0)
    if post_op == PostOp.CLIP:
        return np.clip(y, p0, p1)
    if post_op == PostOp.SIGMOID:
        return 1 / (1 + np.exp(-y))
    return y


def to_n16cx(x):
    """(N, C, S) float32 -> (N, ceil(C/16), S, 16) with zero padding lanes."""
    n, c, s = x.shape
    cb = -(-c // 16)
    xp = np.zeros((n, cb * 16, s), np.float32)
    xp[:, :c] = x
    return np.ascontiguousarray(xp.reshape(n, cb, 16, s).transpose(0, 1, 3, 2))
