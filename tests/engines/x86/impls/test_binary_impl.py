"""impls/_binmath_fp32_<isa> (every tier) and impls/_logic against numpy: strides patterns
(contiguous, scalar either side, general broadcast), threads 1 and 2 over outputs big enough
for a parallel step, and the argument checks of the pass builders."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, variant_fixture

from pplpy.engines.x86.impls import _logic

binmath = variant_fixture("binmath_fp32")
RNG = np.random.default_rng(9)
SHAPES = [((70000,), (70000,)), ((70000,), ()), ((), (70000,)), ((300, 1, 7), (1, 250, 1)),
          ((3, 4), (4,))]


def _out(a, b):
    return np.broadcast_shapes(a.shape, b.shape)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("binmath_fp32")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("name,ref", [
    ("MIN", np.minimum), ("MAX", np.maximum), ("ADD", np.add), ("DIV", np.divide),
    ("PRELU", lambda a, b: np.where(a > 0, a, a * b)),
    ("POW", lambda a, b: np.power(np.abs(a), b))])
def test_binmath(binmath, name, ref, shapes, threads):
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    if name == "POW":
        a = np.asarray(np.abs(a))
    y = np.empty(_out(a, b), np.float32)
    binmath.broadcast(getattr(binmath, name), a, b, y, threads)
    np.testing.assert_allclose(y, ref(a, b), rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("e", [2.0, 1.0, 0.5, -1.0])
@pytest.mark.parametrize("shape_a", [(257,), (1,), (3, 1)], ids=str)
def test_pow_by_a_broadcast_exponent_is_exact(binmath, e, shape_a):
    """A broadcast exponent of 2, 1, 0.5 or -1 runs as a * a, a, sqrt(a), 1 / a: the exact
    power rounded once to float32 (float64's pow, rounded; numpy's float32 power is itself
    off by an ulp on a tenth of these), with C's special values (-0 and -inf under 0.5 give
    +0 and +inf, negative bases under 0.5 NaN, zeros under -1 signed infinities)."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -3.5, 1e-30, -1e30, np.inf, -np.inf,
                        np.nan, 3e38], np.float32)
    a = RNG.standard_normal(shape_a).astype(np.float32) * 100
    a.flat[:min(a.size, special.size)] = special[:a.size]
    b = np.array([e], np.float32)
    # (3, 1) also into (3, 4): the base itself broadcast (stride 0)
    for out_shape in {a.shape, (3, 4) if shape_a == (3, 1) else a.shape}:
        y = np.empty(out_shape, np.float32)
        binmath.broadcast(binmath.POW, a, b, y, 1)
        with np.errstate(all="ignore"):
            exact = np.power(a.astype(np.float64), np.full(a.shape, e))
            want = np.broadcast_to(exact.astype(np.float32), out_shape)
        assert y.tobytes() == np.ascontiguousarray(want).tobytes()


def test_binmath_checks(binmath):
    a = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="reaches element"):
        binmath.make_pass(binmath.MIN, [a.ctypes.data, a.ctypes.data], [4, 3], [4],
                          [[1], [1]])
    with pytest.raises(ValueError, match="expected POW"):
        binmath.make_pass(99, [a.ctypes.data, a.ctypes.data], [4, 4], [4], [[1], [1]])


TYPES = {np.float32: 1, np.float64: 11, np.int8: 3, np.int16: 5, np.int32: 6, np.int64: 7,
         np.uint8: 2, np.uint16: 4, np.uint32: 12, np.uint64: 13}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda t: np.dtype(t).name)
def test_logic_compare_min_max(dtype, shapes, threads):
    a = np.asarray(RNG.integers(-9, 9, shapes[0])).astype(dtype)
    b = np.asarray(RNG.integers(-9, 9, shapes[1])).astype(dtype)
    out = _out(a, b)
    for name, ref in (("EQ", np.equal), ("LT", np.less), ("LE", np.less_equal),
                      ("GT", np.greater), ("GE", np.greater_equal)):
        y = np.empty(out, np.bool_)
        _logic.broadcast(_logic.OPS[name], TYPES[dtype], [a, b], y, threads)
        np.testing.assert_array_equal(y, ref(a, b), err_msg=name)
    for name, ref in (("MIN", np.minimum), ("MAX", np.maximum), ("MOD", np.mod),
                      ("FMOD", np.fmod)):
        y = np.empty(out, dtype)
        _logic.broadcast(_logic.OPS[name], TYPES[dtype], [a, b], y, threads)
        with np.errstate(all="ignore"):
            want = ref(a, b)
        if np.dtype(dtype).kind in "iu" and "MOD" in name:
            want = np.where(b == 0, 0, want)  # numpy warns and gives 0, as the kernel
        np.testing.assert_array_equal(y, want, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_logic_where(itemsize, threads):
    word = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    c = RNG.random((300, 1, 7)) < 0.5
    x = RNG.integers(0, 200, (1, 250, 1)).astype(word)
    z = RNG.integers(0, 200, (7,)).astype(word)
    y = np.empty((300, 250, 7), word)
    _logic.broadcast(_logic.OPS["WHERE"], {1: 2, 2: 4, 4: 12, 8: 13}[itemsize], [c, x, z], y,
                     threads)
    np.testing.assert_array_equal(y, np.where(c, x, z))


def test_logic_bitshift_and_pow():
    a = np.array([-128, -1, 1, 64, 127], np.int8)
    s = np.array([1, 7, 8, -1, 2], np.int8)
    y = np.empty(5, np.int8)
    _logic.broadcast(_logic.OPS["SHR"], 3, [a, s], y)
    np.testing.assert_array_equal(y, [-64, -1, 0, 0, 31])
    _logic.broadcast(_logic.OPS["SHL"], 3, [a, s], y)
    np.testing.assert_array_equal(y, [0, -128, 0, 0, -4])
    base = np.array([2, -3, 5, 1, -1, 7], np.int64)
    e = np.array([10, 3, -1, -5, -3, 0.5])
    y = np.empty(6, np.int64)
    _logic.broadcast(_logic.OPS["POW"], 7, [base, e], y)
    np.testing.assert_array_equal(y, [1024, -27, 0, 1, -1, 2])
