"""A MobileNetV3-style and a ShuffleNetV2-style block (see graph_builders.py) against
``onnx.reference.ReferenceEvaluator``, and the data formats pplpy runs them in.

Both graphs open with a stem Conv, so every op after it reads a convolution's output, as it
does inside a real network: only the graph input and output should need a reorder.
"""

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import pplpy
from models import graph_builders as gb
from pplpy.common.data_format import DataFormat


def assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def run_and_compare(model, shape, isa):
    rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=2)
    feeds = {"input": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    assert_close(rt.run(feeds)["output"], want)
    return rt


def inner_reorders(rt):
    """Reorder nodes other than those reading a graph input or writing a graph output."""
    ends = set(rt.input_names) | set(rt.output_names)
    return [n.name for n in rt.graph.nodes if n.op_type == "Reorder"
            and n.inputs[0] not in ends and not ends.intersection(n.outputs)]


MOBILENET_CONFIGS = [
    (24, 72, 24, 14, 1),   # MobileNetV3-Large stage 3: channels not a multiple of 16
    (40, 120, 32, 9, 2),
]


@pytest.mark.parametrize("channels, expand, squeeze, size, batch", MOBILENET_CONFIGS)
def test_mobilenetv3_block(channels, expand, squeeze, size, batch, isa):
    model = gb.mobilenetv3_block(channels=channels, expand=expand, squeeze=squeeze, size=size,
                                 batch=batch)
    rt = run_and_compare(model, (batch, channels, size, size), isa)
    for node in rt.graph.nodes:
        if node.op_type in ("Conv", "HardSwish", "GlobalAveragePool", "HardSigmoid", "Add"):
            assert rt.formats[node.outputs[0]] is DataFormat.N16CX, node.name


@pytest.mark.parametrize("channels, expand, squeeze, size, batch", MOBILENET_CONFIGS)
def test_mobilenetv3_block_no_reorder_between_convs(channels, expand, squeeze, size, batch):
    model = gb.mobilenetv3_block(channels=channels, expand=expand, squeeze=squeeze, size=size,
                                 batch=batch)
    rt = run_and_compare(model, (batch, channels, size, size), None)
    assert inner_reorders(rt) == []
    (mul,) = [n for n in rt.graph.nodes if n.op_type == "Mul"]
    assert rt.formats[mul.outputs[0]] is DataFormat.N16CX


@pytest.mark.parametrize("split", ["split", "slice"])
@pytest.mark.parametrize("channels", [48, 64, 116])
def test_shufflenetv2_block(split, channels, isa):
    """Runs and matches, in N16CX from the first convolution to the last: the channel split
    (Split or two Slices, at 24, 32 or 58 channels: inside a block or not), the Concat and
    the channel shuffle (recognised as one pplpy::ChannelShuffle) stay blocked, so the only
    reorders are at the graph's input and output."""
    model = gb.shufflenetv2_block(split=split, channels=channels)
    rt = run_and_compare(model, (1, channels, 14, 14), isa)
    ops = [n.op_type for n in rt.graph.nodes]
    assert ops.count("ChannelShuffle") == 2 and "Transpose" not in ops
    assert inner_reorders(rt) == []
    assert all(rt.formats[o] is DataFormat.N16CX for n in rt.graph.nodes
               if n.op_type in ("Conv", "Split", "Slice", "Concat", "ChannelShuffle")
               for o in n.outputs)


def test_shufflenetv2_split_on_block_boundary_stays_blocked():
    """A channel Split at a multiple of 16 after a convolution runs in N16CX, and so does the
    Concat of the two halves."""
    rt = run_and_compare(gb.shufflenetv2_block(split="split", channels=64), (1, 64, 14, 14),
                         None)
    first_split = next(n for n in rt.graph.nodes if n.op_type == "Split")
    first_concat = next(n for n in rt.graph.nodes if n.op_type == "Concat")
    assert all(rt.formats[o] is DataFormat.N16CX for o in first_split.outputs)
    assert rt.formats[first_concat.outputs[0]] is DataFormat.N16CX
