"""conv_fp32 impls (direct N16CX convolution on brgemm) against a numpy reference, every ISA."""

import pathlib
import re

import numpy as np
import pytest
from impl_variants import post_op_reference, variant_fixture

from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.runtime.step import run_steps

IMPLS = pathlib.Path(__file__).parents[4] / "pplpy/engines/x86/impls"


conv = variant_fixture("conv_fp32")


def to_n16cx(x):
    n, c, h, w = x.shape
    cb = -(-c // 16)
    padded = np.zeros((n, cb * 16, h, w), np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, 16, h, w).transpose(0, 1, 3, 4, 2))


def from_n16cx(y, c):
    n, cb, h, w, _ = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, w)[:, :c]


def conv_ref(x, w, b, group, strides, pads, dils, out_hw):
    """y[n, o, i, j] = b[o] + sum_{c, p, q} x_pad[n, g*icg + c, i*sh + p*dh, j*sw + q*dw] w[o, c, p, q]."""
    n, ic, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    (sh, sw), (pt, pl), (dh, dw), (oh, ow) = strides, pads, dils, out_hw
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    xp = np.zeros((n, ic, pt + max(h, need_h) + 1, pl + max(wd, need_w) + 1), np.float64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ocg = oc // group
    y = np.zeros((n, oc, oh, ow), np.float64)
    for g in range(group):
        xg = xp[:, g * icg:(g + 1) * icg]
        wg = w[g * ocg:(g + 1) * ocg].astype(np.float64)
        for p in range(kh):
            for q in range(kw):
                patch = xg[:, :, p * dh:p * dh + (oh - 1) * sh + 1:sh,
                           q * dw:q * dw + (ow - 1) * sw + 1:sw]
                y[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", patch, wg[:, :, p, q])
    if b is not None:
        y += b[None, :, None, None]
    return y


def run_case(conv, rng, n, ic, oc, group, h, w, kh, kw, strides, pads, dils, pads_end=None,
             bias=True, post_op=PostOp.NONE, p0=0.0, p1=0.0, threads=1):
    pads_end = pads if pads_end is None else pads_end
    sh, sw = strides
    dh, dw = dils
    oh = (h + pads[0] + pads_end[0] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (w + pads[1] + pads_end[1] - ((kw - 1) * dw + 1)) // sw + 1
    assert oh >= 1 and ow >= 1
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic // group, kh, kw), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32) if bias else None
    xn = to_n16cx(x)
    if ic % 16:
        xn[:, -1, :, :, ic % 16:] = 7.0  # padding lanes hold finite garbage: must not leak
    packed = conv.conv_pack_weight(wt, group)
    y = np.full((n, -(-oc // 16), oh, ow, 16), np.nan, np.float32)
    conv.conv2d_n16cx_fp32(xn, packed, b, y, ic, oc, group, kh, kw, sh, sw, pads[0], pads[1],
                           dh, dw, int(post_op), p0, p1, threads)
    ref = post_op_reference(conv_ref(x, wt, b, group, strides, pads, dils, (oh, ow)), post_op, p0, p1)
    got = from_n16cx(y, oc)
    scale = np.sqrt((ic // group) * kh * kw) + 1
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale)
    assert np.isfinite(y).all(), "padding lanes of y must be finite"


# (n, ic, oc, group, h, w, kh, kw, strides, pads, dils, pads_end)
CASES = [
    (1, 16, 16, 1, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), None),
    (2, 3, 5, 1, 9, 7, 3, 3, (1, 1), (1, 1), (1, 1), None),
    (1, 20, 37, 1, 11, 13, 3, 3, (2, 2), (1, 1), (1, 1), None),
    (1, 32, 24, 1, 10, 10, 1, 1, (1, 1), (0, 0), (1, 1), None),       # pointwise, flattened
    (2, 17, 33, 1, 9, 9, 1, 1, (2, 2), (0, 0), (1, 1), None),         # strided 1x1
    (1, 8, 16, 1, 12, 15, 5, 5, (1, 2), (2, 0), (2, 1), (1, 3)),      # dilation, asymmetric pads
    (1, 4, 7, 1, 6, 6, 7, 7, (1, 1), (3, 3), (1, 1), None),
    (1, 3, 8, 1, 15, 15, 11, 11, (4, 4), (2, 2), (1, 1), None),       # AlexNet-like
    (1, 6, 6, 1, 4, 5, 3, 3, (1, 1), (4, 5), (1, 1), (3, 2)),         # pads larger than kernel
    (1, 32, 64, 2, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), None),         # groups of 16 channels
    (1, 12, 18, 3, 7, 9, 3, 3, (1, 1), (1, 0), (1, 1), (0, 2)),       # odd groups
    (1, 48, 48, 48, 9, 11, 3, 3, (1, 1), (1, 1), (1, 1), None),       # depthwise
    (2, 20, 20, 20, 10, 10, 5, 5, (2, 2), (2, 1), (1, 2), (0, 3)),    # depthwise, tails
    (1, 8, 24, 8, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), None),          # channel multiplier 3
    (1, 1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1), None),
    (1, 64, 40, 1, 3, 30, 3, 3, (1, 1), (0, 1), (1, 1), None),        # long rows: many tiles
    (1, 5, 9, 1, 2, 3, 5, 5, (1, 1), (2, 2), (1, 1), None),           # kernel wider than input
    (1, 16, 16, 16, 2, 3, 5, 5, (1, 1), (2, 2), (1, 1), None),        # same, depthwise
    (2, 40, 40, 1, 1, 200, 1, 1, (1, 1), (0, 0), (1, 1), None),       # pointwise, long row
    (1, 8, 20, 1, 17, 17, 3, 3, (1, 1), (1, 1), (1, 1), None),        # row remainders as columns
    (1, 32, 16, 1, 14, 14, 1, 1, (2, 2), (0, 0), (1, 1), None),       # 7 x 7 strided pointwise
    # Half-valid last panels (16 of avx512's 32 columns) in 28-row narrow tiles:
    (1, 32, 16, 1, 9, 9, 1, 1, (1, 1), (0, 0), (1, 1), None),         # 81 pixels: 2 + a rest
    (2, 24, 48, 1, 5, 40, 3, 3, (1, 1), (1, 1), (1, 1), None),        # rows of 40, 2nd panel
]


@pytest.mark.parametrize("index", range(len(CASES)), ids=str)
def test_conv_matches_reference(conv, index):
    case = CASES[index]
    rng = np.random.default_rng(index)  # fixed: hash(case) varies between processes (None)
    n, ic, oc, group, h, w, kh, kw, strides, pads, dils, pads_end = case
    run_case(conv, rng, n, ic, oc, group, h, w, kh, kw, strides, pads, dils, pads_end)


@pytest.mark.parametrize("post_op,p0,p1", [(PostOp.RELU, 0, 0), (PostOp.LEAKY_RELU, 0.1, 0),
                                           (PostOp.CLIP, -0.5, 1.5), (PostOp.SIGMOID, 0, 0)])
@pytest.mark.parametrize("group", [1, 24])
def test_conv_post_ops(conv, post_op, p0, p1, group):
    rng = np.random.default_rng(int(post_op) * 7 + group)
    run_case(conv, rng, 1, 24, 24, group, 7, 9, 3, 3, (1, 1), (1, 1), (1, 1),
             post_op=post_op, p0=p0, p1=p1)


@pytest.mark.parametrize("post_op,p0,p1", [(PostOp.NONE, 0, 0), (PostOp.RELU, 0, 0),
                                           (PostOp.CLIP, -0.5, 1.5), (PostOp.SIGMOID, 0, 0)])
@pytest.mark.parametrize("bias", [True, False])
def test_pointwise_narrow_tiles(conv, post_op, p0, p1, bias):
    """A 1x1 conv to 16 channels over 100 flattened pixels: on avx512 its one panel is half
    valid and goes in 28-row narrow tiles; every epilogue (cheap activations in registers,
    sigmoid over the stored tile), with and without bias, 1 and 2 threads."""
    for threads in (1, 2):
        rng = np.random.default_rng(int(post_op) * 3 + bias + threads)
        run_case(conv, rng, 1, 40, 16, 1, 10, 10, 1, 1, (1, 1), (0, 0), (1, 1), bias=bias,
                 post_op=post_op, p0=p0, p1=p1, threads=threads)


@pytest.mark.parametrize("group", [1, 2, 32])
def test_conv_threads_and_no_bias(conv, group):
    rng = np.random.default_rng(group)
    run_case(conv, rng, 2, 32, 32, group, 14, 14, 3, 3, (1, 1), (1, 1), (1, 1), bias=False,
             threads=2)


def test_conv_random_shapes(conv):
    rng = np.random.default_rng(1234)
    for _ in range(12):
        kh, kw = rng.integers(1, 6, size=2)
        dh, dw = rng.integers(1, 3, size=2)
        sh, sw = rng.integers(1, 4, size=2)
        pads = tuple(rng.integers(0, 4, size=2))
        pads_end = tuple(rng.integers(0, 4, size=2))
        group = int(rng.choice([1, 1, 2, 3]))
        icg, ocg = rng.integers(1, 12, size=2)
        h = int(rng.integers((kh - 1) * dh + 1, 16))
        w = int(rng.integers((kw - 1) * dw + 1, 20))
        run_case(conv, rng, int(rng.integers(1, 3)), int(icg * group), int(ocg * group), group,
                 h, w, int(kh), int(kw), (int(sh), int(sw)), pads, (int(dh), int(dw)),
                 pads_end)


def test_variants_export_same_names():
    names = {}
    for isa in ISA_NAMES:
        text = (IMPLS / f"_conv_fp32_{isa}.pyx").read_text()
        body = re.findall(r'include "([^"]+)"', text)
        assert body == ["_conv_fp32.pxi"], f"_conv_fp32_{isa}.pyx must only include the body"
        names[isa] = re.findall(r"^def (\w+)", (IMPLS / body[0]).read_text(), re.M) + \
            re.findall(r"^def (\w+)", text, re.M)
    assert len({tuple(v) for v in names.values()}) == 1, names
    assert {"conv_pack_weight", "make_conv2d_n16cx_step", "conv2d_n16cx_fp32"} <= set(names["fma"])
    for isa in supported_isas():
        mod = load_variant("conv_fp32", isa)
        assert all(hasattr(mod, name) for name in names[isa])


@pytest.mark.parametrize("case", [
    (1, 6, 4, 2, 7, 8, 3, 2, (2, 1), (1, 0), (1, 2), (2, 1)),
    (2, 5, 5, 5, 6, 6, 3, 3, (1, 2), (0, 2), (2, 1), (1, 0)),
])
def test_reference_agrees_with_onnx(case):
    """The numpy reference above matches onnx's own reference evaluator."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    n, ic, oc, group, h, w, kh, kw, strides, pads, dils, pads_end = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic // group, kh, kw), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, strides=list(strides),
                            pads=[*pads, *pads_end], dilations=list(dils))
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "xwb"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    (expected,) = ReferenceEvaluator(helper.make_model(graph)).run(None, {"x": x, "w": wt, "b": b})
    got = conv_ref(x, wt, b, group, strides, pads, dils, expected.shape[2:])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# ---- the step API: run-time operands packed inside the step, and team sizes 1, 2, 3 ----


def addr(array):
    return array.__array_interface__["data"][0]


def run_threads(make, threads=(1, 2, 3)):
    """Outputs of the step that make(num_threads) -> (step, out) gives, per team size."""
    results = []
    for t in threads:
        step, out = make(t)
        run_steps([step], t)
        results.append(out.copy())
    return results


# (n, ic, oc, group, h, w, kh, kw, strides, pads, dils)
CONV_CASES = [
    (2, 20, 37, 1, 11, 13, 3, 3, (2, 2), (1, 1), (1, 1)),      # tails of both channel counts
    (1, 64, 64, 1, 14, 14, 3, 3, (1, 1), (1, 1), (1, 1)),      # ResNet-like
    (1, 32, 24, 1, 10, 10, 1, 1, (1, 1), (0, 0), (1, 1)),      # pointwise, flattened
    (1, 12, 18, 3, 7, 9, 3, 3, (1, 1), (1, 0), (2, 1)),        # odd groups, dilation
    (2, 40, 40, 40, 9, 11, 3, 3, (2, 1), (1, 1), (1, 1)),      # depthwise, tail block
    (1, 8, 24, 8, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1)),         # channel multiplier 3
    (1, 3, 8, 1, 15, 15, 5, 5, (2, 2), (2, 2), (1, 1)),        # RGB first layer
    # Small layers that larger teams cut into more items (_ITEMS_PER_THREAD):
    (1, 24, 40, 1, 14, 14, 1, 1, (1, 1), (0, 0), (1, 1)),      # pointwise, a narrow panel
    (1, 32, 16, 1, 14, 14, 1, 1, (1, 1), (0, 0), (1, 1)),      # pointwise, one narrow panel
    (1, 16, 32, 1, 9, 17, 3, 3, (1, 1), (1, 1), (1, 1)),       # 15 interior columns: the
    #   last goes down its column, one row per item at 16 threads
    (1, 32, 64, 1, 28, 28, 3, 3, (2, 2), (1, 1), (1, 1)),      # stride 2 into 14 x 14
    (1, 32, 32, 32, 14, 14, 3, 3, (2, 2), (1, 1), (1, 1)),     # depthwise slab, rows cut
    # sse: one thread's items need more input than the broadcast copy may take (_BcastRows,
    # _BCAST_FLOATS), 16 threads' fewer rows fit: with and without the copy, same bits
    (1, 512, 16, 1, 16, 16, 3, 3, (1, 1), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("ic,oc,group,hw,k,stride", [(32, 40, 1, 28, 1, 1),
                                                     (32, 64, 1, 28, 3, 2),
                                                     (32, 32, 32, 14, 3, 2)])
def test_small_layers_get_more_items_for_larger_teams(conv, ic, oc, group, hw, k, stride):
    """A pointwise conv (pixel segments), a stride-2 3x3 into 14 x 14 (row blocks) with few
    output panels and a depthwise conv on two channel blocks (row blocks of its slab): a
    team of 16 gets more items than a team of one, and at least 14 (7 rows x 2 blocks for
    the depthwise one) unless one already had two per thread of 16 (the bits are
    test_conv_step_threads_bitwise's business)."""
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    x = np.zeros((1, -(-ic // 16), hw, hw, 16), np.float32)
    y = np.zeros((1, -(-oc // 16), oh, oh, 16), np.float32)
    packed = conv.conv_pack_weight(np.ones((oc, ic // group, k, k), np.float32), group)

    def items(t):
        return conv.make_conv2d_n16cx_step(addr(x), addr(y), 1, ic, oc, group, hw, hw, oh, oh,
                                           k, k, stride, stride, k // 2, k // 2, 1, 1, 0, 0.0,
                                           0.0, t, packed_w=packed, keep=(x, y)).work_items

    assert items(1) >= 32 or (items(16) >= 14 and items(16) > items(1))


def test_convs_that_stream_their_weight_are_parallel(conv):
    """A squeeze-excite 1x1 conv on a 1x1 map (1152 -> 48: 0.1 MFLOP, a 221 KB weight) is a
    parallel step; a 16 -> 16 one is not."""
    def step(ic, oc):
        x = np.zeros((1, -(-ic // 16), 1, 1, 16), np.float32)
        y = np.zeros((1, -(-oc // 16), 1, 1, 16), np.float32)
        packed = conv.conv_pack_weight(np.ones((oc, ic, 1, 1), np.float32), 1)
        return conv.make_conv2d_n16cx_step(addr(x), addr(y), 1, ic, oc, 1, 1, 1, 1, 1, 1, 1, 1,
                                           1, 0, 0, 1, 1, 0, 0.0, 0.0, 2, packed_w=packed,
                                           keep=(x, y))

    assert step(1152, 48).parallel and not step(16, 16).parallel


@pytest.mark.parametrize("threads", [1, 2, 16])
def test_dense_work_items_match_the_step(conv, threads):
    """conv_dense_work_items (what choosing an algorithm reads) says what the step does."""
    for n, ic, oc, hw, k, s in [(1, 32, 40, 28, 1, 1), (2, 64, 128, 14, 3, 1),
                                (1, 32, 64, 28, 3, 2), (1, 16, 16, 112, 3, 1)]:
        pad = k // 2
        oh = (hw + 2 * pad - k) // s + 1
        x = np.zeros((n, -(-ic // 16), hw, hw, 16), np.float32)
        y = np.zeros((n, -(-oc // 16), oh, oh, 16), np.float32)
        packed = conv.conv_pack_weight(np.ones((oc, ic, k, k), np.float32), 1)
        step = conv.make_conv2d_n16cx_step(addr(x), addr(y), n, ic, oc, 1, hw, hw, oh, oh, k, k,
                                           s, s, pad, pad, 1, 1, 0, 0.0, 0.0, threads,
                                           packed_w=packed, keep=(x, y))
        assert conv.conv_dense_work_items(n, ic, oc, oh, oh, k, k, s, s, pad, pad,
                                          threads) == step.work_items


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("raw", [False, True], ids=["packed", "raw"])
def test_conv_step_threads_bitwise(conv, case, raw):
    """A packed or a run-time weight (and bias), teams of 1, 2, 3 and 16: same bits, right
    values."""
    n, ic, oc, group, h, w, kh, kw, (sh, sw), (pt, pl), (dh, dw) = case
    rng = np.random.default_rng(ic * oc + group)
    oh = (h + 2 * pt - ((kh - 1) * dh + 1)) // sh + 1
    ow = (w + 2 * pl - ((kw - 1) * dw + 1)) // sw + 1
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic // group, kh, kw), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32)
    xn = to_n16cx(x)
    extra = {"w": addr(wt), "b": addr(b)} if raw else {
        "packed_w": conv.conv_pack_weight(wt, group), "bias": b}

    def make(t):
        y = np.full((n, -(-oc // 16), oh, ow, 16), np.nan, np.float32)
        step = conv.make_conv2d_n16cx_step(addr(xn), addr(y), n, ic, oc, group, h, w, oh, ow,
                                           kh, kw, sh, sw, pt, pl, dh, dw,
                                           int(PostOp.LEAKY_RELU), 0.1, 0.0, t,
                                           keep=(xn, y, wt, b), **extra)
        return step, y

    results = run_threads(make, (1, 2, 3, 16))
    ref = post_op_reference(conv_ref(x, wt, b, group, (sh, sw), (pt, pl), (dh, dw), (oh, ow)),
                            PostOp.LEAKY_RELU, 0.1, 0.0)
    scale = np.sqrt((ic // group) * kh * kw) + 1
    np.testing.assert_allclose(from_n16cx(results[0], oc), ref, rtol=1e-4, atol=1e-4 * scale)
    assert np.isfinite(results[0]).all(), "padding lanes of y must be finite"
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_conv_step_reads_new_input_on_every_run(conv, threads):
    """A step run again after its input changed computes from the new values: the sse
    tier's broadcast copy of the input, kept from item to item, must not outlive a run."""
    n, ic, oc, h, w = 2, 32, 48, 9, 12
    rng = np.random.default_rng(5)
    wt = rng.standard_normal((oc, ic, 3, 3), dtype=np.float32)
    b = rng.standard_normal(oc, dtype=np.float32)
    xn = to_n16cx(np.zeros((n, ic, h, w), np.float32))
    y = np.zeros((n, oc // 16, h, w, 16), np.float32)
    step = conv.make_conv2d_n16cx_step(addr(xn), addr(y), n, ic, oc, 1, h, w, h, w, 3, 3, 1, 1,
                                       1, 1, 1, 1, 0, 0.0, 0.0, threads,
                                       packed_w=conv.conv_pack_weight(wt, 1), bias=b,
                                       keep=(xn, y))
    for _ in range(3):
        x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
        xn[...] = to_n16cx(x)
        run_steps([step], threads)
        ref = conv_ref(x, wt, b, 1, (1, 1), (1, 1), (1, 1), (h, w))
        np.testing.assert_allclose(from_n16cx(y, oc), ref, rtol=1e-4, atol=1e-3)


def test_conv_step_rejects_bad_arguments(conv):
    packed = conv.conv_pack_weight(np.ones((16, 16, 3, 3), np.float32), 1)
    with pytest.raises(ValueError, match="repack"):
        conv.make_conv2d_n16cx_step(1, 1, 1, 16, 32, 1, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0,
                                    0.0, 0.0, 1, packed_w=packed)
    with pytest.raises(ValueError, match="not both"):
        conv.make_conv2d_n16cx_step(1, 1, 1, 16, 16, 1, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0,
                                    0.0, 0.0, 1, packed_w=packed, w=1)
    with pytest.raises(ValueError, match="strides"):
        conv.make_conv2d_n16cx_step(1, 1, 1, 16, 16, 1, 4, 4, 4, 4, 3, 3, 0, 1, 1, 1, 1, 1, 0,
                                    0.0, 0.0, 1, packed_w=packed)
