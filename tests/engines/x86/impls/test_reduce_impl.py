"""The reduce_fp32 kernels of every ISA variant against numpy: every reduction kind over
random shapes and axis sets (adjacent and not, negative, none, all), as a mask fixed when the
step is made and as an axes tensor read when it runs, on 1 and 2 threads; integer and bool
kinds; the accuracy of long float sums; ArgMax/ArgMin, CumSum and CumProd."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl_variants import assert_variants_export_the_same_names, variant_fixture

FAMILY = "reduce_fp32"
variant = variant_fixture(FAMILY)
RNG = np.random.default_rng(5)


def _reference(kind, x, axes):
    axes = tuple(axes)
    with np.errstate(all="ignore"):
        if kind == "sum":
            return np.sum(x, axis=axes, dtype=x.dtype)
        if kind == "mean":
            return np.mean(x, axis=axes, dtype=x.dtype)
        if kind == "max":
            return np.max(x, axis=axes, initial=_init(x, -np.inf))
        if kind == "min":
            return np.min(x, axis=axes, initial=_init(x, np.inf))
        if kind == "prod":
            return np.prod(x, axis=axes, dtype=x.dtype)
        if kind == "l1":
            return np.sum(np.abs(x), axis=axes)
        if kind == "l2":
            return np.sqrt(np.sum(np.square(x), axis=axes))
        if kind == "sum_square":
            return np.sum(np.square(x), axis=axes)
        if kind == "log_sum":
            return np.log(np.sum(x, axis=axes))
        if kind == "log_sum_exp":
            x64 = x.astype(np.float64)
            return np.log(np.sum(np.exp(x64), axis=axes)).astype(np.float32)
    raise AssertionError(kind)


def _init(x, value):
    if x.dtype == np.bool_:
        return value > 0
    if x.dtype.kind == "i":
        info = np.iinfo(x.dtype)
        return info.max if value > 0 else info.min
    return value


def _data(kind, shape, dtype=np.float32):
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        low, high = (-3, 4) if kind == "prod" else (-1000, 1000)
        return RNG.integers(low, high, shape).astype(dtype)
    x = RNG.standard_normal(shape).astype(np.float32)
    if kind == "log_sum":
        x = np.abs(x) + np.float32(0.1)
    if kind == "prod":
        x = np.float32(1) + x * np.float32(0.05)
    return x


def _run(variant, kind, x, axes, threads, at_run_time, noop=False):
    keep = [d for i, d in enumerate(x.shape) if i not in {a % x.ndim for a in axes}] \
        if (axes or noop) else []
    y = np.empty(keep, x.dtype)
    variant.reduce(kind, x, y, axes=list(axes), noop=noop, num_threads=threads,
                   axes_at_run_time=at_run_time)
    return y


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


@st.composite
def shape_and_axes(draw):
    rank = draw(st.integers(0, 5))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axes = draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank)) \
        if rank else []
    negate = draw(st.booleans())
    axes = [a - rank if negate else a for a in axes]
    return shape, axes


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "prod", "l1", "l2",
                                  "sum_square", "log_sum", "log_sum_exp"])
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=shape_and_axes(), threads=st.sampled_from([1, 2]), at_run_time=st.booleans())
def test_float_kinds_match_numpy(variant, kind, case, threads, at_run_time):
    shape, axes = case
    x = _data(kind, shape)
    want = _reference(kind, x, [a % len(shape) for a in axes] if axes else range(len(shape)))
    got = _run(variant, kind, x, axes, threads, at_run_time)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,kind", [(d, k) for d in (np.int32, np.int64)
                                        for k in ("sum", "max", "min", "prod")]
                         + [(np.bool_, "max"), (np.bool_, "min")])
@pytest.mark.parametrize("threads", [1, 2])
def test_integer_and_bool_kinds_are_exact(variant, dtype, kind, threads):
    for shape, axes in [((5, 6, 7), [1]), ((4, 3, 33), [0, 2]), ((300, 300), [-1]),
                        ((2, 3, 4, 5), [1, 3]), ((9,), [])]:
        x = _data(kind, shape, dtype)
        want = _reference(kind, x, axes or range(len(shape)))
        got = _run(variant, kind, x, axes, threads, False)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,axes", [((1 << 20,), [0]), ((1 << 12, 256), [0]),
                                        ((256, 1 << 12), [0, 1]), ((64, 128, 128), [0, 2])])
def test_long_float_sums_stay_accurate(variant, shape, axes, threads):
    """Pairwise summation: 1M positive floats summed within ~1e-6 relative."""
    x = (RNG.random(shape) + 0.5).astype(np.float32)
    want = np.sum(x.astype(np.float64), axis=tuple(axes))
    got = _run(variant, "sum", x, axes, threads, False)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    got = _run(variant, "mean", x, axes, threads, True)
    np.testing.assert_allclose(got, want / (x.size / want.size), rtol=2e-6)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("shape,axes", [((8, 768), (1,)), ((8, 17), (1,)), ((8, 65), (1,)),
                                        ((8, 1), (1,)), ((5, 8, 70), (0, 2))], ids=str)
def test_max_and_min_over_contiguous_runs_keep_nan_and_infinities(variant, kind, shape, axes):
    """Max / Min over contiguous runs (the vector row code): a NaN anywhere in a reduced set
    gives NaN, +-inf count as values, a set of -inf (max) or +inf (min) only gives that, at
    the first, middle and last position of the runs (vector body and tail); with axes that are
    not adjacent each output combines several runs the same way."""
    x = RNG.standard_normal(shape).astype(np.float32)
    # one row per output: x itself, or for (0, 2) a copy written back below
    sets = np.moveaxis(x, 1, 0).reshape(8, -1) if axes == (0, 2) else x
    n = sets.shape[1]
    sets[1, n - 1] = np.nan
    sets[2, 0] = np.inf
    sets[3, n // 2] = -np.inf
    sets[4] = -np.inf if kind == "max" else np.inf
    sets[5, n // 2] = np.nan
    sets[6] = np.nan
    sets[7, 0] = -np.inf
    if axes == (0, 2):
        x = np.ascontiguousarray(np.moveaxis(sets.reshape(8, shape[0], shape[2]), 0, 1))
    want = _reference(kind, x, axes)
    y = np.full(want.shape, 7.0, np.float32)
    variant.reduce(kind, x, y, axes=list(axes), num_threads=1)
    np.testing.assert_array_equal(y, want)


def test_log_sum_exp_subtracts_the_max(variant):
    x = np.array([[1000, 1000.5, 999], [-1000, -1001, -np.inf],
                  [-np.inf, -np.inf, -np.inf], [np.inf, 0, 1]], np.float32)
    got = _run(variant, "log_sum_exp", x, [1], 1, False)
    with np.errstate(all="ignore"):
        m = np.max(x, axis=1, keepdims=True)
        m[~np.isfinite(m)] = 0
        want = (np.log(np.sum(np.exp(x - m), axis=1)) + m[:, 0]).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[2] == -np.inf and got[3] == np.inf


@pytest.mark.parametrize("kind,value", [("sum", 0), ("mean", np.nan), ("max", -np.inf),
                                        ("min", np.inf), ("prod", 1), ("l2", 0),
                                        ("log_sum", -np.inf), ("log_sum_exp", -np.inf)])
def test_empty_sets_give_the_identity(variant, kind, value):
    x = np.zeros((3, 0, 4), np.float32)
    got = _run(variant, kind, x, [1], 1, False)
    assert got.shape == (3, 4)
    np.testing.assert_array_equal(got, np.full((3, 4), value, np.float32))


@pytest.mark.parametrize("kind", ["sum", "l2", "log_sum_exp", "sum_square"])
def test_noop_with_empty_axes_applies_f_only(variant, kind):
    x = _data(kind, (3, 5))
    got = _run(variant, kind, x, [], 1, True, noop=True)
    want = {"sum": x, "l2": np.abs(x), "log_sum_exp": x, "sum_square": x * x}[kind]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_blocked_layout_is_a_reduction_over_the_same_physical_axes(variant):
    """ReduceMean over H, W of N16CX (N, C/16, H, W, 16) -> (N, C/16, 1, 1, 16)."""
    x = RNG.standard_normal((2, 3, 7, 9, 16)).astype(np.float32)
    y = np.empty((2, 3, 16), np.float32)
    variant.reduce("mean", x, y, axes=[2, 3], num_threads=2)
    np.testing.assert_allclose(y, x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_arg_reduce_matches_numpy(variant, dtype, is_max, last, threads):
    for shape in [(7,), (4, 5), (3, 200, 5), (2, 3, 300), (70, 1000)]:
        x = RNG.integers(-4, 4, shape).astype(dtype)   # ties decide first vs last
        for axis in range(-len(shape), len(shape)):
            got = variant.arg_reduce(x, axis, is_max, last, threads)
            f = np.argmax if is_max else np.argmin
            if last:
                flipped = np.flip(x, axis)
                want = x.shape[axis] - 1 - f(flipped, axis=axis)
            else:
                want = f(x, axis=axis)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scan", ["sum", "prod"])
def test_scans_match_numpy(variant, scan, dtype, exclusive, reverse, threads):
    # Running products stay exact: values in {-1, 1, 2} for float64 (2**700 is in range),
    # {-1, 1} for the other types (no overflow).
    values = np.array([-1, 1, 2], dtype) if scan == "prod" else np.arange(-9, 9, dtype=dtype)
    combine = np.cumsum if scan == "sum" else np.cumprod
    for shape in [(9,), (4, 5), (3, 200, 5), (100, 700)]:
        x = RNG.choice(values, shape)
        if scan == "prod" and dtype != np.float64:
            x = np.where(x == 2, 1, x).astype(dtype)
        for axis in range(-len(shape), len(shape)):
            got = getattr(variant, "cum" + scan)(x, axis, exclusive, reverse, threads)
            src = np.flip(x, axis) if reverse else x
            want = combine(src, axis=axis, dtype=dtype)
            if exclusive:  # shift by one along the axis, starting from the identity
                first = np.full_like(np.take(src, [0], axis=axis), 0 if scan == "sum" else 1)
                want = np.concatenate([first, np.delete(want, -1, axis=axis)], axis=axis)
            if reverse:
                want = np.flip(want, axis)
            np.testing.assert_array_equal(got, want)
