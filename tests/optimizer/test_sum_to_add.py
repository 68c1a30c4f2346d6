"""The sum_to_add pass: Sum of two inputs (any broadcast) becomes Add, of one input its
input, of three or more stays; it is switchable like every pass and logged.  After it, the
engine's post-op fusion puts a residual Sum and the Relu after it into the Conv before them
(ShuffleNet's units), and an unfused build computes the same."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.engines.x86.impls.post_ops import PostOp, PostOpKind, eltwise
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

RNG = np.random.default_rng(3)
WITHOUT = [e for e in DEFAULT_PIPELINE if e.pass_id != "sum_to_add"]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes, inputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def load_and_check(m, feeds, **kwargs):
    """The runtime, after checking its output against onnx.reference on ``m``."""
    rt = pplpy.load(m.SerializeToString(), **kwargs)
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    return rt


def op_types(rt):
    return [n.op_type for n in rt.graph.nodes if n.op_type != "Reorder"]


def writer(rt, name):
    """The node writing value ``name``, through a Reorder to NDARRAY."""
    (node,) = [n for n in rt.graph.nodes if n.outputs[0] == name]
    return writer(rt, node.inputs[0]) if node.op_type == "Reorder" else node


def logged(rt):
    return next(line for line in rt.pass_log if line.startswith("sum_to_add:"))


@pytest.mark.parametrize("a, b", [((3, 4, 5), (3, 4, 5)), ((3, 1, 5), (4, 1)), ((1,), (2, 3))])
def test_two_inputs_become_add_with_any_broadcast(a, b):
    m = model([helper.make_node("Sum", ["a", "b"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])],
              [("a", a), ("b", b)])
    feeds = {"a": rand(*a), "b": rand(*b)}
    rt = load_and_check(m, feeds, passes=[e for e in DEFAULT_PIPELINE
                                          if e.pass_id != "fuse_eltwise_chains"])
    assert op_types(rt) == ["Add", "Tanh"]
    assert "Sum(a, b) -> Add 1" in logged(rt)
    # switched off, the Sum stays
    assert op_types(load_and_check(m, feeds, passes=WITHOUT)) == ["Sum", "Tanh"]


def test_one_input_is_removed_and_three_stay():
    m = model([helper.make_node("Sum", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
               helper.make_node("Sum", ["t", "x", "x"], ["y"])], [("x", (2, 7))])
    rt = load_and_check(m, {"x": rand(2, 7)}, passes=[
        e for e in DEFAULT_PIPELINE if e.pass_id != "fuse_eltwise_chains"])
    assert op_types(rt) == ["Tanh", "Sum"]
    assert "sum_to_add: 1 change(s)" in logged(rt) and "Sum(x) -> x 1" in logged(rt)


def test_one_input_graph_output_of_a_graph_input_is_left():
    """Sum(x) -> y with x a graph input: no node could write y instead; the Sum stays."""
    m = model([helper.make_node("Sum", ["x"], ["y"])], [("x", (2, 3))])
    rt = load_and_check(m, {"x": rand(2, 3)})
    assert op_types(rt) == ["Sum"] and "sum_to_add: 0 change(s)" in logged(rt)


def residual_unit(c=24, hw=9):
    """x -> Conv -> Sum(conv, r) -> Relu -> y, r another Conv of x (computed at run time)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["r"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["c"]),
             helper.make_node("Sum", ["c", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    inits = [("w1", rand(c, 8, 3, 3) * 0.3), ("w2", rand(c, 8, 1, 1))]
    return model(nodes, [("x", (2, 8, hw, hw))], inits), {"x": rand(2, 8, hw, hw)}


@pytest.mark.parametrize("isa", ISAS)
def test_conv_sum_relu_fuses_into_one_conv(isa):
    m, feeds = residual_unit()
    rt = load_and_check(m, feeds, max_isa=isa)
    assert op_types(rt) == ["Conv", "Conv"]
    fused = writer(rt, "y")
    assert fused.op_type == "Conv"
    post_ops = rt.result.ops[fused].post_ops
    assert [e.kind for e in post_ops] == [PostOpKind.SUM, PostOpKind.ELTWISE]
    assert post_ops[1] == eltwise(PostOp.RELU)


def test_unfused_build_keeps_the_add_and_the_relu():
    m, feeds = residual_unit()
    rt = load_and_check(m, feeds, fusion=False)
    assert sorted(op_types(rt)) == ["Add", "Conv", "Conv", "Relu"]
    fused = load_and_check(m, feeds)
    np.testing.assert_allclose(fused.run(feeds)["y"], rt.run(feeds)["y"], rtol=1e-5,
                               atol=1e-5)
