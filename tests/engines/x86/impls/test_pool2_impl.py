"""The pool2_fp32 kernels (LpPool, MaxUnpool) of every ISA variant against numpy: LpPool for
p = 1, 2 and 3 with strides, pads, dilations and ceil_mode-sized outputs on 1 to 3 spatial
axes, NDARRAY and N16CX, 1 and 2 threads (same bytes); MaxUnpool with a later index winning,
out-of-range indices skipped, and an output larger than the unpooled shape."""

import numpy as np
import pytest

from impl_variants import assert_variants_export_the_same_names, variant_fixture

from pplpy.errors import InputError

variant = variant_fixture("pool2_fp32")
RNG = np.random.default_rng(12)


def lppool_oracle(x, out, kernel, strides, pads_begin, dilations, p):
    """(sum over in-bounds taps of |x|^p)^(1/p), float64."""
    rank = x.ndim - 2
    y = np.zeros(x.shape[:2] + tuple(out))
    ax = np.abs(x.astype(np.float64)) ** p
    for o in np.ndindex(*out):
        for k in np.ndindex(*kernel):
            i = [o[a] * strides[a] - pads_begin[a] + k[a] * dilations[a] for a in range(rank)]
            if all(0 <= i[a] < x.shape[2 + a] for a in range(rank)):
                y[(slice(None), slice(None)) + o] += ax[(slice(None), slice(None)) + tuple(i)]
    return (y ** (1.0 / p)).astype(np.float32)


# (spatial, out, kernel, strides, pads_begin, dilations)
GEOMETRIES = [
    ((9, 7), (5, 4), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((9, 7), (5, 3), (3, 2), (2, 2), (0, 0), (1, 2)),        # ceil_mode-sized rows
    ((20,), (10,), (4,), (2,), (1,), (1,)),
    ((4, 5, 6), (3, 4, 3), (2, 2, 3), (1, 1, 2), (0, 0, 1), (1, 1, 1)),
    ((64, 64), (32, 32), (2, 2), (2, 2), (0, 0), (1, 1)),    # a parallel step
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=[str(i) for i in range(len(GEOMETRIES))])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("n16cx", [False, True], ids=["ndarray", "n16cx"])
def test_lppool_against_numpy(variant, geo, p, n16cx):
    sp, out, k, s, pb, d = geo
    x = RNG.standard_normal((2, 19) + sp).astype(np.float32)
    want = lppool_oracle(x, out, k, s, pb, d, p)
    if n16cx:
        padded = np.zeros((2, 32) + sp, np.float32)
        padded[:, :19] = x
        xb = np.ascontiguousarray(np.moveaxis(padded.reshape((2, 2, 16) + sp), 2, -1))
        one = variant.lppool_fp32(xb, out, k, s, pb, d, p, 1, True)
        two = variant.lppool_fp32(xb, out, k, s, pb, d, p, 2, True)
        assert np.isfinite(one).all()
        got = np.moveaxis(one, -1, 2).reshape((2, 32) + out)[:, :19]
    else:
        one = variant.lppool_fp32(x, out, k, s, pb, d, p, 1)
        two = variant.lppool_fp32(x, out, k, s, pb, d, p, 2)
        got = one
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert one.tobytes() == two.tobytes()


def test_lppool_rejects_bad_p(variant):
    with pytest.raises(ValueError, match="p must be"):
        variant.make_lppool_step(1, 1, 1, 1, (3,), (1,), (3,), (1,), (0,), (1,), 0.0)


def test_maxunpool_scatter(variant):
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    idx = np.array([0, 5, 10, 15, 16, 16, 31, 30], np.int64).reshape(x.shape)
    got = variant.maxunpool_fp32(x, idx, (1, 2, 4, 4), (1, 2, 4, 4))
    want = np.zeros(32, np.float32)
    want[[0, 5, 10, 15, 31, 30]] = [1, 2, 3, 4, 7, 8]
    want[16] = 6   # the later index wins
    np.testing.assert_array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("bad", [32, 99, -1])
def test_maxunpool_index_out_of_range_raises(variant, bad):
    """An index past the unpooled shape is skipped (nothing written out of bounds) and the
    run raises an InputError naming it, as ONNX Runtime refuses it."""
    x = np.ones((1, 2, 2, 2), np.float32)
    idx = np.array([0, 5, 10, 15, 16, 17, 31, bad], np.int64).reshape(x.shape)
    with pytest.raises(InputError, match=rf"index {bad} of I is out of range for the "
                                         rf"unpooled shape \[1, 2, 4, 4\] \(valid: 0 to 31\)"):
        variant.maxunpool_fp32(x, idx, (1, 2, 4, 4), (1, 2, 4, 4))


def test_maxunpool_into_a_larger_output(variant):
    x = RNG.standard_normal((2, 3, 2, 3)).astype(np.float32)
    src = (2, 3, 4, 6)
    idx = RNG.choice(np.prod(src), size=x.size, replace=False).astype(np.int64)
    got = variant.maxunpool_fp32(x, idx.reshape(x.shape), src, (2, 3, 5, 8))
    flat = np.zeros(int(np.prod(src)), np.float32)
    flat[idx] = x.reshape(-1)
    want = np.zeros((2, 3, 5, 8), np.float32)
    want[:, :, :4, :6] = flat.reshape(src)
    np.testing.assert_array_equal(got, want)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("pool2_fp32")
