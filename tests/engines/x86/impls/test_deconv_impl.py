"""The deconv_fp32 kernels (ConvTranspose) of every ISA variant against a numpy loop over
input pixels and taps: 1-D to 3-D, groups, strides, dilations, negative and positive
pads_begin, output sizes other than the natural one, packed and run-time weights, NDARRAY and
N16CX on either side, 1 and 2 threads (same bytes)."""

import numpy as np
import pytest

from impl_variants import assert_variants_export_the_same_names, variant_fixture
from pplpy.runtime.step import run_steps

variant = variant_fixture("deconv_fp32")
RNG = np.random.default_rng(11)


def deconv_oracle(x, w, b, group, out_sp, strides, pads_begin, dil):
    """y[o * ...] accumulated in float64 from every (input pixel, tap) pair."""
    n, c = x.shape[:2]
    rank = x.ndim - 2
    ocg, icg = w.shape[1], c // group
    y = np.zeros((n, ocg * group) + tuple(out_sp))
    for idx in np.ndindex(*x.shape[2:]):
        for k in np.ndindex(*w.shape[2:]):
            o = [idx[i] * strides[i] - pads_begin[i] + k[i] * dil[i] for i in range(rank)]
            if any(not 0 <= o[i] < out_sp[i] for i in range(rank)):
                continue
            for g in range(group):
                xs = x[(slice(None), slice(g * icg, (g + 1) * icg)) + idx].astype(np.float64)
                ws = w[(slice(g * icg, (g + 1) * icg), slice(None)) + k]
                y[(slice(None), slice(g * ocg, (g + 1) * ocg)) + tuple(o)] += xs @ ws
    if b is not None:
        y += b.reshape((1, -1) + (1,) * rank)
    return y.astype(np.float32)


def natural(sp, k, s, p, d, extra=0):
    return tuple((sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - 2 * p[i] + extra
                 for i in range(len(sp)))


# (spatial, kernel, strides, pads_begin (both sides), dilations, group, in_c, out_c, extra)
SHAPES = [
    ((5, 6), (3, 3), (2, 2), (1, 0), (1, 1), 1, 3, 5, 0),
    ((4,), (3,), (3,), (0,), (2,), 2, 4, 6, 0),
    ((3, 4, 5), (2, 3, 2), (1, 2, 2), (0, 1, 0), (1, 1, 2), 1, 2, 3, 0),
    ((7, 7), (4, 4), (2, 2), (1, 1), (1, 1), 1, 20, 40, 1),    # output_padding-like extra row
    ((9, 9), (2, 2), (2, 2), (0, 0), (1, 1), 4, 64, 32, 0),
    ((6, 5), (3, 2), (1, 1), (0, 0), (1, 1), 19, 19, 38, 0),   # depthwise-like, 2 per group
    ((40,), (5,), (1,), (2,), (1,), 1, 33, 17, 0),              # blocks of many pixels
]


@pytest.mark.parametrize("shape", SHAPES, ids=[str(i) for i in range(len(SHAPES))])
@pytest.mark.parametrize("prepack", [True, False], ids=["packed", "runtime_w"])
def test_against_numpy(variant, shape, prepack):
    sp, k, s, p, d, g, ic, oc, extra = shape
    x = RNG.standard_normal((2, ic) + sp).astype(np.float32)
    w = RNG.standard_normal((ic, oc // g) + k).astype(np.float32)
    b = RNG.standard_normal(oc).astype(np.float32)
    out = natural(sp, k, s, p, d, extra)
    want = deconv_oracle(x, w, b, g, out, s, p, d)
    one = variant.deconv_fp32(x, w, b, g, out, s, p, d, 1, prepack)
    two = variant.deconv_fp32(x, w, b, g, out, s, p, d, 2, prepack)
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4)
    assert one.tobytes() == two.tobytes()


def test_negative_pads_and_no_bias(variant):
    """A larger output than the natural one (output_shape) shifts the image: pads < 0."""
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    out, s, p, d = (11, 12), (2, 2), (-1, -2), (1, 1)
    want = deconv_oracle(x, w, None, 1, out, s, p, d)
    got = variant.deconv_fp32(x, w, None, 1, out, s, p, d, 2, True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def to_n16cx(a):
    n, c = a.shape[:2]
    cb = -(-c // 16)
    padded = np.zeros((n, cb * 16) + a.shape[2:], np.float32)
    padded[:, :c] = a
    return np.ascontiguousarray(np.moveaxis(padded.reshape((n, cb, 16) + a.shape[2:]), 2, -1))


@pytest.mark.parametrize("x_blocked,y_blocked", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("oc,group", [(21, 1), (32, 2), (16, 1)])
def test_n16cx(variant, x_blocked, y_blocked, oc, group):
    ic, sp, k, s, p, d = 18, (6, 7), (3, 3), (2, 2), (1, 1), (1, 1)
    x = RNG.standard_normal((2, ic) + sp).astype(np.float32)
    w = RNG.standard_normal((ic, oc // group) + k).astype(np.float32)
    b = RNG.standard_normal(oc).astype(np.float32)
    out = natural(sp, k, s, p, d)
    want = deconv_oracle(x, w, b, group, out, s, p, d)
    xin = to_n16cx(x) if x_blocked else x
    shape = (2, oc) + out
    y = (np.full(to_n16cx(np.zeros(shape, np.float32)).shape, np.nan, np.float32)
         if y_blocked else np.empty(shape, np.float32))
    steps = variant.make_deconv_step(
        xin.ctypes.data, y.ctypes.data, 2, ic, oc, group, sp, out, k, s, p, d, x_blocked,
        y_blocked, 2, packed_w=variant.deconv_pack_weight(w, group), bias=b, keep=(xin, y))
    run_steps(steps, 2)
    if y_blocked:
        assert np.isfinite(y).all(), "padding lanes must be written (finite)"
        assert not y[:, -1, ..., oc % 16:].any() if oc % 16 else True
        y = np.moveaxis(y, -1, 2).reshape((2, -1) + out)[:, :oc]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_bad_arguments_raise(variant):
    with pytest.raises(ValueError, match="packed weight"):
        variant.make_deconv_step(1, 1, 1, 4, 4, 1, (3, 3), (5, 5), (3, 3), (1, 1), (0, 0),
                                 (1, 1), False, False, 1, packed_w=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="not both"):
        variant.make_deconv_step(1, 1, 1, 4, 4, 1, (3, 3), (5, 5), (3, 3), (1, 1), (0, 0),
                                 (1, 1), False, False, 1)
    with pytest.raises(ValueError, match="channels"):
        variant.make_deconv_step(1, 1, 1, 4, 3, 2, (3, 3), (5, 5), (3, 3), (1, 1), (0, 0),
                                 (1, 1), False, False, 1, w=1)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("deconv_fp32")
