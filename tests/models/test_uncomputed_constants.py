"""Constant subgraphs in float64 / float16 are folded while the model is read (with ONNX's
reference implementation), so a model whose only such arithmetic is on constants before a
Cast to float32 (RT-DETR's sine position embedding) loads without cast_to_float32 and
computes what it says; float64 computed from a feed at run time is still refused."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy

RNG = np.random.default_rng(3)
F, D, H = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16


def model_of(nodes, inits, opset=18, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [4, 6])],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_and_check(save_model, model):
    rt = pplpy.load(save_model(model))
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    got = rt.run({"x": x})
    for name, want in zip(rt.output_names, ReferenceEvaluator(model).run(None, {"x": x})):
        assert got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6)
    return [n.op_type for n in rt.graph.nodes]


def test_sine_position_embedding_in_float64(save_model):
    """RT-DETR's form: Sin and Cos of a float64 initializer, Concat, Cast to float32."""
    pos = (RNG.random((4, 3)) * 10).astype(np.float64)
    nodes = [helper.make_node("Sin", ["pos"], ["s"]), helper.make_node("Cos", ["pos"], ["c"]),
             helper.make_node("Concat", ["s", "c"], ["sc"], axis=1),
             helper.make_node("Cast", ["sc"], ["emb"], to=F),
             helper.make_node("Add", ["x", "emb"], ["y"])]
    ops = run_and_check(save_model, model_of(nodes, {"pos": pos}))
    assert not {"Sin", "Cos", "Concat", "Cast"} & set(ops)


@pytest.mark.parametrize("form", ["constant_node", "cast_to_double", "float16", "shape_of"])
def test_other_constant_spellings(save_model, form):
    inits = {}
    if form == "constant_node":  # a Constant node holding float64, scaled in float64
        nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            RNG.standard_normal((4, 6))))]
        inits["two"] = np.array(2.0)
        nodes.append(helper.make_node("Mul", ["k", "two"], ["k2"]))
    elif form == "cast_to_double":  # float32 made float64 by a Cast, then computed on
        inits["w"] = RNG.standard_normal((4, 6)).astype(np.float32)
        nodes = [helper.make_node("Cast", ["w"], ["wd"], to=D),
                 helper.make_node("Exp", ["wd"], ["k2"])]
    elif form == "float16":
        inits["h"] = np.abs(RNG.standard_normal((4, 6))).astype(np.float16)
        nodes = [helper.make_node("Sqrt", ["h"], ["k2"])]
    else:  # ConstantOfShape filled with a float64 value, then Tanh
        inits["dims"] = np.array([4, 6], np.int64)
        nodes = [helper.make_node("ConstantOfShape", ["dims"], ["ones"],
                                  value=numpy_helper.from_array(np.array([0.5]))),
                 helper.make_node("Tanh", ["ones"], ["k2"])]
    nodes += [helper.make_node("Cast", ["k2"], ["k32"], to=F),
              helper.make_node("Mul", ["x", "k32"], ["y"])]
    ops = run_and_check(save_model, model_of(nodes, inits))
    assert ops == ["Mul"]


def test_float64_computed_from_a_feed_is_still_refused(save_model):
    nodes = [helper.make_node("Cast", ["x"], ["xd"], to=D),
             helper.make_node("Sin", ["xd"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=F)]
    with pytest.raises(pplpy.UnsupportedOpError, match='input "xd" is float64'):
        pplpy.load(save_model(model_of(nodes, {})))


def test_random_float64_is_not_folded(save_model):
    """A draw is not a function of its inputs: it stays a node, and is refused as before."""
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[4, 6], dtype=D),
             helper.make_node("Sin", ["r"], ["s"]),
             helper.make_node("Cast", ["s"], ["c"], to=F),
             helper.make_node("Add", ["x", "c"], ["y"])]
    with pytest.raises(pplpy.UnsupportedOpError, match="float64"):
        pplpy.load(save_model(model_of(nodes, {})))


def test_a_folded_chain_saved_optimized_reloads(tmp_path):
    pos = RNG.random((4, 6))
    nodes = [helper.make_node("Sin", ["pos"], ["s"]),
             helper.make_node("Cast", ["s"], ["emb"], to=F),
             helper.make_node("Add", ["x", "emb"], ["y"])]
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    onnx.save(model_of(nodes, {"pos": pos}), src)
    pplpy.save_optimized_model(str(src), str(out))
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(pplpy.load(str(out)).run({"x": x})["y"],
                                  pplpy.load(str(src)).run({"x": x})["y"])


@pytest.mark.parametrize("form", ["unsqueeze_11", "constant_node_shape"])
def test_the_models_opset_and_its_constant_nodes(save_model, form):
    """Unsqueeze-11 takes its axes as an attribute (the reference is asked at the model's
    opset); a Reshape's shape from a Constant node (as the TorchScript exporter writes
    shapes) is a constant input too."""
    pos = RNG.random((24,))
    if form == "unsqueeze_11":
        opset, inits = 11, {"pos": pos.reshape(4, 6)[0]}
        nodes = [helper.make_node("Unsqueeze", ["pos"], ["p2"], axes=[0])]
    else:
        opset, inits = 18, {"pos": pos}
        nodes = [helper.make_node("Constant", [], ["shape"], value_ints=[4, 6]),
                 helper.make_node("Reshape", ["pos", "shape"], ["p2"])]
    nodes += [helper.make_node("Sin", ["p2"], ["s"]),
              helper.make_node("Cast", ["s"], ["emb"], to=F),
              helper.make_node("Add", ["x", "emb"], ["y"])]
    ops = run_and_check(save_model, model_of(nodes, inits, opset=opset))
    assert "Sin" not in ops


def test_softmax_before_opset_13_is_not_folded_with_the_later_meaning(save_model):
    """Softmax-11 flattened from its axis; onnx.reference has only the later, last-axis
    form, so such a node is not folded (and, in float64, refused) rather than computed
    wrong."""
    nodes = [helper.make_node("Softmax", ["c"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=F),
             helper.make_node("Add", ["x", "sf"], ["y"])]
    model = model_of(nodes, {"c": RNG.random((4, 6))}, opset=11)
    with pytest.raises(pplpy.UnsupportedOpError, match='input "c" is float64'):
        pplpy.load(save_model(model))
