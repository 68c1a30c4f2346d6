"""gather_rows_early: a Gather of constant rows moves above the row-wise ops that compute
them (a classifier's class token: the last layer then computes one row).  Each positive case
names what moved (the pass log) and checks the outputs against
``onnx.reference.ReferenceEvaluator`` on the original model, on every ISA tier; each near
miss must leave its Gather where it was and still match.
"""

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import graph_builders as gb
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.errors import PplError
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

F, BOOL = TensorProto.FLOAT, TensorProto.BOOL
B, S, HID = 2, 7, 16
RNG = np.random.default_rng(23)
WITHOUT = tuple(p for p in DEFAULT_PIPELINE if p.pass_id != "gather_rows_early")


class G:
    """A graph from x [B, S, HID] to y = Gather(chain(x), indices, axis)."""

    def __init__(self):
        self.nodes, self.inits, self.inputs, self.n = [], [], [("x", F, [B, S, HID])], 0

    def op(self, op_type, *inputs, **attrs):
        self.n += 1
        out = f"{op_type.lower()}{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def c(self, value, dtype=np.float32):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def w(self, *shape):
        return self.c(RNG.standard_normal(shape) / math.sqrt(shape[0]))

    def model(self, value, indices=0, axis=1, extra_outputs=()):
        idx = self.c(indices, np.int64)
        self.nodes.append(helper.make_node("Gather", [value, idx], ["y"], axis=axis))
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info(n, t, d) for n, t, d in self.inputs],
            [helper.make_tensor_value_info(o, F, None) for o in ("y", *extra_outputs)],
            self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def feeds_for(model):
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == BOOL:
            feeds[value.name] = RNG.random(dims) > 0.3
        else:
            feeds[value.name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


def check(model, isa="avx512", threads=1):
    """(runtime, the pass's log) after checking every output against the reference and
    against the same build without the pass."""
    feeds = feeds_for(model)
    rt = pplpy.load(model.SerializeToString(), num_threads=threads, max_isa=isa)
    without = pplpy.load(model.SerializeToString(), num_threads=threads, max_isa=isa,
                         passes=WITHOUT)
    got, base = rt.run(feeds), without.run(feeds)
    for name, want in zip([o.name for o in model.graph.output],
                          ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[name], base[name], rtol=1e-5, atol=1e-6)
    log = dict(next(r for r in rt.result.pass_log if r.pass_id == "gather_rows_early").details)
    return rt, log


def mlp(g, x):
    """LayerNorm -> MatMul + bias -> Gelu -> MatMul + bias, plus a residual Add."""
    h = g.op("LayerNormalization", x, g.c(np.ones(HID)), g.c(np.zeros(HID)), axis=-1)
    h = g.op("Gelu", g.op("Add", g.op("MatMul", h, g.w(HID, 24)), g.w(24)))
    return g.op("Add", x, g.op("Add", g.op("MatMul", h, g.w(24, HID)), g.w(HID)))


@pytest.mark.parametrize("indices", [0, -1, [0, 3], [-1]])
def test_rows_move_above_a_residual_mlp(isa, indices):
    g = G()
    rt, log = check(g.model(mlp(g, "x"), indices), isa)
    assert log["rows gathered before MatMulBias"] == 2
    assert log["rows gathered before Gelu"] == 1
    assert log["rows gathered before LayerNormalization"] == 1
    assert log["rows gathered before Add"] == 1
    assert log.get("scalar index kept as an axis", 0) == (np.ndim(indices) == 0)
    rows = 1 if np.ndim(indices) == 0 else len(indices)
    for node in rt.graph.nodes:  # every GEMM computes the kept rows only
        if node.op_type == "MatMulBias":
            assert rt.graph.values[node.outputs[0]].dims[1] == rows


def test_rows_move_above_an_rms_norm(isa):
    g = G()
    h = g.op("RMSNormalization", "x", g.c(RNG.standard_normal(HID)), axis=-1)
    _, log = check(g.model(g.op("Mul", h, g.c(RNG.standard_normal((1, S, HID)))), [-2, 0]),
                   isa)
    assert log == {"rows gathered before Mul": 1, "rows gathered before RMSNormalization": 1}


def test_rows_move_in_an_unfused_build_too():
    # Moving rows merges no layers: fusion=False (pplnn --disable-fusion) keeps the pass,
    # through the ops that build has (MatMul and Add apart, no MatMulBias).
    g = G()
    model = g.model(mlp(g, "x"), 0)
    feeds = feeds_for(model)
    rt = pplpy.load(model.SerializeToString(), fusion=False)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    log = dict(next(r for r in rt.result.pass_log if r.pass_id == "gather_rows_early").details)
    assert log["rows gathered before MatMul"] == 2 and log["rows gathered before Gelu"] == 1
    assert "rows gathered before MatMulBias" not in log


def test_broadcast_operands_stay_and_full_ones_are_gathered(isa):
    # Add of a constant with the axis (folded to its rows), Mul of one without it, Sub of an
    # input broadcast along it (size 1), Where with a condition that has it (gathered).
    g = G()
    g.inputs += [("z", F, [B, 1, HID]), ("cond", BOOL, [B, S, HID])]
    v = g.op("Add", "x", g.c(RNG.standard_normal((1, S, HID))))
    v = g.op("Sub", g.op("Mul", v, g.c(RNG.standard_normal(HID))), "z")
    v = g.op("Relu", g.op("Where", "cond", v, g.c(0.5)))
    rt, log = check(g.model(v, [1, 4]), isa)
    assert log == {"rows gathered before Relu": 1, "rows gathered before Where": 1,
                   "rows gathered before Sub": 1, "rows gathered before Mul": 1,
                   "rows gathered before Add": 1}
    gathers = [n for n in rt.graph.nodes if n.op_type == "Gather"]
    assert sorted(n.inputs[0] for n in gathers) == ["cond", "x"]  # z broadcasts: left whole


@pytest.mark.parametrize("mask", [None, "float2d", "bool4d", "keys"])
def test_attention_computes_the_kept_queries_only(isa, mask):
    g = G()
    q, k, v = (g.op("MatMul", "x", g.w(HID, HID)) for _ in range(3))
    extra = []
    if mask == "float2d":  # (queries, keys): its query axis is gathered
        g.inputs.append(("mask", F, [S, S]))
    elif mask == "bool4d":
        g.inputs.append(("mask", BOOL, [B, 1, S, S]))
    elif mask == "keys":  # (batch, 1, 1, keys): broadcast along the queries, left whole
        g.inputs.append(("mask", F, [B, 1, 1, S]))
    if mask:
        extra = ["mask"]
    y = g.op("Attention", q, k, v, *extra, q_num_heads=4, kv_num_heads=4)
    rt, log = check(g.model(y, [2, 6]), isa)
    # the query projection (a MatMul: no bias) computes the kept rows, K and V every row
    assert log == {"rows gathered before Attention": 1, "rows gathered before MatMul": 1}
    (attn,) = [n for n in rt.graph.nodes if n.op_type == "Attention"]
    assert rt.graph.values[attn.inputs[0]].dims[1] == 2  # two query rows
    assert rt.graph.values[attn.inputs[1]].dims[1] == S  # every key
    if mask in ("float2d", "bool4d"):
        assert rt.graph.values[attn.inputs[3]].dims[-2] == 2


def test_vit_classifier_computes_its_last_layer_for_the_class_token(isa):
    model = gb.vit_model(layers=2, hidden=32, heads=4, ffn=64, image=16, patch=8, classes=5,
                         batch=2)
    feeds = {"pixel_values": RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    rt = pplpy.load(model.SerializeToString(), num_threads=2, max_isa=isa)
    base = pplpy.load(model.SerializeToString(), num_threads=2, max_isa=isa, passes=WITHOUT)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(rt.run(feeds)["output"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rt.run(feeds)["output"], base.run(feeds)["output"],
                               rtol=1e-5, atol=1e-6)
    log = dict(next(r for r in rt.result.pass_log if r.pass_id == "gather_rows_early").details)
    # final norm + residual, the MLP's two GEMMs and GELU, the norm + residual before them,
    # the output projection, the attention and its query projection
    assert log == {"scalar index kept as an axis": 1,
                   "rows gathered before AddLayerNormalization": 2,
                   "rows gathered before MatMulBias": 4, "rows gathered before Gelu": 1,
                   "rows gathered before Attention": 1}
    kinds = [n.op_type for n in rt.graph.nodes]
    assert kinds.count("PackedAttention") == 1 and kinds.count("Attention") == 1
    # the first layer stays packed (5 tokens); the last one's GEMMs: K and V whole, the rest
    # on the class token alone
    rows = sorted(rt.graph.values[n.outputs[0]].dims[1] for n in rt.graph.nodes
                  if n.op_type == "MatMulBias")
    assert rows == [1, 1, 1, 1, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize("case", [
    "read-elsewhere", "graph-output", "last-axis", "causal", "batched-b", "norm-over-axis",
    "computed-indices", "reshape"])
def test_near_misses_keep_their_gather(case):
    g = G()
    axis, indices, extra = 1, 0, ()
    if case == "read-elsewhere":  # the LayerNorm's output is also read by a Relu
        h = g.op("LayerNormalization", "x", g.c(np.ones(HID)), g.c(np.zeros(HID)))
        g.op("Relu", h)
        g.nodes[-1].output[0] = "r"
        extra = ("r",)
    elif case == "graph-output":
        h = g.op("Relu", "x")
        g.nodes[-1].output[0] = h = "h"
        extra = ("h",)
    elif case == "last-axis":
        h, axis = g.op("Relu", "x"), 2
    elif case == "causal":
        q, k, v = (g.op("MatMul", "x", g.w(HID, HID)) for _ in range(3))
        h = g.op("Attention", q, k, v, q_num_heads=4, kv_num_heads=4, is_causal=1)
    elif case == "batched-b":  # B has the batch axis: rows of A alone are not enough
        g.inputs.append(("b3", F, [B, HID, HID]))
        h, axis = g.op("MatMul", "x", "b3"), 0
    elif case == "norm-over-axis":  # normalised over S and HID: S is not a row axis
        h = g.op("LayerNormalization", "x", g.c(np.ones((S, HID))), g.c(np.zeros((S, HID))),
                 axis=1)
    elif case == "computed-indices":
        g.inputs.append(("i", TensorProto.INT64, []))
        h = g.op("Relu", "x")
    elif case == "reshape":  # not row-wise: rows of the result are not rows of x
        h = g.op("Reshape", "x", g.c([B, HID, S], np.int64))
    model = g.model(h, indices, axis, extra)
    if case == "computed-indices":
        model.graph.node[-1].input[1] = "i"
    feeds = feeds_for(model)
    if case == "computed-indices":
        feeds["i"] = np.array(3, np.int64)
    rt = pplpy.load(model.SerializeToString(), num_threads=1)
    wants = ReferenceEvaluator(model).run(None, feeds)
    got = rt.run(feeds)
    for name, want in zip([o.name for o in model.graph.output], wants):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)
    log = dict(next(r for r in rt.result.pass_log if r.pass_id == "gather_rows_early").details)
    assert log == {}


def test_a_norm_whose_residual_sum_is_read_elsewhere_keeps_its_gather():
    # Add -> LayerNorm becomes AddLayerNormalization with the sum as a second output, which a
    # Relu also reads: the norm's rows cannot move, and the Gather is left as it was (no
    # Squeeze of a kept axis that would never move either).
    g = G()
    g.inputs.append(("z", F, [B, S, HID]))
    s = g.op("Add", "x", "z")
    h = g.op("LayerNormalization", s, g.c(np.ones(HID)), g.c(np.zeros(HID)), axis=-1)
    g.nodes.append(helper.make_node("Relu", [s], ["r"]))
    rt, log = check(g.model(h, 0, extra_outputs=("r",)))
    assert log == {}
    kinds = [n.op_type for n in rt.graph.nodes]
    assert "AddLayerNormalization" in kinds and "Gather" in kinds and "Squeeze" not in kinds


def test_an_index_out_of_range_is_refused_as_without_the_pass():
    g = G()
    model = g.model(g.op("Relu", "x"), S)  # rows 0..S-1
    for passes in (None, WITHOUT):
        with pytest.raises(PplError, match="[Ii]ndex|out of range|bounds"):
            rt = pplpy.load(model.SerializeToString(), passes=passes)
            rt.run(feeds_for(model))


def test_saved_and_reloaded(tmp_path):
    model = gb.vit_model(layers=2, hidden=32, heads=4, ffn=64, image=16, patch=8, classes=5,
                         batch=1)
    src, out = tmp_path / "vit.onnx", tmp_path / "vit.opt.onnx"
    onnx.save(model, src)
    pplpy.save_optimized_model(str(src), str(out))
    feeds = {"pixel_values": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)}
    want = pplpy.load(str(src)).run(feeds)["output"]
    reloaded = pplpy.load(str(out))
    np.testing.assert_array_equal(reloaded.run(feeds)["output"], want)
    log = dict(next(r for r in reloaded.result.pass_log
                    if r.pass_id == "gather_rows_early").details)
    assert log == {}  # nothing left to move


# -- property: random row-wise DAGs ending in a Gather ------------------------------------------

PROP_UNARY = ["Relu", "Sigmoid", "Neg", "Tanh", "Gelu"]
PROP_BINARY = ["Add", "Mul", "Sub", "Max"]


@st.composite
def gathered_dags(draw):
    """Element-wise ops over x [B, S, HID] (a value may be read many times, or be an extra
    output), operands broadcast along the rows or not, a LayerNorm or MatMul now and then;
    last, a Gather of constant rows along axis 0 or 1."""
    g = G()
    values = ["x"]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "const", "norm", "matmul"]))
        src = draw(st.sampled_from(values))
        if kind == "unary":
            out = g.op(draw(st.sampled_from(PROP_UNARY)), src)
        elif kind == "binary":
            out = g.op(draw(st.sampled_from(PROP_BINARY)), src, draw(st.sampled_from(values)))
        elif kind == "const":
            shape = draw(st.sampled_from([(1, S, HID), (B, 1, HID), (HID,), (B, S, HID)]))
            out = g.op(draw(st.sampled_from(PROP_BINARY)), src,
                       g.c(RNG.standard_normal(shape)))
        elif kind == "norm":
            out = g.op("LayerNormalization", src, g.c(np.ones(HID)), g.c(np.zeros(HID)))
        else:
            out = g.op("Add", g.op("MatMul", src, g.w(HID, HID)), g.w(HID))
        values.append(out)
    axis = draw(st.sampled_from([0, 1]))
    n = B if axis == 0 else S
    indices = draw(st.one_of(st.integers(-n, n - 1),
                             st.lists(st.integers(-n, n - 1), min_size=1, max_size=3)))
    extra = ()
    if len(values) > 2 and draw(st.booleans()):  # an intermediate is also a graph output
        inner = draw(st.sampled_from(values[1:-1]))
        g.nodes.append(helper.make_node("Identity", [inner], ["also"]))
        extra = ("also",)
    return g.model(values[-1], indices, axis, extra)


@settings(max_examples=40, deadline=None)
@given(gathered_dags())
def test_random_dags_compute_what_they_do_without_the_pass(m):
    feeds = feeds_for(m)
    got = pplpy.load(m.SerializeToString(), num_threads=1).run(feeds)
    plain = pplpy.load(m.SerializeToString(), num_threads=1, passes=WITHOUT).run(feeds)
    for name in plain:
        np.testing.assert_allclose(got[name], plain[name], rtol=1e-5, atol=1e-5)


def test_a_producer_whose_output_is_a_graph_output_stays():
    """Add + LayerNorm fuse into AddLayerNormalization with two outputs; the norm's (named
    "also" once the Identity goes) is a graph output read by no node, and the pass moved the
    producer above the Gather of the other output, renaming that output: "also" had no
    producer and the run failed with an internal KeyError (found by the property below)."""
    shape = [B, S, HID]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["s"]),
         helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["n"], axis=-1),
         helper.make_node("Relu", ["s"], ["r"]),
         helper.make_node("Identity", ["n"], ["also"]),
         helper.make_node("Gather", ["r", "i"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "also")],
        [numpy_helper.from_array(np.ones(HID, np.float32), "scale"),
         numpy_helper.from_array(np.zeros(HID, np.float32), "bias"),
         numpy_helper.from_array(np.array(0, np.int64), "i")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    got = pplpy.load(m.SerializeToString(), num_threads=1).run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for name, value in zip(("y", "also"), want):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)
