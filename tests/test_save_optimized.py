"""Saving the optimised graph as ONNX (pplpy.save_optimized_model, pplnn
--save-optimized-model) and loading it back: same outputs as the original model, fused nodes
in the pplpy domain read back fused (no second fusion), no Reorder nodes, a file
onnx.checker accepts."""

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from models import graph_builders as gb
from pplpy.data import DEMO_MODEL_PATH
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE
from pplpy.tools import pplnn


def op_counts(model):
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type
                               for n in model.graph.node)


def attributes(model, op):
    """{attribute name: value} of each node of ``op`` ("pplpy::Conv")."""
    return [{a.name: helper.get_attribute_value(a) for a in n.attribute}
            for n in model.graph.node if f"{n.domain}::{n.op_type}" == op]


def save_and_reload(tmp_path, model, feeds, passes=None):
    """Save ``model`` optimised; check the file, the reload's outputs against the
    original's and that loading it changed nothing (no folding, no fusion: it was saved
    fused).  Returns the saved ModelProto and the reloaded runtime."""
    src, out = tmp_path / "model.onnx", tmp_path / "model.opt.onnx"
    if isinstance(model, onnx.ModelProto):
        onnx.save(model, src)
    else:
        src = model
    saved = pplpy.save_optimized_model(str(src), str(out), passes=passes)
    onnx.checker.check_model(onnx.load(out), full_check=True)
    assert "pplpy::Reorder" not in op_counts(saved)
    assert {o.domain: o.version for o in saved.opset_import}["pplpy"] == 1
    want = pplpy.load(str(src), passes=passes).run(feeds)
    rt = pplpy.load(str(out))
    got = rt.run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    changed = [line for line in rt.pass_log
               if " 0 change(s)" not in line and not line.startswith("remove_identity")]
    assert changed == []  # remove_identity: the Identity left for a reordered output
    assert dict(rt.result.log)["fuse_post_ops"] == "0 fused"
    return saved, rt


def fused_post_ops(rt, op_type):
    return [getattr(op, "post_ops", None) for node, op in rt.result.ops.items()
            if node.op_type == op_type]


def test_demo_model(tmp_path):
    feeds = {"image": np.random.default_rng(0).random((1, 3, 32, 32), np.float32)}
    saved, rt = save_and_reload(tmp_path, DEMO_MODEL_PATH, feeds)
    assert op_counts(saved)["pplpy::Conv"] == 2
    relu, leaky = attributes(saved, "pplpy::Conv")  # Conv-Relu, Conv-LeakyRelu(0.1)
    assert (relu["post_ops"], relu["post_op_params"]) == ([b"relu"], [0.0, 0.0])
    assert leaky["post_ops"] == [b"leaky_relu"]
    assert np.float32(leaky["post_op_params"][0]) == np.float32(0.1)
    assert [post[0].alg for post in fused_post_ops(rt, "Conv")] == [1, 2]


def test_resnet_block_bn_folded_relu_fused(tmp_path):
    feeds = {"input": np.random.default_rng(1).standard_normal((1, 32, 14, 14), np.float32)}
    saved, rt = save_and_reload(tmp_path, gb.resnet_block(), feeds)
    counts = op_counts(saved)
    assert "BatchNormalization" not in counts
    # stem and conv1: BN folded, Relu fused; conv2 (BN folded) takes the residual Add and the
    # Relu after it as post-ops [sum, relu], the block's input as its operand input
    assert counts["pplpy::Conv"] == 3 and "Add" not in counts and "Relu" not in counts
    chains = attributes(saved, "pplpy::Conv")
    residual = next(a for a in chains if a["post_ops"] == [b"sum", b"relu"])
    assert residual["post_op_operands"] == [3, -1]
    want = ReferenceEvaluator(gb.resnet_block()).run(None, feeds)[0]
    np.testing.assert_allclose(rt.run(feeds)["output"], want, rtol=1e-4, atol=1e-4)


def test_shufflenetv2_block(tmp_path):
    feeds = {"input": np.random.default_rng(2).standard_normal((1, 48, 14, 14), np.float32)}
    saved, _ = save_and_reload(tmp_path, gb.shufflenetv2_block(), feeds)
    counts = op_counts(saved)
    assert counts["pplpy::ChannelShuffle"] == 2 and "Transpose" not in counts
    assert attributes(saved, "pplpy::ChannelShuffle")[0] == {"group": 2}
    assert counts["pplpy::Conv"] == 5


def bert_feeds(batch=2, seq=7):
    rng = np.random.default_rng(3)
    mask = np.ones((batch, seq), np.int64)
    mask[1, -2:] = 0
    return {"hidden_states": rng.standard_normal((batch, seq, 64)).astype(np.float32),
            "attention_mask": mask}


def test_bert_layer(tmp_path):
    saved, rt = save_and_reload(tmp_path, gb.bert_encoder_layer(), bert_feeds())
    counts = op_counts(saved)
    # the residual Adds and their norms as pplpy::AddLayerNormalization, the Q, K, V
    # projections as one GEMM read by pplpy::PackedAttention
    assert counts["pplpy::MatMulBias"] == 4 and counts["pplpy::AddLayerNormalization"] == 2
    assert counts["pplpy::PackedAttention"] == 1
    (packed,) = attributes(saved, "pplpy::PackedAttention")
    assert list(packed["qkv_hidden_sizes"]) == [64, 64, 64]
    gelu = [a for a in attributes(saved, "pplpy::MatMulBias") if "post_ops" in a]
    assert [[s.decode() for s in a["post_ops"]] for a in gelu] == [["gelu"]]
    # symbolic dims survive, and the reload runs another shape
    dims = [[d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in saved.graph.input]
    assert dims == [["batch", "seq", 64], ["batch", "seq"]]
    assert rt.run(bert_feeds(3, 12))["output"].shape == (3, 12, 64)


def test_bert_layer_attention_in_an_older_opset(tmp_path):
    """Attention (opset 23) in an opset-17 model is written as pplpy::Attention; the model
    keeps ai.onnx 17."""
    # without pack_qkv, which would make it a pplpy::PackedAttention
    passes = [e for e in DEFAULT_PIPELINE if e.pass_id != "pack_qkv"]
    saved, _ = save_and_reload(tmp_path, gb.bert_encoder_layer(), bert_feeds(), passes)
    assert op_counts(saved)["pplpy::Attention"] == 1
    assert {o.domain: o.version for o in saved.opset_import}[""] == gb.OPSET


def test_gpt2_layer_gelu_twin(tmp_path):
    """Gelu (opset 20) left unfused in an opset-17 model: written as pplpy::Gelu."""
    feeds = {"input_ids": np.random.default_rng(4).integers(0, 100, (2, 9))}
    saved, _ = save_and_reload(tmp_path, gb.gpt2_decoder_layer(), feeds)
    assert op_counts(saved)["pplpy::Gelu"] == 1


@pytest.mark.parametrize("opset", [11, 17, 20])
def test_swish_twin(tmp_path, opset):
    """A SiLU no producer takes (it reads a graph input) is recognised as Swish (opset 24):
    in an older model it is written as pplpy::Swish, and the model keeps its opset."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)
    saved, _ = save_and_reload(tmp_path, model, {"x": x})
    assert op_counts(saved) == {"pplpy::Swish": 1}
    assert {o.domain: o.version for o in saved.opset_import}[""] == opset


def test_hand_written_fused_conv(tmp_path):
    """A pplpy::Conv written by hand with a post-op reads as Conv then that activation."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")

    def model(nodes, domain_opsets):
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                       for d, v in domain_opsets])

    fused = model([helper.make_node("Conv", ["x", "w"], ["y"], domain="pplpy", pads=[1] * 4,
                                    post_ops=["leaky_relu"], post_op_params=[0.25, 0.0])],
                  [("", 17), ("pplpy", 1)])
    plain = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
                   helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.25)], [("", 17)])
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    want = ReferenceEvaluator(plain).run(None, {"x": x})[0]
    got = pplpy.load(fused.SerializeToString()).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    bad = model([helper.make_node("Conv", ["x", "w"], ["y"], domain="pplpy",
                                  post_ops=["nope"], post_op_params=[0.0, 0.0])],
                [("", 17), ("pplpy", 1)])
    with pytest.raises(pplpy.ModelError, match="unknown post-op 'nope'"):
        pplpy.load(bad.SerializeToString())


def test_control_flow_cannot_be_saved(tmp_path):
    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out])], op, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])

    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "a"),
                          else_branch=branch("Neg", "b"))], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(pplpy.PplError, match='node "If_0".*control-flow'):
        pplpy.save_optimized_model(str(path), str(tmp_path / "out.onnx"))
    assert not (tmp_path / "out.onnx").exists()


def test_pplnn_save_optimized_model(tmp_path, capsys):
    out = tmp_path / "demo.opt.onnx"
    assert pplnn.main(["--save-optimized-model", str(out)]) == 0
    assert f"saved the optimized model (7 nodes) to {out}" in capsys.readouterr().out
    assert op_counts(onnx.load(out))["pplpy::Conv"] == 2
    assert pplnn.main(["--onnx-model", str(out)]) == 0


@pytest.mark.parametrize("where", ["missing/out.onnx", "."])
def test_pplnn_save_optimized_model_unwritable(tmp_path, capsys, where):
    """A folder that does not exist is refused before the build; a path that cannot be
    written (here a folder) after it: one line, exit 2."""
    assert pplnn.main(["--save-optimized-model", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pplnn: error: ") and "\n" not in err
    assert ("does not exist" in err) if "missing" in where else ("cannot write" in err)


def test_a_saved_chain_with_a_bad_entry_is_a_model_error():
    node = helper.make_node("EltwiseChain", ["x"], ["y"], domain="pplpy",
                            entries=['{"op": "Relu", "param": "os", "fields": null, '
                                     '"operand": null, "chain_left": true}'])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                       None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("pplpy", 1)])
    with pytest.raises(pplpy.ModelError, match="'os' is no pplpy param class"):
        pplpy.load(model.SerializeToString())


# -- a saved model needs no second optimisation and saves again ----------------------------


def test_saved_reduce_twin_with_onnx_opset_saves_again(tmp_path):
    nodes = [helper.make_node("ReduceMean", ["x"], ["r"], axes=[2, 0], keepdims=1),
             helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    src, once, twice = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "m.opt2.onnx"
    onnx.save(model, src)
    saved = pplpy.save_optimized_model(str(src), str(once))
    (node,) = saved.graph.node
    assert (node.domain, node.op_type) == ("pplpy", "ReduceMean")
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["onnx_opset"] == 13
    again = pplpy.save_optimized_model(str(once), str(twice))
    assert [(n.domain, n.op_type) for n in again.graph.node] == [("pplpy", "ReduceMean")]
    onnx.checker.check_model(onnx.load(twice), full_check=True)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 2, 3)).astype(np.float32)}
    want = pplpy.load(str(src), num_threads=1).run(feeds)["y"]
    np.testing.assert_array_equal(pplpy.load(str(twice), num_threads=1).run(feeds)["y"], want)


def _sunk_transpose_model():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("LeakyRelu", ["t"], ["a"], alpha=0.138),
             helper.make_node("Abs", ["a"], ["b"]),
             helper.make_node("Pow", ["b", "p"], ["c"]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(-0.7, np.float32), "p")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_run_behind_a_sunk_transpose_is_fused(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    onnx.save(_sunk_transpose_model(), src)
    rt = pplpy.load(str(src), num_threads=1)
    assert [n.op_type for n in rt.graph.nodes] == ["EltwiseChain"]
    pplpy.save_optimized_model(str(src), str(out))
    again = pplpy.load(str(out), num_threads=1)
    assert [line for line in again.pass_log if " 0 change(s)" not in line] == []
    x = np.random.default_rng(1).uniform(-3, 3, (4, 3)).astype(np.float32)
    np.testing.assert_array_equal(again.run({"x": x})["y"], rt.run({"x": x})["y"])
    want = (np.abs(np.where(x > 0, x, 0.138 * x)) ** np.float32(-0.7))
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-5)


def test_transpose_made_reshape_merges_with_its_neighbours(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 2, 4, 3]),
             helper.make_node("Reshape", ["b", "s2"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1, 4, 5, 1, 1], np.int64), "s1"),
             numpy_helper.from_array(np.array([1, 20, 1, 1], np.int64), "s2")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    rt = pplpy.load(str(src))
    assert [n.op_type for n in rt.graph.nodes] == ["Reshape"]
    pplpy.save_optimized_model(str(src), str(out))
    assert [line for line in pplpy.load(str(out)).pass_log if " 0 change(s)" not in line] == []
    x = np.arange(20, dtype=np.float32).reshape(1, 20, 1, 1)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], x)
