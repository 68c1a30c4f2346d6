"""recognize_attention on causal masks: the exporter's spellings of the triangle become
Attention's ``is_causal`` (no mask input); anything that is not exactly the triangle stays a
mask.  Each case is checked against ``onnx.reference.ReferenceEvaluator`` on the original
model, on every ISA tier.  Scores are (B, H, S, S) from 4-D Q, K, V inputs.
"""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy

F, BOOL, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
B, H, S, D = 2, 3, 20, 8
FLOAT_MIN = float(np.finfo(np.float32).min)
RNG = np.random.default_rng(5)


class G:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def op(self, op_type, *inputs, **attrs):
        self.n += 1
        out = f"{op_type.lower()}{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def c(self, value, dtype):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name


def trilu_cond(g, upper=0, k=None, value=True):
    """Trilu(ConstantOfShape([S, S], value), upper[, k])."""
    ones = g.op("ConstantOfShape", g.c([S, S], np.int64),
                value=helper.make_tensor("value", BOOL, [1], [value]))
    return g.op("Trilu", ones, *([g.c(k, np.int64)] if k is not None else []), upper=upper)


def range_cond(g, op_type="Less", swap=False, axes=(1, 0)):
    """op_type(Range(S)[:, None], Range(S)[None, :]), operands swapped with ``swap``."""
    r = g.op("Range", g.c(0, np.int64), g.c(S, np.int64), g.c(1, np.int64))
    rows = g.op("Unsqueeze", r, g.c([axes[0]], np.int64))
    cols = g.op("Unsqueeze", r, g.c([axes[1]], np.int64))
    return g.op(op_type, *((cols, rows) if swap else (rows, cols)))


def model(cond_of, keep=True, extra_mask=False):
    """softmax(Where(cond, QK^T / sqrt(D), min) [+ mask]) V; keep: cond True keeps a score."""
    g = G()
    scores = g.op("Div", g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2])),
                  g.c(math.sqrt(D), np.float32))
    cond = cond_of(g)
    fill = g.c(FLOAT_MIN, np.float32)
    masked = g.op("Where", cond, scores, fill) if keep else g.op("Where", cond, fill, scores)
    if extra_mask:
        masked = g.op("Add", masked, "pad")
    g.nodes.append(helper.make_node("MatMul", [g.op("Softmax", masked, axis=-1), "v"], ["y"]))
    inputs = [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in "qkv"]
    if extra_mask:
        inputs.append(helper.make_tensor_value_info("pad", F, [B, 1, 1, S]))
    graph = helper.make_graph(g.nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", F, [B, H, S, D])], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def attention_of(model_proto, isa):
    """(the loaded graph's Attention node, its output checked against the reference)."""
    feeds = {n: RNG.standard_normal((B, H, S, D)).astype(np.float32) for n in "qkv"}
    if any(i.name == "pad" for i in model_proto.graph.input):
        pad = np.zeros((B, 1, 1, S), np.float32)
        pad[1, ..., -3:] = -10000.0
        feeds["pad"] = pad
    rt = pplpy.load(model_proto.SerializeToString(), num_threads=1, max_isa=isa)
    (want,) = ReferenceEvaluator(model_proto).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    nodes = [n for n in rt.graph.nodes if n.op_type == "Attention"]
    assert len(nodes) == 1
    return nodes[0]


@pytest.mark.parametrize("cond_of, keep", [
    (trilu_cond, True),
    (lambda g: trilu_cond(g, k=0), True),
    (range_cond, False),
    (lambda g: range_cond(g, "Greater", swap=True), False),
    (lambda g: g.c(np.tril(np.ones((S, S), bool)), np.bool_), True),
    (lambda g: g.c(np.triu(np.ones((1, 1, S, S), bool), 1), np.bool_), False),
])
def test_causal_spellings_become_is_causal(isa, cond_of, keep):
    node = attention_of(model(cond_of, keep), isa)
    assert node.param.is_causal == 1 and len(node.inputs) == 3


@pytest.mark.parametrize("cond_of, keep", [
    (lambda g: trilu_cond(g, upper=1), True),           # keeps the future
    (lambda g: trilu_cond(g, k=1), True),               # one key past the diagonal too
    (lambda g: trilu_cond(g, value=False), True),       # nothing kept
    (lambda g: range_cond(g, swap=True), False),        # masks the past
    (lambda g: range_cond(g, axes=(0, 1)), False),      # rows and columns the other way
    (lambda g: g.c(np.tril(np.ones((S, S), bool), -1), np.bool_), True),  # no diagonal
])
def test_other_triangles_stay_masks(isa, cond_of, keep):
    node = attention_of(model(cond_of, keep), isa)
    assert node.param.is_causal == 0 and len(node.inputs) == 4


def test_causal_with_a_padding_mask_keeps_both_as_masks(isa):
    """Two masks: the combined mask is passed, not is_causal (a padding mask could mask a
    row whole, where is_causal and the fill would differ)."""
    node = attention_of(model(trilu_cond, True, extra_mask=True), isa)
    assert node.param.is_causal == 0 and len(node.inputs) == 4
