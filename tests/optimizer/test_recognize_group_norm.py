"""recognize_group_norm: PyTorch's GroupNorm export (Reshape to [N, G, -1],
InstanceNormalization, Reshape back, per-channel Mul and Add) becomes one GroupNormalization
that runs on N16CX between the Conv before it and the pool after it, with no reorder.
Checked against the reference and the fusion=False build on every ISA tier at 1 and 2
threads; spellings the rule must leave alone keep their nodes; a saved optimised model (an
opset-18 model holding a GroupNormalization-21) reloads to the same outputs."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def group_norm_block(channels=32, groups=4, hw=(9, 10), batch=1, gamma=(-1, 1, 1),
                     beta=(-1, 1, 1), grouped_shape=None, back_shape=None, opset=18,
                     extra_output=None):
    """x -> 1x1 Conv (an N16CX producer) -> Reshape(grouped_shape, default [0, G, -1]) ->
    InstanceNormalization -> Reshape(back_shape, default the conv's dims) [-> Mul(gamma of
    that shape, -1 for C)] [-> Add(beta)] -> AveragePool 3x3 -> y."""
    full = [batch, channels, *hw]
    grouped_shape = grouped_shape or [0, groups, -1]
    g = grouped_shape[1]
    inits = {"w": rand(channels, channels, 1, 1) / np.float32(np.sqrt(channels)),
             "gs": np.array(grouped_shape, np.int64), "bs": np.array(back_shape or full,
                                                                      np.int64),
             "s": rand(g), "b": rand(g)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Reshape", ["c", "gs"], ["grouped"]),
             helper.make_node("InstanceNormalization", ["grouped", "s", "b"], ["n"],
                              epsilon=1e-5),
             helper.make_node("Reshape", ["n", "bs"], ["t"])]
    for op, name, shape in (("Mul", "gamma", gamma), ("Add", "beta", beta)):
        if shape is not None:
            inits[name] = rand(*[channels if d == -1 else d for d in shape])
            nodes.append(helper.make_node(op, [nodes[-1].output[0], name], [f"{name}_out"]))
    nodes.append(helper.make_node("AveragePool", [nodes[-1].output[0]], ["y"],
                                  kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    outputs = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, onnx.TensorProto.FLOAT,
                                                     None))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, full)],
        outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, {"x": rand(*full) + 2.0}


def check(save_model, model, feeds, isa=None):
    """The fused build at 1 and 2 threads against the reference and the unfused build;
    returns the one-thread runtime."""
    path = save_model(model)
    want = ReferenceEvaluator(model).run(None, feeds)
    rts = [pplpy.load(path, max_isa=isa, num_threads=t) for t in (1, 2)]
    unfused = pplpy.load(path, max_isa=isa, num_threads=1, fusion=False).run(feeds)
    for rt in rts:
        got = rt.run(feeds)
        for name, w in zip(rt.output_names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4, err_msg=name)
            np.testing.assert_allclose(got[name], unfused[name], rtol=1e-4, atol=1e-4)
    return rts[0]


def types(rt):
    return [n.op_type for n in rt.graph.nodes]


@pytest.mark.parametrize("channels,groups,gamma,beta", [
    (32, 4, (-1, 1, 1), (-1, 1, 1)),      # PyTorch's export
    (32, 1, (1, -1, 1, 1), (-1, 1, 1)),   # PoolFormer's GroupNorm(1, C)
    (48, 48, None, (-1, 1, 1)),           # one channel a group, no gamma
    (19, 19, (1,), None),                 # channels not a multiple of 16, a scalar gamma
    (64, 32, None, None)])                # the instance norm's own affine map only
def test_group_norm_becomes_one_node_on_n16cx(save_model, isa, channels, groups, gamma, beta):
    model, feeds = group_norm_block(channels, groups, gamma=gamma, beta=beta)
    rt = check(save_model, model, feeds, isa)
    assert types(rt).count("GroupNormalization") == 1
    assert not {"InstanceNormalization", "Reshape", "Mul", "Add"} & set(types(rt))
    assert types(rt).count("Reorder") == 2  # the model's input and output only
    (node,) = [n for n in rt.graph.nodes if n.op_type == "GroupNormalization"]
    assert node.param.num_groups == groups and node.opset == 21
    assert rt.formats[node.inputs[0]] is DataFormat.N16CX
    assert rt.formats[node.outputs[0]] is DataFormat.N16CX
    assert any("recognize_group_norm" in line and "1 change(s)" in line
               for line in rt.pass_log)


def test_batch_two_and_a_grouped_shape_of_four_dims(save_model):
    model, feeds = group_norm_block(batch=2, grouped_shape=[2, 4, 8, -1])
    rt = check(save_model, model, feeds)
    assert "InstanceNormalization" not in types(rt)


@pytest.mark.parametrize("case", ["gamma_along_width", "batch_folded_into_groups",
                                  "back_to_another_shape", "grouped_read_elsewhere",
                                  "unfused"])
def test_spellings_the_rule_leaves_alone(save_model, case):
    kwargs = {
        # a Mul that broadcasts along W is not a per-channel scale: it stays after the norm
        "gamma_along_width": dict(gamma=(10,)),
        # (1, N * G, -1): statistics per (n, g) too, but the batch moved; left as written
        "batch_folded_into_groups": dict(batch=2, grouped_shape=[1, 8, -1]),
        "back_to_another_shape": dict(back_shape=[1, 32, 90], gamma=None, beta=None),
        "grouped_read_elsewhere": dict(extra_output="grouped"),
        "unfused": {},
    }[case]
    model, feeds = group_norm_block(**{"hw": (9, 10), **kwargs}) if case != \
        "back_to_another_shape" else _flattened_back()
    path = save_model(model)
    rt = pplpy.load(path, num_threads=1, fusion=case != "unfused")
    got = rt.run(feeds)
    for name, want in zip(rt.output_names, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4)
    if case == "gamma_along_width":
        # the Mul (and the Add after it) stay, as one element-wise chain
        assert types(rt).count("GroupNormalization") == 1
        assert {"Mul", "EltwiseChain"} & set(types(rt))
    else:
        assert "GroupNormalization" not in types(rt)


def _flattened_back():
    """The norm's output reshaped to (N, C, H * W), then a 1-D pool: not x's dims."""
    model, feeds = group_norm_block(back_shape=[1, 32, 90], gamma=None, beta=None)
    pool = model.graph.node[-1]
    pool.ClearField("attribute")
    pool.attribute.extend([helper.make_attribute("kernel_shape", [3]),
                           helper.make_attribute("pads", [1, 1])])
    return model, feeds


def test_saved_optimized_model_reloads(tmp_path):
    model, feeds = group_norm_block()
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    onnx.save(model, src)
    saved = pplpy.save_optimized_model(str(src), str(out))
    (node,) = [n for n in saved.graph.node if n.op_type == "GroupNormalization"]
    assert node.domain == "pplpy"  # the model imports opset 18: its per-group form
    want = pplpy.load(str(src)).run(feeds)["y"]
    reloaded = pplpy.load(str(out))
    assert types(reloaded).count("GroupNormalization") == 1
    np.testing.assert_allclose(reloaded.run(feeds)["y"], want, rtol=1e-6, atol=1e-6)
