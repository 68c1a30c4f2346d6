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


def hf_mask_model(fill, nan_guard=True):
    """HF transformers' SDPA mask as the TorchScript exporter writes it for GPT-2: keys
    and queries as Ranges each unsqueezed one axis at a time, LessOrEqual(kv, q) (the
    causal part), And with a True constant and the padding (attention_mask as bool, B x
    1 x 1 x S), Expand to (B, 1, S, S), Where(mask, 0, fill) added to the scores, softmax
    [and the exporter's NaN guard]."""
    g = G()
    scores = g.op("Mul", g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2])),
                  g.c(1 / math.sqrt(D), np.float32))

    def index(axes):
        r = g.op("Range", g.c(0, np.int64), g.c(S, np.int64), g.c(1, np.int64))
        for axis in axes:
            r = g.op("Unsqueeze", r, g.c([axis], np.int64))
        return r

    kv, q = index((0, 1, 2)), index((0, 1, 3))  # (1, 1, 1, S) and (1, 1, S, 1)
    causal = g.op("And", g.c(True, np.bool_), g.op("LessOrEqual", kv, q))
    padding = g.op("Cast", "attention_mask", to=BOOL)
    padding = g.op("Reshape", padding, g.c([B, 1, 1, S], np.int64))
    mask = g.op("Expand", g.op("And", causal, padding), g.c([B, 1, S, S], np.int64))
    additive = g.op("Where", mask, g.c([0.0], np.float32), g.c([fill], np.float32))
    p = g.op("Softmax", g.op("Add", scores, additive), axis=-1)
    if nan_guard:
        p = g.op("Where", g.op("IsNaN", p), g.c([0.0], np.float32), p)
    g.nodes.append(helper.make_node("MatMul", [p, "v"], ["y"]))
    inputs = [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("attention_mask", I64, [B, S]))
    graph = helper.make_graph(g.nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", F, [B, H, S, D])], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _hf_check(model_proto, isa, attention_mask):
    feeds = {n: RNG.standard_normal((B, H, S, D)).astype(np.float32) for n in "qkv"}
    feeds["attention_mask"] = attention_mask
    rt = pplpy.load(model_proto.SerializeToString(), num_threads=1, max_isa=isa)
    (want,) = ReferenceEvaluator(model_proto).run(None, feeds)
    got = rt.run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (node,) = [n for n in rt.graph.nodes if n.op_type == "Attention"]
    return node


def _left_padded():
    """Batch 1 padded on the left: its first 5 queries see no key at all."""
    mask = np.ones((B, S), np.int64)
    mask[1, :5] = 0
    return mask


def test_hf_causal_and_padding_mask_splits(isa):
    """With a -inf fill the causal part becomes is_causal and the padding stays the mask,
    exactly: rows masked whole (left padding) are 0 both ways (the guard turns the
    softmax's NaN into 0; the kernel gives 0)."""
    node = _hf_check(hf_mask_model(-math.inf), isa, _left_padded())
    assert node.param.is_causal == 1 and len(node.inputs) == 4


def test_hf_mask_with_a_finite_fill_is_not_split(isa):
    """With finfo.min a row masked whole averages every key in the spelled-out graph, not
    only the causal ones: the combined mask is passed as it is."""
    node = _hf_check(hf_mask_model(FLOAT_MIN, nan_guard=False), isa, _left_padded())
    assert node.param.is_causal == 0 and len(node.inputs) == 4


def test_hf_causal_part_alone_becomes_is_causal_without_a_mask(isa):
    """No padding (the And's other operand a True constant after folding the mask of a
    constant attention_mask): is_causal and no mask input."""
    model_proto = hf_mask_model(-math.inf)
    for node in model_proto.graph.node:  # attention_mask -> a constant of ones
        node.input[:] = ["ones_mask" if i == "attention_mask" else i for i in node.input]
    model_proto.graph.initializer.append(
        numpy_helper.from_array(np.ones((B, S), np.int64), "ones_mask"))
    keep = [i for i in model_proto.graph.input if i.name != "attention_mask"]
    del model_proto.graph.input[:]
    model_proto.graph.input.extend(keep)
    feeds = {n: RNG.standard_normal((B, H, S, D)).astype(np.float32) for n in "qkv"}
    rt = pplpy.load(model_proto.SerializeToString(), num_threads=1, max_isa=isa)
    (want,) = ReferenceEvaluator(model_proto).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    (node,) = [n for n in rt.graph.nodes if n.op_type == "Attention"]
    assert node.param.is_causal == 1 and len(node.inputs) == 3


@pytest.mark.parametrize("diagonal, fill", [(0, FLOAT_MIN), (-1, FLOAT_MIN), (0, -1e4)])
def test_a_constant_additive_triangle(isa, diagonal, fill):
    """A folded causal mask, 0 on and below the diagonal and finfo.min above, is
    is_causal; one without the diagonal, or with a small fill, stays a mask."""
    g = G()
    scores = g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2]))
    tri = np.where(np.tril(np.ones((S, S), bool), diagonal), 0, fill).astype(np.float32)
    p = g.op("Softmax", g.op("Add", scores, g.c(tri[None, None], np.float32)), axis=-1)
    g.nodes.append(helper.make_node("MatMul", [p, "v"], ["y"]))
    graph = helper.make_graph(g.nodes, "g",
                              [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in "qkv"],
                              [helper.make_tensor_value_info("y", F, [B, H, S, D])], g.inits)
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    node = attention_of(model_proto, isa)
    causal = diagonal == 0 and fill == FLOAT_MIN
    assert node.param.is_causal == int(causal) and len(node.inputs) == (3 if causal else 4)
