"""Reshape in place: Reshape, Flatten, Squeeze, Unsqueeze and Identity place their output on
their input's memory and run no step; the shared buffer lives as long as either value is
read.  Profiling shows which nodes ran a step."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy

RNG = np.random.default_rng(23)


def model_of(nodes, outputs, inits=(), shape=("N", 4, 5), opset=13):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def shape_init(name, dims):
    return numpy_helper.from_array(np.array(dims, np.int64), name)


def run(model, batch=1, **load):
    """Outputs of two runs (the second reuses the plan) checked against the reference;
    returns the op types of the nodes that ran a step."""
    rt = pplpy.load(model.SerializeToString(), **load)
    ops = {node.name: node.op_type for node in model.graph.node}
    rt.profiler.enabled = True
    for _ in range(2):
        x = RNG.standard_normal((batch, 4, 5)).astype(np.float32)
        got = rt.run({"x": x})
        want = ReferenceEvaluator(model).run(None, {"x": x})
        for name, w in zip(rt.output_names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    return {ops.get(name, name) for name, _, _ in rt.profiler.per_node()}


def named(nodes):
    for i, node in enumerate(nodes):
        node.name = f"{node.op_type.lower()}{i}"
    return nodes


@pytest.mark.parametrize("fusion", [True, False])
def test_a_chain_of_reshapes_runs_no_step(fusion):
    nodes = named([
        helper.make_node("Neg", ["x"], ["a"]),
        helper.make_node("Reshape", ["a", "s20"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "ax0"], ["u"]),
        helper.make_node("Flatten", ["u"], ["f"], axis=2),
        helper.make_node("Squeeze", ["f", "ax0"], ["q"]),
        helper.make_node("Identity", ["q"], ["i"]),
        helper.make_node("Sin", ["i"], ["y"])])
    model = model_of(nodes, ["y"], [shape_init("s20", [0, 20]), shape_init("ax0", [0])])
    ran = run(model, fusion=fusion)
    assert ran.isdisjoint({"Reshape", "Unsqueeze", "Flatten", "Squeeze", "Identity"}), ran
    assert {"Neg", "Sin"} <= ran or fusion


def test_a_reshape_read_after_its_input_keeps_its_value():
    """r is read last; a is not read after the Reshape.  Values written in between (as big
    as a) would take a's memory if its buffer were freed with a's own last read."""
    nodes = named([
        helper.make_node("Neg", ["x"], ["a"]),
        helper.make_node("Reshape", ["a", "s20"], ["r"]),
        helper.make_node("Exp", ["x"], ["b"]),
        helper.make_node("Abs", ["b"], ["c"]),
        helper.make_node("Cos", ["c"], ["d"]),
        helper.make_node("Reshape", ["d", "s20"], ["e"]),
        helper.make_node("Sub", ["e", "r"], ["y"])])
    model = model_of(nodes, ["y"], [shape_init("s20", [0, 20])])
    for fusion in (True, False):
        assert "Reshape" not in run(model, batch=3, fusion=fusion)


def test_feeds_and_outputs_share_bytes_safely():
    """A Reshape of a feed, and a Reshape that is a graph output next to its input."""
    nodes = named([
        helper.make_node("Reshape", ["x", "s20"], ["fx"]),
        helper.make_node("Neg", ["fx"], ["a"]),
        helper.make_node("Flatten", ["a"], ["y1"], axis=1),
        helper.make_node("Exp", ["x"], ["b"]),
        helper.make_node("Reshape", ["b", "s20"], ["y2"])])
    model = model_of(nodes, ["a", "y1", "y2", "fx"], [shape_init("s20", [0, 20])])
    assert run(model, batch=2).isdisjoint({"Reshape", "Flatten"})


def test_a_reshape_inside_an_inplace_concat():
    """The Reshape's output is a part of an in-place Concat: the input then lies in it, its
    producer writing into the Concat's buffer; a second Reshape of that input read at the
    end keeps the Concat's buffer alive."""
    nodes = named([
        helper.make_node("Neg", ["x"], ["a"]),
        helper.make_node("Reshape", ["a", "s145"], ["r"]),
        helper.make_node("Abs", ["x"], ["b"]),
        helper.make_node("Concat", ["r", "b"], ["cat"], axis=1),
        helper.make_node("Relu", ["cat"], ["y"]),
        helper.make_node("Flatten", ["a"], ["late"], axis=1),
        helper.make_node("Exp", ["x"], ["e1"]),
        helper.make_node("Sin", ["e1"], ["e2"]),
        helper.make_node("Cos", ["e2"], ["e3"]),
        helper.make_node("Flatten", ["e3"], ["e4"], axis=1),
        helper.make_node("Add", ["e4", "late"], ["z"])])
    model = model_of(nodes, ["y", "z"], [shape_init("s145", [1, 4, 5])])
    ran = run(model, batch=1, fusion=False)
    assert ran.isdisjoint({"Reshape", "Flatten", "Concat"}), ran


def test_a_reshape_of_a_constant_stays_a_value():
    """A constant is not in the arena: the Reshape is folded at build time or copies."""
    w = numpy_helper.from_array(RNG.standard_normal((20,)).astype(np.float32), "w")
    nodes = named([
        helper.make_node("Reshape", ["w", "s45"], ["wr"]),
        helper.make_node("Add", ["x", "wr"], ["y"])])
    model = model_of(nodes, ["y"], [w, shape_init("s45", [4, 5])])
    run(model, batch=2)
