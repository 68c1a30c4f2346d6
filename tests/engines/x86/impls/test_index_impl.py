"""The _index and _cast impl modules and _copy's pad step against numpy, on 1 and 2 threads,
with sizes past the parallel thresholds."""

import numpy as np
import pytest

from pplpy.engines.x86.impls import _cast, _copy, _index
from pplpy.errors import InputError

RNG = np.random.default_rng(3)
THREADS = [1, 2]


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode, num_threads):
    x = RNG.standard_normal((70, 30, 40)).astype(np.float32)
    pads = [(2, 1), (0, -3), (5, 7)]
    want = np.pad(x[:, :27], [(2, 1), (0, 0), (5, 7)], mode=mode,
                  **({"constant_values": 9} if mode == "constant" else {}))
    y = np.empty(want.shape, np.float32)
    _copy.pad(x, pads, y, mode, 9, num_threads)
    np.testing.assert_array_equal(y, want)


def test_pad_table_rejects_reads_outside():
    with pytest.raises(ValueError):
        _copy.make_pad_step(0, 0, 0, 4, [3], [np.array([0, 3])])


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_, np.float16])
def test_gather_elements(dtype, num_threads):
    data = (RNG.standard_normal((300, 400)) * 10).astype(dtype)
    idx = RNG.integers(-300, 300, (200, 400)).astype(np.int32)
    y = np.empty(idx.shape, data.dtype)
    _index.gather_elements(data, idx, 0, y, num_threads)
    np.testing.assert_array_equal(y, np.take_along_axis(data, idx % 300, 0))


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("axis", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype, index_dtype", [(np.float32, np.int64), (np.int64, np.int32),
                                                (np.uint8, np.int64), (np.float16, np.int32)])
def test_gather_elements_every_axis(axis, dtype, index_dtype, num_threads):
    """Rows along the last axis, whichever the gathered one (DeBERTa's relative positions
    gather along the last); indices smaller than data off the axis; negative indices;
    rows cut between the threads' shares (3 * 4 * 5 * 999 elements)."""
    data = (RNG.standard_normal((3, 5, 6, 1000)) * 10).astype(dtype)
    shape = [3, 4, 5, 999]
    shape[axis] = 7
    n = data.shape[axis]
    idx = RNG.integers(-n, n, shape).astype(index_dtype)
    y = np.empty(idx.shape, dtype)
    _index.gather_elements(data, idx, axis, y, num_threads)
    sliced = data[tuple(slice(0, d) if k != axis else slice(None) for k, d in enumerate(shape))]
    np.testing.assert_array_equal(y, np.take_along_axis(sliced, idx % n, axis))


@pytest.mark.parametrize("num_threads", THREADS)
def test_gather_elements_out_of_range_gives_zeros_and_raises(num_threads):
    data = np.ones((2, 3), np.float32)
    y = np.empty((2, 3), np.float32)
    with pytest.raises(InputError, match=r"index (5|-9) is out of range for axis 0 of 2 "
                                         r"\(valid: -2 to 1\)"):
        _index.gather_elements(data, np.array([[0, 5, -9], [1, 1, 1]], np.int64), 0, y,
                               num_threads)
    np.testing.assert_array_equal(y, [[1, 0, 0], [1, 1, 1]])


@pytest.mark.parametrize("num_threads", THREADS)
def test_gather_elements_row_with_a_bad_index_in_its_middle(num_threads):
    """float32 data by int64 indices (the typed fast loop) along the last axis: the bad
    index stops it, the element is zeroed and recorded, the rest of the row still gathers."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 1, 2, 3], [3, 9, -1, 0], [-4, 2, 2, 1]], np.int64)
    y = np.empty(idx.shape, np.float32)
    with pytest.raises(InputError, match="index 9 is out of range"):
        _index.gather_elements(data, idx, 1, y, num_threads)
    np.testing.assert_array_equal(y, [[0, 1, 2, 3], [7, 0, 7, 4], [8, 10, 10, 9]])


# Each indexing step records an index out of range fed at run time and the run raises an
# InputError after it (steps never fail mid-run: a gather writes zeros, a scatter skips);
# the record is cleared, so the same step runs again cleanly with good indices.
def _run_twice(run, bad, good, match):
    with pytest.raises(InputError, match=match):
        run(bad)
    return run(good)


@pytest.mark.parametrize("num_threads", THREADS)
def test_scatter_elements_out_of_range_is_skipped_and_raises(num_threads):
    data = np.zeros(5, np.float32)
    upd = np.array([1, 2], np.float32)
    y = np.empty_like(data)
    _run_twice(lambda i: _index.scatter_elements(data, i, upd, 0, y, "none", num_threads),
               np.array([1, 7], np.int64), np.array([1, 4], np.int32),
               r"index 7 is out of range for axis 0 of 5")
    np.testing.assert_array_equal(y, [0, 1, 0, 0, 2])


@pytest.mark.parametrize("num_threads", THREADS)
def test_gather_nd_out_of_range_gives_zeros_and_raises(num_threads):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((2,), 7, np.float32)
    with pytest.raises(InputError, match=r"index -5 is out of range .* dims \[3, 4\]"):
        _index.gather_nd(data, np.array([[2, 3], [0, -5]], np.int64), 0, y, num_threads)
    np.testing.assert_array_equal(y, [11, 0])
    _index.gather_nd(data, np.array([[2, 3], [0, -3]], np.int64), 0, y, num_threads)
    np.testing.assert_array_equal(y, [11, 1])


@pytest.mark.parametrize("num_threads", THREADS)
def test_scatter_nd_out_of_range_is_skipped_and_raises(num_threads):
    data = np.zeros((3, 2), np.float32)
    upd = np.ones((2, 2), np.float32)
    y = np.empty_like(data)
    _run_twice(lambda i: _index.scatter_nd(data, i, upd, y, "add", num_threads),
               np.array([[3], [1]], np.int64), np.array([[-1], [1]], np.int64),
               r"index 3 is out of range for its dim")
    np.testing.assert_array_equal(y, [[0, 0], [1, 1], [1, 1]])


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction, num_threads):
    data = RNG.standard_normal((1000, 80)).astype(np.float64)
    idx = RNG.integers(-1000, 1000, (300, 1)).astype(np.int64)
    upd = RNG.standard_normal((300, 80))
    want = data.copy()
    for j, (r,) in enumerate(idx % 1000):
        u = upd[j]
        want[r] = {"none": u, "add": want[r] + u, "mul": want[r] * u,
                   "max": np.maximum(want[r], u), "min": np.minimum(want[r], u)}[reduction]
    y = np.empty_like(data)
    _index.scatter_nd(data, idx, upd, y, reduction, num_threads)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("num_threads", THREADS)
def test_scatter_elements_skips_out_of_range_and_raises(num_threads):
    data = np.zeros((400, 300), np.int32)
    idx = np.full((2, 300), 1000, np.int64)
    idx[0, 0] = 5
    y = np.empty_like(data)
    with pytest.raises(InputError, match="index 1000 is out of range for axis 0 of 400"):
        _index.scatter_elements(data, idx, np.ones((2, 300), np.int32), 0, y, "add",
                                num_threads)
    assert y.sum() == 1 and y[5, 0] == 1


@pytest.mark.parametrize("num_threads", THREADS)
def test_gather_nd_batch(num_threads):
    data = RNG.standard_normal((4, 500, 70)).astype(np.float32)
    idx = RNG.integers(0, 500, (4, 300, 1)).astype(np.int64)
    y = np.empty((4, 300, 70), np.float32)
    _index.gather_nd(data, idx, 1, y, num_threads)
    np.testing.assert_array_equal(y, np.stack([data[b][idx[b, :, 0]] for b in range(4)]))


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint64, np.int8])
def test_topk(dtype, num_threads):
    x = np.abs(RNG.standard_normal((300, 257)) * 20).astype(dtype)
    k = 9
    v = np.empty((300, k), dtype)
    i = np.empty((300, k), np.int64)
    _index.topk(x, k, 1, v, i, True, num_threads)
    order = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(x, order, 1))


def _rank_order(row, largest):
    """Indices best first: NaN first (largest) or last, ties by lower index."""
    nan = np.isnan(row.astype(np.float64))
    if largest:
        return sorted(range(row.size), key=lambda i: (not nan[i], 0 if nan[i] else -row[i], i))
    return sorted(range(row.size), key=lambda i: (bool(nan[i]), 0 if nan[i] else row[i], i))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n,k", [(400, 1), (400, 7), (400, 100), (400, 101), (400, 400),
                                 (5, 1), (4, 1), (9, 0)], ids=str)
def test_topk_selects_and_sorts_with_ties_nan_and_strides(dtype, largest, n, k):
    """k at most a quarter of the axis goes through a heap of the k best, more through a
    sort of the whole axis: both give the order of a stable sort, ties by lower index, NaN
    above every number, along a strided axis (inner 3) too."""
    rng = np.random.default_rng(n * 7 + k)
    x = rng.integers(-5, 6, (2, n, 3)).astype(dtype)   # many ties
    if dtype == np.float32:
        x[rng.random(x.shape) < 0.1] = np.nan
        x[0, n // 2, 0], x[1, 0, 2] = np.inf, -np.inf
    v = np.empty((2, k, 3), dtype)
    i = np.empty((2, k, 3), np.int64)
    _index.topk(x, k, 1, v, i, largest, 2)
    for o in range(2):
        for c in range(3):
            want = np.array(_rank_order(x[o, :, c], largest)[:k], np.int64)
            np.testing.assert_array_equal(i[o, :, c], want)
            np.testing.assert_array_equal(v[o, :, c], x[o, want, c])


def test_nonzero():
    x = np.array([[0.0, -0.0, 2.0], [np.nan, 0.0, 1.0]], np.float32)
    y = np.empty((2, 3), np.int64)
    _index.nonzero(x, y)
    np.testing.assert_array_equal(y, np.array(np.nonzero(x)))


TYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32,
         np.uint32, np.int64, np.uint64, np.bool_]


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("src", TYPES)
@pytest.mark.parametrize("dst", TYPES)
def test_cast(src, dst, num_threads):
    x = (RNG.standard_normal(70000) * 60).astype(np.float32)
    if not np.issubdtype(src, np.floating) or not np.issubdtype(dst, np.floating):
        x = np.abs(x)  # C and numpy agree on in-range values only
    x = x.astype(src)
    y = np.empty(x.shape, dst)
    _cast.cast(x, y, num_threads)
    np.testing.assert_array_equal(y, x.astype(dst))


def test_float16_to_float32_is_exact_for_every_half():
    """All 65,536 float16 bit patterns (subnormals, infinities, NaN payloads, -0) into float32
    bit for bit as numpy converts them (the vectorised bit formula of _float16.h), and
    through it into float64 and int32 (the same values; a signalling NaN comes out quiet
    in float64, as the float32 -> float64 instruction makes it)."""
    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    y = np.empty(halves.shape, np.float32)
    _cast.cast(halves, y, 1)
    assert y.tobytes() == halves.astype(np.float32).tobytes()
    for dst in (np.float64, np.int32):
        x = halves[np.isfinite(halves)] if dst == np.int32 else halves
        y = np.empty(x.shape, dst)
        _cast.cast(x, y, 1)
        want = x.astype(dst)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(y), nan)
        assert y[~nan].tobytes() == want[~nan].tobytes()


def test_float32_to_float16_rounds_as_numpy():
    """float32 into float16 bit for bit as numpy: rounding ties to even at every exponent,
    the overflow edge (65504, 65519.99, 65520), the subnormal range and its rounding, the
    smallest half subnormal's half, +-inf, -0; NaN stays NaN with its sign."""
    rng = np.random.default_rng(7)
    ties = (np.arange(-24, 16, dtype=np.float64)[:, None]
            + np.log2(1 + (np.arange(1024) + 0.5) / 1024)[None, :]).ravel()
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 65536, 1e30,
                         2.0**-14, 2.0**-15, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-26,
                         6.1e-5, 5.96e-8, 1e-45, 3.0e-8], np.float32)
    x = np.concatenate([
        np.exp2(ties).astype(np.float32), -np.exp2(ties).astype(np.float32), specials,
        -specials, rng.standard_normal(100_000).astype(np.float32) * 1000,
        rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    y = np.empty(x.shape, np.float16)
    _cast.cast(x, y, 2)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(y), nan)
    assert y[~nan].tobytes() == want[~nan].tobytes()
    np.testing.assert_array_equal(np.signbit(y[nan]), np.signbit(x[nan]))


def test_fault_texts_name_the_valid_range():
    from pplpy.engines.x86.impls.fault_text import valid_indices

    assert valid_indices(3) == "valid: -3 to 2"
    assert valid_indices(32, negative=False) == "valid: 0 to 31"
    assert valid_indices(0) == valid_indices(0, negative=False) == (
        "the axis is empty: no index is valid")  # not "-0 to -1"
