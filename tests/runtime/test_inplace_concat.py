"""Concat in place: producers write straight into their part of the Concat's output when
that part is contiguous (batch 1, channel concat; N16CX parts of whole channel blocks), and
the Concat then has no step.  Profiling shows which nodes ran a step."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy

RNG = np.random.default_rng(17)


def branches_model(channels, nested=False, extra_reader=False, spatial=6):
    """x -> one 1x1 Conv per entry of ``channels`` -> Concat(axis 1) -> Relu -> y.  nested:
    the first two branches are concatenated first; extra_reader: branch 0 is also reduced
    into a second output (read after the Concat)."""
    nodes, inits, parts = [], [], []
    for i, c in enumerate(channels):
        w = RNG.standard_normal((c, 3, 1, 1)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", ["x", f"w{i}"], [f"b{i}"]))
        parts.append(f"b{i}")
    if nested:
        nodes.append(helper.make_node("Concat", parts[:2], ["inner"], axis=1))
        parts = ["inner"] + parts[2:]
    nodes.append(helper.make_node("Concat", parts, ["cat"], axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("ReduceSum", ["b0"], ["s"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, spatial, spatial])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(model, batch, **load):
    """Outputs checked against the reference; returns the names of the nodes that ran."""
    rt = pplpy.load(model.SerializeToString(), **load)
    x = RNG.standard_normal((batch, 3, 6, 6)).astype(np.float32)
    rt.profiler.enabled = True
    for _ in range(2):  # a second run reuses the plan and its in-place arena
        got = rt.run({"x": x})
        want = ReferenceEvaluator(model).run(None, {"x": x})
        for name, w in zip(rt.output_names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4, err_msg=name)
    return {name for name, _, _ in rt.profiler.per_node()}


@pytest.mark.parametrize("channels", [(16, 32, 8), (32, 16), (64, 48, 16, 16)])
def test_blocked_branches_are_written_in_place(isa, channels):
    ran = run(branches_model(channels), 1, max_isa=isa)
    assert not any("Concat" in name for name in ran), ran


def test_a_middle_part_of_partial_blocks_is_copied():
    ran = run(branches_model((16, 8, 16)), 1)
    assert any("Concat" in name for name in ran)


def test_batch_above_one_copies():
    ran = run(branches_model((16, 16)), 2)
    assert any("Concat" in name for name in ran)


def ndarray_model(output_part=False):
    """x (N, 4, 5) -> Neg, Abs -> Concat(axis 1) -> Relu: NDARRAY throughout."""
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Relu", ["cat"], ["y"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in (["y", "a"] if output_part else ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 4, 5])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run_ndarray(model, batch):
    rt = pplpy.load(model.SerializeToString())
    x = RNG.standard_normal((batch, 4, 5)).astype(np.float32)
    rt.profiler.enabled = True
    for _ in range(2):
        got = rt.run({"x": x})
        want = ReferenceEvaluator(model).run(None, {"x": x})
        for name, w in zip(rt.output_names, want):
            np.testing.assert_array_equal(got[name], w, err_msg=name)
    return {name for name, _, _ in rt.profiler.per_node()}


def test_ndarray_concat_in_place():
    assert not any("Concat" in name for name in run_ndarray(ndarray_model(), 1))
    assert any("Concat" in name for name in run_ndarray(ndarray_model(), 3))


def test_a_part_that_is_a_graph_output_is_copied():
    assert any("Concat" in name for name in run_ndarray(ndarray_model(output_part=True), 1))


def test_nested_concats_are_both_in_place():
    ran = run(branches_model((16, 16, 32), nested=True), 1)
    assert not any("Concat" in name for name in ran), ran


def test_a_part_read_after_the_concat_keeps_its_value():
    ran = run(branches_model((16, 32), extra_reader=True), 1)
    assert not any("Concat" in name for name in ran)


