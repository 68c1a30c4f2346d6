"""winograd_fp32 impls (F(4x4, 3x3) convolution on N16CX) against a numpy reference and the
direct conv, every ISA."""

from contextlib import nullcontext

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, post_op_reference, \
    variant_fixture

from pplpy.engines.x86.impls.post_ops import PostOp

wino = variant_fixture("winograd_fp32")


def to_n16cx(x):
    n, c, h, w = x.shape
    cb = -(-c // 16)
    padded = np.zeros((n, cb * 16, h, w), np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, 16, h, w).transpose(0, 1, 3, 4, 2))


def from_n16cx(y, c):
    n, cb, h, w, _ = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, w)[:, :c]


def conv3x3_ref(x, w, b, pads, out_hw):
    """y[n, o, i, j] = b[o] + sum_{c, p, q} x_pad[n, c, i + p, j + q] w[o, c, p, q], float64."""
    n, ic, h, wd = x.shape
    (pt, pl), (oh, ow) = pads, out_hw
    xp = np.zeros((n, ic, oh + 2, ow + 2), np.float64)
    src = x[:, :, max(0, -pt):, max(0, -pl):][:, :, :oh + 2 - pt, :ow + 2 - pl]
    xp[:, :, pt:pt + src.shape[2], pl:pl + src.shape[3]] = src
    y = np.zeros((n, w.shape[0], oh, ow), np.float64)
    for p in range(3):
        for q in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, p:p + oh, q:q + ow], w[:, :, p, q])
    return y if b is None else y + b[None, :, None, None]


def activation_ref(y, post_op, p0, p1):
    if post_op == PostOp.TANH:
        return np.tanh(y)
    if post_op == PostOp.HARD_SWISH:
        return y * np.clip(y / 6 + 0.5, 0, 1)
    return post_op_reference(y, post_op, p0, p1)


def run_wino(wino, x, wt, b, pads, pads_end, post_op=PostOp.NONE, p0=0.0, p1=0.0, threads=1,
             tiles_per_item=0):
    n, ic, h, w = x.shape
    oc = wt.shape[0]
    oh, ow = h + pads[0] + pads_end[0] - 2, w + pads[1] + pads_end[1] - 2
    xn = to_n16cx(x)
    if ic % 16:
        xn[:, -1, :, :, ic % 16:] = 7.0  # padding lanes hold finite garbage: must not leak
    y = np.full((n, -(-oc // 16), oh, ow, 16), np.nan, np.float32)
    wino.winograd_conv2d_n16cx_fp32(xn, wino.winograd_pack_weight(wt), b, y, ic, oc, pads[0],
                                    pads[1], int(post_op), p0, p1, threads, tiles_per_item)
    assert np.isfinite(y).all(), "padding lanes of y must be finite"
    return y, (oh, ow)


def check_case(wino, rng, n, ic, oc, h, w, pads, pads_end=None, bias=True, post_op=PostOp.NONE,
               p0=0.0, p1=0.0, threads=1, tiles_per_item=0):
    pads_end = pads if pads_end is None else pads_end
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic, 3, 3), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32) if bias else None
    y, out_hw = run_wino(wino, x, wt, b, pads, pads_end, post_op, p0, p1, threads,
                         tiles_per_item)
    raw = conv3x3_ref(x, wt, b, pads, out_hw)
    ref = activation_ref(raw, post_op, p0, p1)
    # F(4x4, 3x3) loses a few bits more than a direct sum, in proportion to the output's
    # magnitude before the post-op: at most 7e-6 x max|conv| over 12 seeds of every case on
    # sse and avx512.
    scale = np.abs(raw).max() + 1
    np.testing.assert_allclose(from_n16cx(y, oc), ref, rtol=1e-4, atol=2e-5 * scale)


# (n, ic, oc, h, w, pads, pads_end)
CASES = [
    (1, 16, 16, 8, 8, (1, 1), None),
    (1, 16, 32, 12, 16, (0, 0), None),       # no padding, whole tiles
    (2, 3, 5, 9, 7, (1, 1), None),           # channels below one block, odd sizes
    (1, 20, 37, 11, 13, (1, 1), None),       # channels not multiples of 16
    (1, 33, 17, 5, 6, (1, 0), (0, 1)),       # asymmetric pads
    (1, 48, 48, 3, 3, (1, 1), None),         # one partial tile
    (3, 17, 40, 7, 10, (1, 1), None),        # tiles of several images in one item
    (1, 64, 64, 23, 19, (1, 1), None),
    (1, 8, 8, 4, 5, (2, 3), (1, 2)),         # pads wider than the kernel
]


@pytest.mark.parametrize("index", range(len(CASES)), ids=str)
def test_winograd_matches_reference(wino, index):
    case = CASES[index]
    rng = np.random.default_rng(index)  # fixed: hash(case) varies between processes (None)
    n, ic, oc, h, w, pads, pads_end = case
    check_case(wino, rng, n, ic, oc, h, w, pads, pads_end)


@pytest.mark.parametrize("post_op,p0,p1", [(PostOp.RELU, 0, 0), (PostOp.LEAKY_RELU, 0.1, 0),
                                           (PostOp.CLIP, -0.5, 1.5), (PostOp.SIGMOID, 0, 0),
                                           (PostOp.TANH, 0, 0), (PostOp.HARD_SWISH, 0, 0)])
def test_winograd_post_ops(wino, post_op, p0, p1):
    rng = np.random.default_rng(int(post_op))
    check_case(wino, rng, 1, 24, 24, 7, 9, (1, 1), post_op=post_op, p0=p0, p1=p1)


@pytest.mark.parametrize("tiles_per_item", [0, 1, 5, 1000])
def test_winograd_threads_and_blocks(wino, tiles_per_item):
    """Two threads and any tiles per item give the same bits as one thread (a one-row
    register tile sums in the order of the others)."""
    rng = np.random.default_rng(tiles_per_item)
    x = rng.standard_normal((2, 32, 14, 13), dtype=np.float32)
    wt = rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
    one, _ = run_wino(wino, x, wt, None, (1, 1), (1, 1), threads=1)
    two, _ = run_wino(wino, x, wt, None, (1, 1), (1, 1), threads=2,
                      tiles_per_item=tiles_per_item)
    check_case(wino, rng, 2, 32, 32, 14, 13, (1, 1), bias=False, threads=2,
               tiles_per_item=tiles_per_item)
    np.testing.assert_array_equal(one, two)


def _panel_floats(wino):
    """PPL_NB of the variant: 64 output channels take 64 / PPL_NB panels."""
    npanels, _, _ = wino.winograd_layout(64, 16)
    return 64 // npanels


@pytest.mark.parametrize("threads", [1, 3, 16])
def test_winograd_panel_groups_give_the_same_bits(wino, threads):
    """Work items that split the output channels into panel groups (sharing their block's
    input transform, a step before, or each repeating it) compute every sum as one item over
    all panels does."""
    rng = np.random.default_rng(threads)
    x = rng.standard_normal((1, 24, 9, 11), dtype=np.float32)
    wt = rng.standard_normal((72, 24, 3, 3), dtype=np.float32)  # 5 blocks, the last partial
    b = rng.standard_normal(72, dtype=np.float32)
    per_cb = max(1, 16 // _panel_floats(wino))
    npanels, _, _ = wino.winograd_layout(72, 24)
    whole, out_hw = run_wino(wino, x, wt, b, (1, 1), (1, 1), PostOp.RELU, threads=1)
    raw = conv3x3_ref(x, wt, b, (1, 1), out_hw)
    np.testing.assert_allclose(from_n16cx(whole, 72), np.maximum(raw, 0), rtol=1e-4,
                               atol=2e-5 * (np.abs(raw).max() + 1))
    for group in sorted({per_cb, 2 * per_cb, 3 * per_cb, npanels}):
        for share in (None, False, True):
            y = np.full_like(whole, np.nan)
            wino.winograd_conv2d_n16cx_fp32(to_n16cx(x), wino.winograd_pack_weight(wt), b, y,
                                            24, 72, 1, 1, int(PostOp.RELU), 0.0, 0.0, threads,
                                            0, (), group, share_input=share)
            np.testing.assert_array_equal(y, whole)


def test_winograd_panel_groups_follow_the_team(wino):
    """Blocks that give every thread of a team two items (PPL_MIN_ITEMS_PER_THREAD, room for
    the claims to even out a slow thread) keep all panels in one group, as does one thread;
    fewer blocks split the panels (whole channel blocks) into enough groups for that."""
    nb = _panel_floats(wino)
    per_cb = max(1, 16 // nb)
    npanels, _, _ = wino.winograd_layout(256, 256)
    assert wino.winograd_panel_groups(32, npanels, 16) == npanels
    assert wino.winograd_panel_groups(7, npanels, 2) == npanels
    assert wino.winograd_panel_groups(1, npanels, 1) == npanels
    # One item per thread is not enough: two groups.
    assert -(-npanels // wino.winograd_panel_groups(16, npanels, 16)) == 2
    # ResNet-50's 14x14 layers at two threads: 2 blocks of 16 tiles -> 2 groups, 4 items.
    assert -(-npanels // wino.winograd_panel_groups(2, npanels, 2)) == 2
    # ... and at 16 threads: 16 groups (one per channel block), 32 items.
    per_group = wino.winograd_panel_groups(2, npanels, 16)
    assert per_group % per_cb == 0 and -(-npanels // per_group) == min(16, npanels // per_cb)
    # Never more groups than channel blocks.
    assert wino.winograd_panel_groups(1, npanels, 1000) == per_cb
    with pytest.raises(ValueError, match="group_panels") if per_cb > 1 else nullcontext():
        x = np.zeros((1, 1, 6, 6, 16), np.float32)
        y = np.zeros((1, 2, 6, 6, 16), np.float32)
        wino.winograd_conv2d_n16cx_fp32(x, wino.winograd_pack_weight(np.ones((32, 16, 3, 3),
                                                                              np.float32)),
                                        None, y, 16, 32, 1, 1, 0, 0.0, 0.0, 2, 0, (), 1)


@pytest.mark.parametrize("threads", [1, 2, 16])
def test_winograd_work_items_match_the_step(wino, threads):
    """winograd_work_items (what choosing an algorithm reads) says what the step does; with
    panel groups a step before it may transform each block's input once (its items: blocks)."""
    for n, ic, oc, hw in [(1, 128, 32, 14), (1, 64, 64, 56), (2, 256, 256, 14), (1, 24, 72, 7)]:
        x = np.zeros((n, -(-ic // 16), hw, hw, 16), np.float32)
        y = np.zeros((n, -(-oc // 16), hw, hw, 16), np.float32)
        packed = wino.winograd_pack_weight(np.ones((oc, ic, 3, 3), np.float32))
        steps = wino.make_winograd_conv_step(
            x.__array_interface__["data"][0], y.__array_interface__["data"][0], n, ic, oc, hw,
            hw, hw, hw, 1, 1, 0, 0.0, 0.0, threads, packed_w=packed, keep=(x, y))
        items = wino.winograd_work_items(n, hw, hw, ic, oc, threads)
        assert items == steps[-1].work_items
        tiles = n * (-(-hw // 4)) ** 2
        blocks = -(-tiles // wino.winograd_tiles_per_item(n, hw, hw, ic, oc, threads))
        if len(steps) == 2:  # panel groups sharing the input transform, done first
            assert items > blocks and steps[0].work_items == blocks
        else:
            assert len(steps) == 1


@pytest.mark.parametrize("hw, channels, shared", [(14, 256, True), (28, 128, False),
                                                  (56, 64, False)])
def test_winograd_groups_share_only_a_small_input_transform(wino, hw, channels, shared):
    """ResNet's 3x3 stages cut into panel groups for 16 threads: 256 channels at 14 x 14 (V of
    0.59-0.66 MB) share V between the groups; 128 at 28 x 28 and 64 at 56 x 56 (0.9 and 1.8 MB)
    have each group transform its block again, in its own scratch (benchmarks.md, session
    20: with a large V shared, a layer took up to 45% longer on the EPYC when its other core
    was busy)."""
    x = np.zeros((1, channels // 16, hw, hw, 16), np.float32)
    y = np.zeros_like(x)
    packed = wino.winograd_pack_weight(np.ones((channels, channels, 3, 3), np.float32))
    npanels = packed["npanels"]
    tiles = (-(-hw // 4)) ** 2
    blocks = -(-tiles // wino.winograd_tiles_per_item(1, hw, hw, channels, channels, 16))
    assert wino.winograd_panel_groups(blocks, npanels, 16) < npanels  # groups, every tier
    steps = wino.make_winograd_conv_step(
        x.__array_interface__["data"][0], y.__array_interface__["data"][0], 1, channels,
        channels, hw, hw, hw, hw, 1, 1, 0, 0.0, 0.0, 16, packed_w=packed, keep=(x, y))
    assert len(steps) == (2 if shared else 1)


def test_winograd_close_to_direct(wino):
    """Both algorithms give close results on a ResNet-like layer."""
    from pplpy.engines.x86.impls.dispatch import load_variant

    conv = load_variant("conv_fp32", wino.__name__.rsplit("_", 1)[1])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 64, 20, 20), dtype=np.float32)
    wt = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    y, (oh, ow) = run_wino(wino, x, wt, b, (1, 1), (1, 1), PostOp.RELU)
    direct = np.full_like(y, np.nan)
    conv.conv2d_n16cx_fp32(to_n16cx(x), conv.conv_pack_weight(wt, 1), b, direct, 64, 64, 1, 3,
                           3, 1, 1, 1, 1, 1, 1, int(PostOp.RELU), 0.0, 0.0, 1)
    assert np.abs(y - direct).max() <= 1e-4 * np.abs(direct).max()


def test_winograd_rejects_bad_arguments(wino):
    packed = wino.winograd_pack_weight(np.zeros((16, 8, 3, 3), np.float32))
    with pytest.raises(ValueError, match="winograd_pack_weight"):
        wino.winograd_pack_weight(np.zeros((16, 8, 5, 5), np.float32))
    x = np.zeros((1, 1, 6, 6, 16), np.float32)
    y = np.zeros((1, 1, 6, 6, 16), np.float32)
    with pytest.raises(ValueError, match="oc=16 ic=16"):
        wino.winograd_conv2d_n16cx_fp32(x, packed, None, y, 16, 16, 1, 1, 0, 0.0, 0.0, 1)
    with pytest.raises(ValueError, match="post_op"):
        wino.winograd_conv2d_n16cx_fp32(x, packed, None, y, 8, 16, 1, 1, 99, 0.0, 0.0, 1)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("winograd_fp32")
