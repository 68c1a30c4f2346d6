"""einsum_to_matmul: a matmul-shaped two-operand Einsum becomes MatMul between Transposes, so
that attention written as einsum (CvT) fuses into one Attention node.  Each case against the
reference and the fusion=False build (which keeps the Einsum)."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy

RNG = np.random.default_rng(9)
FLOAT = onnx.TensorProto.FLOAT


def einsum_model(equation, shapes, opset=17):
    inputs = [helper.make_tensor_value_info(f"x{i}", FLOAT, list(s))
              for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"],
                            equation=equation)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", FLOAT, None)])
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def check(save_model, model, feeds):
    """The fused build against the reference and the unfused one; returns its op types."""
    path = save_model(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    rt = pplpy.load(path, num_threads=1)
    unfused = pplpy.load(path, num_threads=1, fusion=False)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(unfused.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    assert "Einsum" in [n.op_type for n in unfused.graph.nodes]
    return [n.op_type for n in rt.graph.nodes]


@pytest.mark.parametrize("equation,shapes,transposes", [
    ("bik,bkj->bij", [(2, 5, 7), (2, 7, 3)], 0),
    ("ik,jk->ij", [(5, 7), (3, 7)], 1),                  # B transposed
    ("bki,bkj->bij", [(2, 7, 5), (2, 7, 3)], 1),         # A transposed
    ("bij,bjk->bki", [(2, 5, 7), (2, 7, 3)], 1),         # the product transposed
    ("hbik,bhkj->bhij", [(3, 2, 5, 7), (2, 3, 7, 4)], 1),  # batch labels in another order
    ("bhlk,bhtk->bhlt", [(1, 1, 9, 8), (1, 1, 6, 8)], 1),  # CvT's scores, batch 1
    ("bij,bjk->bik", [(1, 5, 7), (4, 7, 3)], 0),         # a broadcast batch
])
def test_matmul_shaped_einsum_becomes_matmul(save_model, equation, shapes, transposes):
    types = check(save_model, *einsum_model(equation, shapes))
    assert "Einsum" not in types and types.count("MatMul") == 1
    assert types.count("Transpose") == transposes


@pytest.mark.parametrize("equation,shapes", [
    ("...ik,...kj->...ij", [(2, 5, 7), (2, 7, 3)]),     # an ellipsis
    ("ij,j->i", [(5, 7), (7,)]),                        # no column label
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),          # three operands
    ("ik,kj->ij", [(5, 1), (4, 3)]),                    # a contraction broadcast from 1
    ("bij,bjk->ik", [(2, 5, 7), (2, 7, 3)]),             # a batch label summed
])
def test_other_einsums_stay(save_model, equation, shapes):
    types = check(save_model, *einsum_model(equation, shapes))
    assert "Einsum" in types


def test_einsum_attention_fuses(save_model):
    """CvT's attention: einsum scores, a scale, Softmax, einsum with V: one Attention node."""
    b, h, lq, lk, d = 1, 2, 12, 7, 16
    names = ["q", "k", "v"]
    shapes = [(b, h, lq, d), (b, h, lk, d), (b, h, lk, d)]
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhlk,bhtk->bhlt"),
             helper.make_node("Mul", ["s", "scale"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "v"], ["y"], equation="bhlt,bhtv->bhlv")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, FLOAT, list(s))
                     for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [numpy_helper.from_array(np.float32(d ** -0.5), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    types = check(save_model, model, feeds)
    assert types == ["Attention"]
