"""Test helpers for impl families: a fixture yielding each ISA variant the CPU can run (a
tier it lacks is skipped with that reason), and the check that variants export one API."""

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
