"""The data-movement impl module (_copy: any element type, baseline flags) against numpy,
on one and two threads; the big cases cross the parallel-step threshold."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from impl_variants import to_n16cx

from pplpy.engines.x86.impls import _copy as m
from pplpy.errors import InputError

DTYPES = [np.int8, np.float16, np.float32, np.int64, np.bool_]
RNG = np.random.default_rng(0)


def rand(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    return RNG.integers(-100, 100, shape).astype(dtype)


def both_threads(fn, out_shape, dtype):
    """Run fn(y, threads) for 1 and 2 threads into NaN-like garbage; the bytes must match."""
    results = []
    for threads in (1, 2):
        y = np.frombuffer(np.full(int(np.prod(out_shape)) * np.dtype(dtype).itemsize, 0xA5,
                                  np.uint8).tobytes(), dtype).reshape(out_shape).copy()
        fn(y, threads)
        results.append(y)
    assert results[0].tobytes() == results[1].tobytes()
    return results[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 63, 65, 300_000])
def test_copy(dtype, n):
    x = rand((n,), dtype)
    y = both_threads(lambda y, t: m.copy(x, y, t), (n,), dtype)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 5, 200_000])
def test_fill(dtype, n):
    value = np.ones((), dtype)
    y = both_threads(lambda y, t: m.fill(y, value, t), (n,), dtype)
    assert (y == value).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape, perm",
    [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)), ((5,), (0,)), ((), ()),
     ((1, 7, 1, 3), (3, 2, 1, 0)), ((2, 0, 3), (2, 1, 0)), ((64, 300, 33), (1, 2, 0)),
     ((2, 3, 4, 5, 6), (4, 0, 3, 1, 2))],
    ids=str,
)
def test_transpose(dtype, shape, perm):
    x = rand(shape, dtype)
    want = x.transpose(perm)
    y = both_threads(lambda y, t: m.transpose(x, perm, y, t), want.shape, dtype)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape, perm",
    [((100, 70), (1, 0)), ((3, 45, 37), (0, 2, 1)), ((2, 33, 5, 40), (0, 3, 2, 1)),
     ((16, 16), (1, 0)), ((130, 200), (1, 0)), ((64, 65), (1, 0)), ((4100, 128), (1, 0))],
    ids=str,
)
def test_transpose_in_tiles(dtype, shape, perm):
    """The source contiguous along an output axis other than the last, both at least 16
    long: the copy runs in tiles of 64 x 64 through a buffer (partial tiles of every size,
    an outer dim between the two axes, one big enough to run in parallel)."""
    x = rand(shape, dtype)
    want = x.transpose(perm)
    y = both_threads(lambda y, t: m.transpose(x, perm, y, t), want.shape, dtype)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("shape, perm", [((100, 70), (1, 0)), ((3, 45, 37), (0, 2, 1)),
                                         ((2, 33, 5, 40), (0, 3, 2, 1))], ids=str)
def test_transpose_in_tiles_moves_four_byte_patterns_bit_for_bit(shape, perm):
    """4-byte elements leave the tile buffer through SSE registers as floats: every bit
    pattern (signalling NaNs, denormals, -0 among random uint32) must come out unchanged."""
    bits = RNG.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    bits.reshape(-1)[:4] = [0x7F800001, 0xFFBFFFFF, 0x00000001, 0x80000000]
    want = bits.transpose(perm)
    for dtype in (np.uint32, np.float32):
        x = bits.view(dtype)
        y = both_threads(lambda y, t: m.transpose(x, perm, y, t), want.shape, dtype)
        assert y.view(np.uint32).tobytes() == np.ascontiguousarray(want).tobytes()


def test_which_copies_go_in_tiles():
    """The tiled path is taken where the source is contiguous along an output axis other
    than the last and both are at least 16 long, and only there."""
    def kind(shape, perm, es=4):
        dims, strides = m.transpose_strides(shape, perm, es)
        return m.strided_copy_kind(es, dims, strides)
    assert kind((100, 70), (1, 0)) == "tiled"
    assert kind((2, 33, 5, 40), (0, 3, 2, 1)) == "tiled"
    assert kind((4100, 128), (1, 0), es=8) == "tiled"
    assert kind((100, 70), (1, 0), es=16) == "strided"  # elements too big for the buffer
    assert kind((15, 70), (1, 0)) == "strided"  # an axis shorter than 16
    assert kind((2, 12, 128, 64), (0, 2, 1, 3)) == "strided"  # rows of 64 contiguous
    assert m.strided_copy_kind(4, [70, 45], [4, 0]) == "tiled"  # Expand's column broadcast


def test_broadcast_copy_in_tiles():
    """A column broadcast along the last axis (source stride 0 there, Expand's form) goes
    the tiled way too."""
    x = rand((70, 1), np.float32)
    view = np.broadcast_to(x, (70, 45))
    y = both_threads(lambda y, t: m.strided_copy(view, y, t), view.shape, np.float32)
    np.testing.assert_array_equal(y, view)


@settings(derandomize=True, max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.data(),
       st.sampled_from([np.uint8, np.int16, np.float32, np.float64]))
def test_transpose_random(shape, data, dtype):
    perm = data.draw(st.permutations(range(len(shape))))
    x = rand(shape, dtype)
    want = x.transpose(perm)
    y = both_threads(lambda y, t: m.transpose(x, perm, y, t), want.shape, dtype)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("index", [
    (slice(1, 3), slice(None, None, -2), slice(4, 0, -1), slice(None, None, 3)),
    (slice(None), slice(0, 0), slice(None), slice(None)),
    (slice(None, None, -1), slice(None), slice(None), slice(None)),
], ids=["mixed", "empty", "reverse-outer"])
def test_strided_copy(index):
    x = rand((3, 4, 5, 6), np.int32)
    view = x[index]
    y = both_threads(lambda y, t: m.strided_copy(view, y, t), view.shape, np.int32)
    np.testing.assert_array_equal(y, view)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("sizes", [(1, 4, 2), (3,), (0, 2), (200, 300)])
def test_concat(dtype, axis, sizes):
    base = (2, 3, 5) if max(sizes) < 100 else (4, 100, 70)
    xs = [rand(tuple(k if i == axis else d for i, d in enumerate(base)), dtype)
          for k in sizes]
    want = np.concatenate(xs, axis)
    y = both_threads(lambda y, t: m.concat(xs, axis, y, t), want.shape, dtype)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("indices", [[0], [-1, 2, 0, 2], [[1, -2], [0, 0]], 1],
                         ids=["one", "negative", "2d", "scalar"])
def test_gather(index_dtype, axis, indices):
    data = rand((3, 4, 5), np.float32)
    idx = np.asarray(indices, index_dtype)
    want = np.take(data, idx, axis)
    y = both_threads(lambda y, t: m.gather(data, idx, axis, y, t), want.shape, np.float32)
    np.testing.assert_array_equal(y, want)


def test_gather_big_rows_parallel():
    data = rand((64, 2000), np.int64)
    idx = np.array([5, -1, 0, 63] * 20, np.int64)
    want = np.take(data, idx, 0)
    y = both_threads(lambda y, t: m.gather(data, idx, 0, y, t), want.shape, np.int64)
    np.testing.assert_array_equal(y, want)


def test_gather_out_of_range_rows_are_zero_and_the_run_raises():
    """An index outside [-dim, dim) never reads out of bounds in a step: its row is zero,
    and the run raises an InputError with one of the bad indices."""
    data = rand((4, 3), np.int64)
    idx = np.array([4, -5, 1, 1 << 40], np.int64)

    def gather(y, threads):
        with pytest.raises(InputError, match=r"index (4|-5|1099511627776) is out of range "
                                             r"for an axis of 4 \(valid: -4 to 3\)"):
            m.gather(data, idx, 0, y, threads)

    y = both_threads(gather, (4, 3), np.int64)
    np.testing.assert_array_equal(y[[0, 1, 3]], 0)
    np.testing.assert_array_equal(y[2], data[1])
    # The record is cleared: a good run after a bad one raises nothing.
    y = both_threads(lambda y, t: m.gather(data, idx[2:3], 0, y, t), (1, 3), np.int64)
    np.testing.assert_array_equal(y[0], data[1])


@pytest.mark.parametrize("channels", [(16, 16), (5, 7), (3, 17, 1), (20, 30, 33), (1,),
                                      (0, 5), (32, 8)], ids=str)
@pytest.mark.parametrize("pixels", [1, 9, 2048])
def test_concat_n16cx(channels, pixels):
    batch = 2
    xs = [RNG.standard_normal((batch, c, pixels)).astype(np.float32) for c in channels]
    blocked = [to_n16cx(x) for x in xs]
    want = to_n16cx(np.concatenate(xs, axis=1))
    y = both_threads(lambda y, t: m.concat_n16cx(blocked, channels, y, t), want.shape,
                     np.float32)
    np.testing.assert_array_equal(y, want)   # padding lanes are zero too


@pytest.mark.parametrize("channels, groups", [(32, 2), (116, 2), (48, 3), (24, 4)])
@pytest.mark.parametrize("pixels", [1, 49])
def test_channel_map_n16cx_shuffles_and_slices_channels(channels, groups, pixels):
    """A channel shuffle (channels c/g apart become neighbours) and a strided channel slice
    with an odd start, against numpy."""
    batch = 2
    x = RNG.standard_normal((batch, channels, pixels)).astype(np.float32)
    per = channels // groups
    shuffle = [(0, (c % groups) * per + c // groups) for c in range(channels)]
    want = x.reshape(batch, groups, per, pixels).transpose(0, 2, 1, 3).reshape(x.shape)
    y = both_threads(lambda y, t: m.channel_map_n16cx([to_n16cx(x)], [channels], shuffle, y, t),
                     to_n16cx(want).shape, np.float32)
    np.testing.assert_array_equal(y, to_n16cx(want))
    picked = list(range(3, channels, 2))
    want = x[:, picked]
    y = both_threads(lambda y, t: m.channel_map_n16cx([to_n16cx(x)], [channels],
                                                      [(0, c) for c in picked], y, t),
                     to_n16cx(want).shape, np.float32)
    np.testing.assert_array_equal(y, to_n16cx(want))
    with pytest.raises(ValueError, match="source channel"):
        m.channel_map_n16cx([to_n16cx(x)], [channels], [(0, channels)], y)


def test_step_rejects_bad_arguments():
    with pytest.raises(ValueError, match="1, 2, 4 or 8 bytes"):
        m.make_fill_step(0, 4, b"abc")
    with pytest.raises(ValueError, match="int32 or int64"):
        m.make_gather_step(0, 0, 0, 2, 1, 1, 1, 4)
    with pytest.raises(ValueError, match="more than pplpy's 16"):
        m.make_strided_copy_step(0, 0, 1, [2] * 17, [2 ** k for k in range(17)])


def test_steps_are_serial_when_small_and_parallel_when_big():
    assert not m.make_copy_step(0, 0, 1000).parallel
    assert m.make_copy_step(0, 0, 1 << 20).parallel
