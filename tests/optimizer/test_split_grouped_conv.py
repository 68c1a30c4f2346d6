"""split_grouped_conv: a grouped 3x3 conv with Winograd-sized groups becomes a Split, one
Conv per group (each on Winograd) and a Concat; the BN before the split is in the weights and
the Relu after the Concat in the per-group convs' epilogues.  Checked against the reference
and the fusion=False build on every ISA tier and at 1 and 2 threads; convs the rule must
leave alone stay one node; a saved optimised model reloads to the same outputs."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.engines.x86.impls.post_ops import PostOp, eltwise

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def grouped_block(ic=32, oc=64, groups=2, hw=(10, 9), kernel=3, stride=1, opset=17,
                  weight_input=False, batch=1):
    """1x1 Conv (an N16CX producer), the grouped Conv, BatchNormalization (from opset 14:
    onnx.reference's older BatchNormalization disagrees with ONNX Runtime and pplpy), Relu."""
    inits = {"w0": rand(ic, ic, 1, 1) / np.float32(np.sqrt(ic)), "b": rand(oc),
             "s": rand(oc), "t": rand(oc), "m": rand(oc), "v": np.abs(rand(oc)) + 0.5}
    w = rand(oc, ic // groups, kernel, kernel) / np.float32(np.sqrt(9 * ic / groups))
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, ic, *hw])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT,
                                                    list(w.shape)))
    else:
        inits["w"] = w
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Conv", ["a", "w", "b"], ["c"], name="grouped", group=groups,
                              pads=[kernel // 2] * 4, strides=[stride, stride]),
             helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    if opset < 14:
        nodes[2:3] = [helper.make_node("Identity", ["c"], ["n"])]
        for name in "stmv":
            del inits[name]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {"x": rand(batch, ic, *hw)}
    if weight_input:
        feeds["w"] = w
    return model, feeds


def check(save_model, model, feeds, isa=None):
    """The fused build at 1 and 2 threads against the reference and the unfused build;
    returns the one-thread runtime."""
    path = save_model(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    rts = [pplpy.load(path, max_isa=isa, num_threads=t) for t in (1, 2)]
    got = [rt.run(feeds)["y"] for rt in rts]
    unfused = pplpy.load(path, max_isa=isa, num_threads=1, fusion=False).run(feeds)["y"]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0], unfused, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[0], got[1])
    return rts[0]


def convs(rt):
    return [(node, op) for node, op in rt.result.ops.items() if node.op_type == "Conv"]


@pytest.mark.parametrize("groups,ic,oc,opset", [(2, 32, 64, 17), (3, 48, 96, 11),
                                                (4, 64, 64, 13)])
def test_a_grouped_conv_becomes_a_conv_per_group(save_model, isa, groups, ic, oc, opset):
    model, feeds = grouped_block(ic, oc, groups, opset=opset)
    rt = check(save_model, model, feeds, isa)
    types = [n.op_type for n in rt.graph.nodes]
    assert types.count("Split") == 1 and types.count("Concat") == 1
    assert "BatchNormalization" not in types and "Relu" not in types
    per_group = [(node, op) for node, op in convs(rt) if node.name != "Conv_0"]
    assert len(per_group) == groups
    for node, op in per_group:
        assert op.param.group == 1
        assert rt.result.kernels[node].algorithm == "winograd_f4x3"
        assert op.post_ops == [eltwise(PostOp.RELU, 0.0, 0.0)]
    assert dict(rt.result.log)  # the build log exists
    assert any("split_grouped_conv" in line and "1 change(s)" in line for line in rt.pass_log)


@pytest.mark.parametrize("case", ["narrow_groups", "stride_2", "kernel_5", "small_output",
                                  "run_time_weight", "depthwise", "unfused"])
def test_convs_the_rule_leaves_alone(save_model, case):
    kwargs = {
        "narrow_groups": dict(ic=32, oc=32, groups=4),        # 8 channels a group
        "stride_2": dict(stride=2, hw=(16, 16)),
        "kernel_5": dict(kernel=5),
        "small_output": dict(hw=(5, 7)),
        "run_time_weight": dict(weight_input=True),
        "depthwise": dict(ic=32, oc=32, groups=32),
        "unfused": {},
    }[case]
    model, feeds = grouped_block(**kwargs)
    path = save_model(model)
    rt = pplpy.load(path, num_threads=1, fusion=case != "unfused")
    assert "Split" not in [n.op_type for n in rt.graph.nodes]
    assert any(op.param.group > 1 for _, op in convs(rt))
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_a_team_that_runs_the_groups_direct_keeps_one_conv(save_model):
    """Four groups of 16 -> 32 channels at 10 x 7: one thread runs each group on Winograd,
    three threads finish direct first (too few Winograd items), so the split would only add
    the Split's copy; and the optimiser alone, with no engine to ask, never splits."""
    from pplpy.models.onnx import load_model
    from pplpy.optimizer import PassContext, PassManager
    from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

    model, feeds = grouped_block(ic=64, oc=128, groups=4, hw=(10, 7))
    path = save_model(model)
    splits = {}
    for threads in (1, 3):
        rt = pplpy.load(path, num_threads=threads)
        splits[threads] = [n.op_type for n in rt.graph.nodes].count("Split")
        np.testing.assert_allclose(rt.run(feeds)["y"],
                                   ReferenceEvaluator(model).run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-4)
    assert splits == {1: 1, 3: 0}
    graph, _ = load_model(path)
    PassManager(DEFAULT_PIPELINE).run(graph, PassContext(fusion=True))
    assert "Split" not in [n.op_type for n in graph.nodes]


def test_batch_two_splits_too(save_model):
    """Batch 2: the Concat's parts are not contiguous, so it copies; the result holds."""
    model, feeds = grouped_block(batch=2)
    rt = check(save_model, model, feeds)
    assert [n.op_type for n in rt.graph.nodes].count("Split") == 1


def test_saved_optimized_model_reloads(tmp_path):
    model, feeds = grouped_block()
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    onnx.save(model, src)
    saved = pplpy.save_optimized_model(str(src), str(out))
    assert [n.op_type for n in saved.graph.node].count("Split") == 1
    want = pplpy.load(str(src)).run(feeds)["y"]
    np.testing.assert_array_equal(pplpy.load(str(out)).run(feeds)["y"], want)
