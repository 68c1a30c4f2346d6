"""Concat through the public API against onnx's ReferenceEvaluator (NDARRAY, any type, and
N16CX channel concatenation after Conv), plus the N16CX kernel and format choice directly."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_builders import random_array

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86.engine import EngineOptions
from pplpy.engines.x86.ops.kernel import Slot, StepIO
from pplpy.engines.x86.ops.declare import find_op
from pplpy.ir import Node
from pplpy.params.onnx import ConcatParam
from pplpy.runtime.step import run_steps

RNG = np.random.default_rng(1)
N16CX, NDARRAY = DataFormat.N16CX, DataFormat.NDARRAY


def value_info(name, dtype, shape):
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape
    )


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(v, n) for n, v in initializers]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def load(tmp_path, model, isa):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(str(path), max_isa=isa)


def check(tmp_path, model, feeds, isa):
    rt = load(tmp_path, model, isa)
    got = rt.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for (name, actual), expected in zip(got.items(), want):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, name
        np.testing.assert_array_equal(actual, expected, err_msg=name)
    return rt


def concat_model(shapes, dtype, axis, constant_index=None, opset=13):
    names = [f"x{i}" for i in range(len(shapes))]
    inputs, initializers, feeds = [], [], {}
    for i, (name, shape) in enumerate(zip(names, shapes)):
        value = random_array(shape, dtype)
        if i == constant_index:
            initializers.append((name, value))
        else:
            inputs.append(value_info(name, dtype, shape))
            feeds[name] = value
    model = make_model(
        [helper.make_node("Concat", names, ["y"], name="concat", axis=axis)],
        inputs,
        [value_info("y", dtype, None)],
        initializers,
        opset=opset,
    )
    return model, feeds


# -- NDARRAY -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(2, 3), (2, 5)], 1),
        ([(2, 3), (2, 5)], -1),
        ([(1, 3, 4), (2, 3, 4), (3, 3, 4)], 0),
        ([(2, 3, 4), (2, 3, 1), (2, 3, 7)], -1),
        ([(2, 5, 3, 3), (2, 19, 3, 3), (2, 16, 3, 3)], 1),
        ([(2, 5, 3, 3), (2, 19, 3, 3)], -3),
        ([(4,), (0,), (2,)], 0),
        ([(2, 3, 4)], 1),
    ],
)
def test_concat_ndarray(tmp_path, isa, dtype, shapes, axis):
    model, feeds = concat_model(shapes, dtype, axis)
    rt = check(tmp_path, model, feeds, isa)
    assert rt.formats["y"] is NDARRAY


@pytest.mark.parametrize("opset", [4, 11, 13])
def test_concat_with_a_constant_input(tmp_path, isa, opset):
    model, feeds = concat_model([(2, 3), (4, 3), (1, 3)], np.int64, 0, constant_index=1,
                                opset=opset)
    check(tmp_path, model, feeds, isa)


def test_concat_dynamic_shapes(tmp_path, isa):
    """Shapes are inferred again when the fed shapes change."""
    model = make_model(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
        [value_info("a", np.int64, ("N", 2)), value_info("b", np.int64, ("M", 2))],
        [value_info("y", np.int64, None)],
    )
    rt = load(tmp_path, model, isa)
    for n, m in ((1, 1), (3, 2), (0, 4)):
        a, b = random_array((n, 2), np.int64), random_array((m, 2), np.int64)
        np.testing.assert_array_equal(rt.run({"a": a, "b": b})["y"], np.concatenate([a, b]))


def test_concat_mismatched_shapes(tmp_path, isa):
    model, _ = concat_model([(2, 3, 4), (2, 5, 5)], np.float32, 1)
    with pytest.raises(pplpy.ShapeError) as info:
        load(tmp_path, model, isa)
    message = str(info.value)
    assert 'node "concat"' in message and "[2, 3, 4]" in message and "[2, 5, 5]" in message


def test_concat_mismatched_ranks(tmp_path, isa):
    model, _ = concat_model([(2, 3), (2, 3, 1)], np.float32, 0)
    with pytest.raises(pplpy.ShapeError, match='node "concat"'):
        load(tmp_path, model, isa)


def test_concat_axis_out_of_range(tmp_path, isa):
    model, _ = concat_model([(2, 3), (2, 3)], np.float32, 2)
    with pytest.raises(pplpy.ShapeError, match='node "concat".*axis 2 is out of range'):
        load(tmp_path, model, isa)


def test_concat_mismatched_types(tmp_path, isa):
    model = make_model(
        [helper.make_node("Concat", ["a", "b"], ["y"], name="concat", axis=0)],
        [value_info("a", np.float32, (2,)), value_info("b", np.int64, (2,))],
        [value_info("y", np.float32, None)],
    )
    with pytest.raises(pplpy.ShapeError, match='input 1 "b" is int64'):
        load(tmp_path, model, isa)


# -- N16CX through the engine --------------------------------------------------------------


def one_hot_conv_weight(out_channels, in_channels, seed):
    """A 1x1 conv weight that copies input channel perm[c] to output channel c: exact in
    float arithmetic, so the whole model can be compared with the reference bit for bit."""
    perm = np.random.default_rng(seed).integers(0, in_channels, out_channels)
    w = np.zeros((out_channels, in_channels, 1, 1), np.float32)
    w[np.arange(out_channels), perm] = 1.0
    return w


@pytest.mark.parametrize("channels", [(5, 19, 16), (16, 32), (3, 1, 14, 2), (17,)])
def test_concat_n16cx_after_conv(tmp_path, isa, channels):
    """Conv produces N16CX; a channel Concat of Conv outputs stays in N16CX."""
    in_channels = 6
    nodes, initializers, branches = [], [], []
    for i, c in enumerate(channels):
        initializers.append((f"w{i}", one_hot_conv_weight(c, in_channels, i)))
        nodes.append(helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], kernel_shape=[1, 1]))
        branches.append(f"c{i}")
    nodes.append(helper.make_node("Concat", branches, ["y"], name="concat", axis=1))
    model = make_model(
        nodes, [value_info("x", np.float32, (2, in_channels, 3, 5))],
        [value_info("y", np.float32, None)], initializers,
    )
    x = random_array((2, in_channels, 3, 5), np.float32)
    rt = check(tmp_path, model, {"x": x}, isa)
    (concat,) = [n for n in rt.graph.nodes if n.op_type == "Concat"]
    formats = rt.formats
    assert [formats[name] for name in concat.inputs] == [N16CX] * len(channels)
    assert formats[concat.outputs[0]] is N16CX


def test_concat_n16cx_result_feeds_a_conv(tmp_path, isa):
    """A Conv reading the blocked Concat output sees zero padding lanes: exact result."""
    x = random_array((1, 4, 2, 3), np.float32)
    initializers = [
        ("w0", one_hot_conv_weight(7, 4, 0)),
        ("w1", one_hot_conv_weight(10, 4, 1)),
        ("w2", one_hot_conv_weight(5, 17, 2)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"]),
        helper.make_node("Conv", ["x", "w1"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        helper.make_node("Conv", ["ab", "w2"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", np.float32, x.shape)],
                       [value_info("y", np.float32, None)], initializers)
    rt = check(tmp_path, model, {"x": x}, isa)
    assert rt.formats["ab"] is N16CX


def test_concat_after_relu_formats_are_consistent(tmp_path, isa):
    """Relu keeps the format it receives; Concat is N16CX exactly when all inputs are."""
    shapes = [(2, 5, 3, 2), (2, 19, 3, 2)]
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"r{i}"]) for i in range(2)]
    nodes.append(helper.make_node("Concat", ["r0", "r1"], ["y"], name="concat", axis=1))
    model = make_model(nodes, [value_info(f"x{i}", np.float32, s) for i, s in enumerate(shapes)],
                       [value_info("y", np.float32, None)])
    feeds = {f"x{i}": random_array(s, np.float32) for i, s in enumerate(shapes)}
    rt = check(tmp_path, model, feeds, isa)
    (concat,) = [n for n in rt.graph.nodes if n.op_type == "Concat"]
    in_formats = [rt.formats[name] for name in concat.inputs]
    expected = N16CX if all(f is N16CX for f in in_formats) else NDARRAY
    assert rt.formats[concat.outputs[0]] is expected


# -- the N16CX kernel and the format choice, directly --------------------------------------


def to_n16cx(x):
    """(N, C, *S) -> (N, ceil(C/16), *S, 16) with random finite padding lanes."""
    n, c, *spatial = x.shape
    cb = -(-c // 16)
    padded = RNG.standard_normal((n, cb * 16, *spatial)).astype(np.float32)
    padded[:, :c] = x
    blocked = padded.reshape(n, cb, 16, *spatial)
    return np.ascontiguousarray(np.moveaxis(blocked, 2, -1))


def from_n16cx(y, channels):
    n, cb, *spatial, _ = y.shape
    return np.moveaxis(y, -1, 2).reshape(n, cb * 16, *spatial)[:, :channels]


def make_concat_op(num_inputs, axis, isa="sse"):
    node = Node(name="concat", op_type="Concat", domain="", opset=13,
                inputs=[f"x{i}" for i in range(num_inputs)], outputs=["y"],
                param=ConcatParam(axis=axis))
    return find_op("", "Concat", 13)(node, EngineOptions(isa=isa, num_threads=1))


@pytest.mark.parametrize(
    "channels",
    [(5, 19, 16), (16, 16), (1,) * 20, (3, 0, 14), (31, 2), (15, 1, 17, 33), (40,)],
)
@pytest.mark.parametrize("spatial", [(3, 2), (1,), (4,), (2, 1, 3)])
def test_n16cx_concat_kernel(isa, channels, spatial):
    batch = 2
    op = make_concat_op(len(channels), 1, isa)
    xs = [random_array((batch, c, *spatial), np.float32) for c in channels]
    in_shapes = [TensorShape(x.shape, data_format=N16CX) for x in xs]
    out_shape = TensorShape((batch, sum(channels), *spatial), data_format=N16CX)
    blocked = [to_n16cx(x) for x in xs]
    results = []
    for threads in (1, 2):
        y = np.full(out_shape.physical_dims, np.nan, np.float32)
        io = StepIO([Slot(s, b) for s, b in zip(in_shapes, blocked)], [Slot(out_shape, y)],
                    threads)
        run_steps([op.create_kernel().make_step(io)], threads)
        results.append(y)
    assert results[0].tobytes() == results[1].tobytes()
    np.testing.assert_array_equal(from_n16cx(y, sum(channels)), np.concatenate(xs, axis=1))
    padding = np.moveaxis(y, -1, 2).reshape(batch, -1, *spatial)[:, sum(channels):]
    assert (padding == 0).all()


@pytest.mark.parametrize(
    "in_formats, shapes, axis, expected",
    [
        ([N16CX, N16CX], [(1, 5, 3, 3), (1, 7, 3, 3)], 1, N16CX),
        ([N16CX, N16CX], [(1, 5, 3, 3), (1, 7, 3, 3)], -3, N16CX),
        ([N16CX, N16CX, N16CX], [(1, 5, 3), (1, 7, 3), (1, 1, 3)], 1, N16CX),
        ([N16CX, NDARRAY], [(1, 5, 3, 3), (1, 7, 3, 3)], 1, NDARRAY),
        ([N16CX, N16CX], [(2, 5, 3, 3), (3, 5, 3, 3)], 0, NDARRAY),
        ([N16CX, N16CX], [(1, 5, 3, 3), (1, 5, 3, 4)], -1, NDARRAY),
        ([N16CX, N16CX], [(1, 5), (1, 7)], 1, NDARRAY),
        ([NDARRAY, NDARRAY], [(1, 5, 3, 3), (1, 7, 3, 3)], 1, NDARRAY),
    ],
)
def test_select_format(in_formats, shapes, axis, expected):
    op = make_concat_op(len(shapes), axis)
    wanted, outs = op.select_format(in_formats, shapes)
    assert wanted == [expected] * len(shapes) and outs == [expected]
