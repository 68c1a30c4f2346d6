"""The float N16CX channel-map family (chmap_fp32: per-pixel permutes) on every ISA tier:
ChannelShuffle against onnx.reference's Reshape-Transpose-Reshape, multi-input and strided
maps against numpy, padding lanes zero, 1 and 2 threads giving the same bits, and the same
bytes as _copy's lane-run path."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, to_n16cx, variant_fixture
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.onnx.movement_common import fragmented
from pplpy.engines.x86.ops.pplpy.channel_shuffle import shuffle_sources

RNG = np.random.default_rng(11)
variant = variant_fixture("chmap_fp32")


def run_map(m, xs, sources, batch):
    """y = the channel map of blocked xs, run on 1 and 2 threads into garbage; the bits of
    both runs (padding lanes included) must match."""
    channels = [x.shape[1] * 16 for x in xs]     # whole blocks: sources decide the rest
    out_blocks = -(-len(sources) // 16)
    shape = (batch, out_blocks, xs[0].shape[2], 16)
    results = []
    for threads in (1, 2):
        y = np.full(shape, np.nan, np.float32)
        m.channel_map_n16cx(xs, channels, sources, y, threads)
        results.append(y)
    assert results[0].tobytes() == results[1].tobytes()
    return results[0]


def shuffle_reference(x, groups):
    """onnx.reference's Reshape(N, g, C/g, S) -> Transpose -> Reshape(N, C, S)."""
    n, c, s = x.shape
    nodes = [helper.make_node("Reshape", ["x", "s4"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "s3"], ["y"])]
    inits = [helper.make_tensor("s4", TensorProto.INT64, [4], [n, groups, c // groups, s]),
             helper.make_tensor("s3", TensorProto.INT64, [3], [n, c, s])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("groups, channels", [
    (2, 32), (2, 116), (3, 24), (3, 240), (4, 112), (4, 136), (8, 64), (8, 200), (4, 12)])
@pytest.mark.parametrize("batch, pixels", [(1, 1), (2, 49), (2, 3000)])
def test_shuffle_matches_reference(variant, groups, channels, batch, pixels):
    """Channels not a multiple of 16 nor of 16 * groups included; 3000 pixels crosses the
    parallel threshold and several pixel tiles."""
    x = RNG.standard_normal((batch, channels, pixels)).astype(np.float32)
    sources = [(0, c) for c in shuffle_sources(channels, groups)]
    y = run_map(variant, [to_n16cx(x)], sources, batch)
    want = to_n16cx(shuffle_reference(x, groups))
    np.testing.assert_array_equal(y, want)     # padding lanes are 0, not the NaN garbage
    old = np.full_like(y, np.nan)
    _copy.channel_map_n16cx([to_n16cx(x)], [channels], sources, old)
    assert old.tobytes() == y.tobytes()


@pytest.mark.parametrize("pixels", [1, 17, 700])
def test_any_map_of_several_inputs(variant, pixels):
    """Lanes from many blocks of two inputs at once (up to 16 source blocks per output
    block: 8 permute ops), a strided and a reversed slice."""
    a = RNG.standard_normal((2, 300, pixels)).astype(np.float32)
    b = RNG.standard_normal((2, 20, pixels)).astype(np.float32)
    both = np.concatenate([a, b], axis=1)
    cases = [[(0, 16 * k + k % 16) for k in range(18)] + [(1, 19), (1, 0), (1, 7)],
             [(0, c) for c in range(3, 300, 7)],
             [(1, c) for c in range(19, -1, -1)] + [(0, c) for c in range(299, 0, -5)]]
    for sources in cases:
        y = run_map(variant, [to_n16cx(a), to_n16cx(b)], sources, 2)
        want = np.stack([both[:, c + (300 if i else 0)] for i, c in sources], axis=1)
        np.testing.assert_array_equal(y, to_n16cx(want))


def test_permute_ops_pair_source_blocks(variant):
    """A 4-group shuffle of 112 channels reads 4 source blocks per output block: 2 ops;
    the lanes each op writes are disjoint and cover the block (no padding)."""
    blocks = variant.n16cx_permute_ops([(0, c) for c in shuffle_sources(112, 4)])
    assert [len(ops) for ops in blocks] == [2] * 7
    for ops in blocks:
        masks = [op[5] for op in ops]
        assert sum(masks) == 0xFFFF and all(a & b == 0 for a in masks for b in masks
                                            if a is not b)


def test_bad_maps_are_rejected(variant):
    x = np.zeros((1, 1, 4, 16), np.float32)
    with pytest.raises(ValueError, match="source channel"):
        variant.channel_map_n16cx([x], [16], [(0, 16)], np.zeros_like(x))
    with pytest.raises(ValueError, match="float32"):
        variant.channel_map_n16cx([x.astype(np.float64)], [16], [(0, 0)], np.zeros_like(x))


def test_only_fragmented_maps_take_the_permute_path():
    assert fragmented([(0, c) for c in shuffle_sources(48, 3)])
    assert fragmented([(0, c) for c in range(1, 40, 2)])
    assert not fragmented([(0, c) for c in range(5, 37)])      # a slice off the grid
    assert not fragmented([(0, c) for c in range(32)])


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("chmap_fp32")
