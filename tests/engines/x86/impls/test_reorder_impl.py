"""The reorder_fp32 impl family (NDARRAY <-> N16CX) against numpy, for every ISA variant this
CPU can run."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, to_n16cx, variant_fixture
from pplpy.engines.x86.impls.dispatch import load_variant
from hypothesis import given, settings
from hypothesis import strategies as st

from pplpy.common.isa import supported_isas

FAMILY = "reorder_fp32"


m = variant_fixture(FAMILY)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _check_round_trip(m, shape, num_threads):
    n, c, s = shape
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    y = np.full((n, -(-c // 16), s, 16), np.nan, np.float32)    # padding must be overwritten
    m.ndarray_to_n16cx_fp32(x, y, num_threads)
    np.testing.assert_array_equal(y, to_n16cx(x))
    z = np.full_like(x, np.nan)
    m.n16cx_to_ndarray_fp32(y, z, num_threads)
    np.testing.assert_array_equal(z, x)


SHAPES = [(1, 1, 1), (1, 3, 224 * 224), (2, 16, 63), (2, 17, 65), (1, 64, 56 * 56),
          (3, 40, 1), (1, 1000, 1), (0, 5, 3), (2, 33, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_round_trip(m, shape, num_threads):
    _check_round_trip(m, shape, num_threads)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 50), st.integers(1, 300), st.integers(1, 2))
def test_round_trip_random_shapes(n, c, s, num_threads):
    _check_round_trip(load_variant(FAMILY, supported_isas()[0]), (n, c, s), num_threads)


def test_shape_mismatch_is_an_error(m):
    with pytest.raises(ValueError, match=r"needs N16CX \(1, 2, 4, 16\)"):
        m.ndarray_to_n16cx_fp32(np.zeros((1, 17, 4), np.float32),
                                np.zeros((1, 1, 4, 16), np.float32), 1)


@pytest.mark.parametrize("shape", [(1, 64, 56 * 56), (2, 17, 65), (4, 40, 1)], ids=str)
def test_one_and_two_threads_give_identical_bytes(m, shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    blocked = []
    for threads in (1, 2):
        y = np.full((shape[0], -(-shape[1] // 16), shape[2], 16), np.nan, np.float32)
        m.ndarray_to_n16cx_fp32(x, y, threads)
        blocked.append(y)
    assert blocked[0].tobytes() == blocked[1].tobytes()


def test_steps_run_in_a_plan(m):
    """make_reorder_step is what the runtime runs: a step over addresses, parallel when big."""
    from pplpy.runtime.step import run_steps

    n, c, s = 2, 20, 3000
    x = np.random.default_rng(2).standard_normal((n, c, s)).astype(np.float32)
    y = np.full((n, 2, s, 16), np.nan, np.float32)
    z = np.full_like(x, np.nan)
    to = m.make_reorder_step(x.ctypes.data, y.ctypes.data, n, c, s, True)
    back = m.make_reorder_step(y.ctypes.data, z.ctypes.data, n, c, s, False)
    assert to.parallel and back.parallel
    assert not m.make_reorder_step(0, 0, 1, 3, 10, True).parallel
    run_steps([to, back], 2)
    np.testing.assert_array_equal(y, to_n16cx(x))
    np.testing.assert_array_equal(z, x)


@pytest.mark.parametrize("shape", [(1, 35, 70), (2, 16, 9)], ids=str)
def test_reorders_move_float_bits_unchanged(m, shape):
    """The reorders move floats in 4 x 4 register blocks with no arithmetic: signalling
    NaNs, denormals and -0 come through bit for bit, both ways."""
    bits = np.random.default_rng(2).integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    bits.reshape(-1)[:4] = [0x7F800001, 0xFFBFFFFF, 0x00000001, 0x80000000]
    x = bits.view(np.float32)
    y = np.full((shape[0], -(-shape[1] // 16), shape[2], 16), np.nan, np.float32)
    m.ndarray_to_n16cx_fp32(x, y, 1)
    n, c, s = shape
    want = np.zeros((n, -(-c // 16) * 16, s), np.uint32)
    want[:, :c] = bits
    want = want.reshape(n, -1, 16, s).transpose(0, 1, 3, 2)
    assert y.view(np.uint32).tobytes() == np.ascontiguousarray(want).tobytes()
    z = np.full_like(x, np.nan)
    m.n16cx_to_ndarray_fp32(y, z, 1)
    assert z.view(np.uint32).tobytes() == bits.tobytes()
