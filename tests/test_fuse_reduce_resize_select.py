"""oneDNN Graph's fusion patterns Reduction + [Unary|Binary]*, Resize + [Unary|Binary]* and
MatMul + BiasAdd? + [Unary|Binary]* + Select as pplpy post-op chains (passes/fuse_post_ops.py,
impls/_post_chain_fp32.h), built as exporters spell them with onnx.helper: the fused node and
its post-ops are named, its outputs match onnx.reference and the unfused build (fusion=False)
under every ISA tier, in NDARRAY and (reductions and Resize after a Conv) N16CX; the fused
nodes survive pplpy.save_optimized_model (Reduce* in both opset forms: axes as an attribute
and as an input), and pplnn --dump-graph lists their chains."""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from pplpy.engines.x86.impls.post_ops import Broadcast, PostOp, PostOpKind

RNG = np.random.default_rng(29)
BOOL = TensorProto.BOOL
ELT, BIN, PRELU, SEL, SUM = (PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.PRELU,
                             PostOpKind.SELECT, PostOpKind.SUM)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op_type, inputs, output, **attrs):
    return helper.make_node(op_type, inputs, [output], **attrs)


def writer(rt, name):
    """The node writing value ``name``, through a Reorder."""
    (found,) = [n for n in rt.graph.nodes if name in n.outputs]
    return writer(rt, found.inputs[0]) if found.op_type == "Reorder" else found


def check(model, feeds, isa, tmp_path, producer, kinds, layout="ndarray"):
    """The fused build (1 and 2 threads: the same bits) leaves ``producer`` writing y with
    post-ops of ``kinds`` in ``layout``, and matches onnx.reference; so does the unfused
    one, which keeps the element-wise nodes.  Returns the fused runtime and node."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    atol = 1e-4 * max(1.0, float(np.abs(want).max()))
    results = []
    for threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=threads)
        fused = writer(rt, "y")
        assert fused.op_type == producer, [n.op_type for n in rt.graph.nodes]
        assert [e.kind for e in rt.result.ops[fused].post_ops] == kinds
        assert rt.graph.values[fused.outputs[0]].format.name == layout.upper()
        results.append(rt.run(feeds)["y"])
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=atol)
    np.testing.assert_array_equal(results[1], results[0])
    plain = pplpy.load(path, max_isa=isa, fusion=False)
    assert writer(plain, "y").op_type != producer
    np.testing.assert_allclose(plain.run(feeds)["y"], want, rtol=1e-4, atol=atol)
    return rt, fused


def inputs_of(feeds):
    return [(name, BOOL if v.dtype == np.bool_ else FLOAT, list(v.shape))
            for name, v in feeds.items()]


def reduce_nodes(op_type, src, out, axes, keepdims, opset):
    """A reduction in the spelling of ``opset``: axes as an attribute (before 18; ReduceSum
    before 13) or as an input."""
    as_input = opset >= (13 if op_type == "ReduceSum" else 18)
    if as_input:
        return [node(op_type, [src, "axes"], out, keepdims=keepdims)], [
            ("axes", np.array(axes, np.int64))]
    return [node(op_type, [src], out, axes=axes, keepdims=keepdims)], []


# Reductions: (x dims, axes, keepdims), none of them one the optimiser turns into a global
# pool (those chains are test_post_op_chains.py's).  Outputs, channels on axis 1: (2, 21, 1,
# 7); (2, 21, 3) reduced along the contiguous last axis (inner == 1: a thread's whole run at
# once); (2, 21) with one float a channel; (1, 21, 40) reduced over axis 0 (runs of 128
# crossing channel planes).
REDUCE_GEOMETRY = {
    "spatial": ((2, 21, 5, 7), [2], 1),
    "last": ((2, 21, 3, 37), [-1], 0),
    "middle": ((2, 5, 21), [1], 0),
    "leading": ((3, 21, 40), [0], 1),
}
# Chains after a reduction: t its output, r another reduction's output (per element), ch a
# constant per channel (axis 1), cv a per-channel graph input, s a scalar.
REDUCE_CHAINS = {
    "relu-add-ch-mul-s": ([node("Relu", ["t"], "u"), node("Add", ["u", "ch"], "v"),
                           node("Mul", ["s", "v"], "y")], [ELT, BIN, BIN]),
    "sigmoid-mul-r": ([node("Sigmoid", ["t"], "u"), node("Mul", ["u", "r"], "y")],
                      [ELT, BIN]),
    "sum-r-prelu-cv-max-s": ([node("Add", ["r", "t"], "u"), node("PRelu", ["u", "cv"], "v"),
                              node("Max", ["v", "s"], "y")], [SUM, PRELU, BIN]),
}


def channel_shape(out_dims):
    """A per-channel operand's dims for an output of ``out_dims`` (channels on axis 1)."""
    return (out_dims[1],) + (1,) * (len(out_dims) - 2)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("geometry", sorted(REDUCE_GEOMETRY))
@pytest.mark.parametrize("op_type,opset", [("ReduceMean", 13), ("ReduceMean", 18),
                                           ("ReduceSum", 13), ("ReduceMax", 18),
                                           ("ReduceL2", 17), ("ReduceLogSumExp", 18)])
@pytest.mark.parametrize("chain", sorted(REDUCE_CHAINS))
def test_reduce_chains(isa, geometry, op_type, opset, chain, tmp_path):
    dims, axes, keepdims = REDUCE_GEOMETRY[geometry]
    tail, kinds = REDUCE_CHAINS[chain]
    t_nodes, inits = reduce_nodes(op_type, "x", "t", axes, keepdims, opset)
    r_nodes, _ = reduce_nodes(op_type, "x2", "r", axes, keepdims, opset)
    out = ReferenceEvaluator(make_model(t_nodes, [("x", FLOAT, list(dims))], [("t", FLOAT, None)],
                                        inits, opset=opset)).run(None, {"x": rand(*dims)})[0]
    feeds = {"x": rand(*dims), "x2": rand(*dims), "cv": rand(*channel_shape(out.shape))}
    inits = inits + [("ch", rand(*channel_shape(out.shape))), ("s", np.float32(0.3))]
    model = make_model(t_nodes + r_nodes + tail, inputs_of(feeds), [("y", FLOAT, None)],
                       inits, opset=opset)
    check(model, feeds, isa, tmp_path, op_type, kinds)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_chain_in_n16cx(isa, opset, tmp_path):
    """A ReduceMean over W after a Conv stays N16CX, its chain too (21 channels: a partial
    block, whose padding lanes the chain leaves alone)."""
    c = 21
    t_nodes, inits = reduce_nodes("ReduceMean", "h", "t", [3], 1, opset)
    r_nodes, _ = reduce_nodes("ReduceMean", "h2", "r", [3], 1, opset)
    tail = [node("Mul", ["t", "ch"], "u"), node("Add", ["u", "r"], "v"),
            node("Relu", ["v"], "y")]
    feeds = {"x": rand(2, c, 6, 5), "x2": rand(2, c, 6, 5)}
    inits = inits + [("w", rand(c, c, 1, 1)), ("ch", rand(c, 1, 1))]
    model = make_model([node("Conv", ["x", "w"], "h"), node("Conv", ["x2", "w"], "h2")]
                       + t_nodes + r_nodes + tail, inputs_of(feeds), [("y", FLOAT, None)],
                       inits, opset=opset)
    check(model, feeds, isa, tmp_path, "ReduceMean", [BIN, SUM, ELT], layout="n16cx")


# Resize: scales or sizes, nearest or linear; upsampling H and W (the last pass along W:
# inner == 1 in NDARRAY, rows of 16 lanes in N16CX) or H alone (rows of W floats).
RESIZE_FORMS = {
    "linear-hw": (dict(mode="linear"), [1, 1, 2, 2]),
    "nearest-h": (dict(mode="nearest"), [1, 1, 3, 1]),
    "cubic-hw": (dict(mode="cubic", coordinate_transformation_mode="align_corners"),
                 [1, 1, 1.5, 2.5]),
}
RESIZE_CHAINS = {
    "relu-mul-ch": ([node("Relu", ["t"], "u"), node("Mul", ["u", "ch"], "y")], [ELT, BIN]),
    "add-r-min-s-abs": ([node("Add", ["t", "r"], "u"), node("Min", ["u", "s"], "v"),
                         node("Abs", ["v"], "y")], [SUM, BIN, ELT]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["ndarray", "n16cx"])
@pytest.mark.parametrize("form", sorted(RESIZE_FORMS))
@pytest.mark.parametrize("chain", sorted(RESIZE_CHAINS))
def test_resize_chains(isa, layout, form, chain, tmp_path):
    c = 21
    attrs, scales = RESIZE_FORMS[form]
    tail, kinds = RESIZE_CHAINS[chain]
    if layout == "n16cx":
        head, src, src2 = [node("Conv", ["x", "w"], "h"), node("Conv", ["x2", "w"], "h2")], \
            "h", "h2"
    else:
        head, src, src2 = [], "x", "x2"
    nodes = head + [node("Resize", [src, "", "sc"], "t", **attrs),
                    node("Resize", [src2, "", "sc"], "r", **attrs)] + tail
    feeds = {"x": rand(2, c, 5, 6), "x2": rand(2, c, 5, 6)}
    inits = [("w", rand(c, c, 1, 1)), ("sc", np.array(scales, np.float32)),
             ("ch", rand(c, 1, 1)), ("s", np.float32(0.4))]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=19)
    check(model, feeds, isa, tmp_path, "Resize", kinds, layout=layout)


# MatMul (+ bias) + activations + Where: the running value on either side of the Where; the
# condition per element (a graph input) or per column (a constant), the other value a
# scalar (an attention mask's -1e4) or per element.  cv: a per-column graph input (a
# constant Mul right after the MatMul would be folded into its weights).
SELECT_CHAINS = {
    "where-x-s": ([node("Relu", ["t"], "u"), node("Where", ["cond", "u", "neg"], "y")],
                  [ELT, SEL]),
    "where-e-x": ([node("Mul", ["t", "cv"], "u"), node("Where", ["cond", "e", "u"], "y")],
                  [BIN, SEL]),
    "where-colmask-x-e": ([node("Tanh", ["t"], "u"), node("Add", ["u", "ch"], "v"),
                           node("Where", ["colmask", "v", "e"], "y")], [ELT, BIN, SEL]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("producer", ["MatMul", "MatMulBias", "Gemm"])
@pytest.mark.parametrize("chain", sorted(SELECT_CHAINS))
def test_matmul_select_chains(isa, producer, chain, tmp_path):
    m, k, n = 19, 40, 37
    tail, kinds = SELECT_CHAINS[chain]
    lead = () if producer == "Gemm" else (2,)
    feeds = {"a": rand(*lead, m, k), "e": rand(*lead, m, n), "cv": rand(n),
             "cond": RNG.random((*lead, m, n)) < 0.5}
    inits = [("bw", rand(k, n)), ("ch", rand(n)), ("neg", np.float32(-1e4)),
             ("colmask", RNG.random(n) < 0.5)]
    if producer == "Gemm":
        head = [node("Gemm", ["a", "bw", "bias"], "t", alpha=0.5)]
        inits.append(("bias", rand(n)))
    elif producer == "MatMulBias":  # the optimiser makes it from MatMul + Add(bias)
        head = [node("MatMul", ["a", "bw"], "mm"), node("Add", ["mm", "bias"], "t")]
        inits.append(("bias", rand(n)))
    else:
        head = [node("MatMul", ["a", "bw"], "t")]
    model = make_model(head + tail, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=20)
    _, fused = check(model, feeds, isa, tmp_path, producer, kinds)


def test_select_entry_names_its_condition_and_broadcasts(tmp_path):
    feeds = {"a": rand(2, 5, 8), "cond": RNG.random((2, 5, 6)) < 0.5}
    model = make_model([node("MatMul", ["a", "bw"], "t"),
                        node("Where", ["colmask", "neg", "t"], "y")],
                       inputs_of(feeds), [("y", FLOAT, None)],
                       [("bw", rand(8, 6)), ("neg", np.float32(-3)),
                        ("colmask", RNG.random(6) < 0.5)], opset=20)
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    fused = writer(rt, "y")
    (entry,) = rt.result.ops[fused].post_ops
    assert (entry.kind, entry.broadcast, entry.condition_broadcast) == (
        SEL, Broadcast.SCALAR, Broadcast.CHANNEL)
    assert fused.inputs[entry.condition] == "colmask" and fused.inputs[entry.operand] == "neg"
    assert entry.describe(fused.inputs) == "select(colmask, channel: neg, x, scalar)"


def test_where_that_widens_the_output_does_not_fuse(tmp_path):
    """A condition of more dims than the MatMul's output would broadcast it: no select."""
    feeds = {"a": rand(5, 8), "cond": RNG.random((3, 5, 6)) < 0.5}
    model = make_model([node("MatMul", ["a", "bw"], "t"),
                        node("Where", ["cond", "t", "neg"], "y")],
                       inputs_of(feeds), [("y", FLOAT, None)],
                       [("bw", rand(8, 6)), ("neg", np.float32(-3))], opset=20)
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    assert writer(rt, "y").op_type == "Where"
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-5)


def saved_and_reloaded(model, feeds, tmp_path):
    """The model's fused runtime and its saved-and-reloaded twin give the same bits; returns
    the saved ModelProto and the reloaded runtime."""
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    pplpy.save_optimized_model(tmp_path / "m.onnx", tmp_path / "saved.onnx")
    saved = onnx.load(tmp_path / "saved.onnx")
    back = pplpy.load(tmp_path / "saved.onnx")
    np.testing.assert_array_equal(back.run(feeds)["y"], rt.run(feeds)["y"])
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)
    return saved, back


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_reduce_twin_round_trips_both_axes_forms(opset, tmp_path):
    """ReduceMean with axes as an attribute (13, 17: the twin says which opset it stands for)
    or as an input (18) is saved as pplpy::ReduceMean with its chain and reads back the same."""
    t_nodes, inits = reduce_nodes("ReduceMean", "x", "t", [1], 0, opset)
    feeds = {"x": rand(2, 9, 4, 3), "cv": rand(4, 1)}
    model = make_model(t_nodes + [node("Mul", ["t", "cv"], "u"), node("Elu", ["u"], "y")],
                       inputs_of(feeds), [("y", FLOAT, None)], inits, opset=opset)
    saved, back = saved_and_reloaded(model, feeds, tmp_path)
    (twin,) = [n for n in saved.graph.node if n.op_type == "ReduceMean"]
    attrs = {a.name: helper.get_attribute_value(a) for a in twin.attribute}
    assert twin.domain == "pplpy" and attrs["post_ops"] == [b"binary_mul", b"elu"]
    assert attrs.get("onnx_opset") == (opset if opset < 18 else None)
    assert ("axes" in attrs) == (opset < 18)
    (fused,) = [n for n in back.graph.nodes if n.op_type == "ReduceMean"]
    assert [e.kind for e in back.result.ops[fused].post_ops] == [BIN, ELT]


@pytest.mark.parametrize("opset", [13, 19])
def test_resize_twin_round_trips(opset, tmp_path):
    feeds = {"x": rand(1, 3, 4, 5)}
    model = make_model([node("Resize", ["x", "", "sc"], "t", mode="linear"),
                        node("Sigmoid", ["t"], "u"), node("Add", ["u", "s"], "y")],
                       inputs_of(feeds), [("y", FLOAT, None)],
                       [("sc", np.array([1, 1, 2, 1.5], np.float32)), ("s", np.float32(2))],
                       opset=opset)
    saved, _ = saved_and_reloaded(model, feeds, tmp_path)
    (twin,) = [n for n in saved.graph.node if n.op_type == "Resize"]
    assert twin.domain == "pplpy"


def test_select_twin_round_trips(tmp_path):
    feeds = {"a": rand(2, 5, 8), "cond": RNG.random((2, 5, 6)) < 0.5}
    model = make_model([node("MatMul", ["a", "bw"], "t"), node("Relu", ["t"], "u"),
                        node("Where", ["cond", "neg", "u"], "y")],
                       inputs_of(feeds), [("y", FLOAT, None)],
                       [("bw", rand(8, 6)), ("neg", np.float32(-3))], opset=20)
    saved, _ = saved_and_reloaded(model, feeds, tmp_path)
    (twin,) = [n for n in saved.graph.node if n.op_type == "MatMul"]
    attrs = {a.name: helper.get_attribute_value(a) for a in twin.attribute}
    assert attrs["post_ops"] == [b"relu", b"select_swapped"]
    assert list(twin.input[attrs["post_op_conditions"][1]:][:1]) == ["cond"]


def test_dump_graph_lists_reduce_resize_and_select_chains(tmp_path):
    from pplpy.tools.pplnn import format_graph
    t_nodes, inits = reduce_nodes("ReduceMax", "x", "t", [3], 1, 18)
    feeds = {"x": rand(1, 4, 6, 6), "cond": RNG.random((1, 4, 12, 3)) < 0.5}
    nodes = t_nodes + [node("Relu", ["t"], "u"),
                       node("Resize", ["u", "", "sc"], "v"), node("Neg", ["v"], "w"),
                       node("MatMul", ["w", "bw"], "z"),
                       node("Where", ["cond", "z", "neg"], "y")]
    inits = inits + [("sc", np.array([1, 1, 2, 2], np.float32)), ("bw", rand(2, 3)),
                     ("neg", np.float32(-1))]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=19)
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-5)
    text = format_graph(rt.graph, ops=rt.result.ops)
    chains, current = {}, None
    for line in text.splitlines():  # a node's header line, then its indented description
        words = line.split()
        if words and words[0].isdigit():
            current = words[1]
        elif words[:1] == ["post-ops"]:
            chains[current] = line.split("post-ops", 1)[1].strip()
    assert chains == {"ReduceMax": "relu", "Resize": "neg",
                      "MatMul": "select(cond, element: x, neg, scalar)"}, text


def test_activation_table_is_one_x_macro():
    """_activation_fp32.h's PPL_FOR_EACH_ACTIVATION names every PostOp code but NONE, and
    the kernels that switch on codes expand it rather than a list of their own."""
    impls = Path(pplpy.__file__).parent / "engines" / "x86" / "impls"
    header = (impls / "_activation_fp32.h").read_text()
    body = re.search(r"#define PPL_FOR_EACH_ACTIVATION\(X\)((?:.*\\\n)*.*)", header).group(1)
    assert re.findall(r"X\((\w+)\)", body) == [c.name for c in PostOp if c is not PostOp.NONE]
    chain = (impls / "_post_chain_fp32.h").read_text()
    assert "PPL_FOR_EACH_ACTIVATION(PPL_PC_ACT)" in chain and "PPL_PC_ACT(RELU)" not in chain
    assert "PPL_FOR_EACH_ACTIVATION(PPL_ACT_CASE)" in header


def twin_model(op_type, inputs, inits, **attrs):
    """A hand-written model of one pplpy::<op_type> twin reading x (1, 2, 3, 4)."""
    twin = helper.make_node(op_type, ["x", *inputs], ["y"], domain="pplpy", **attrs)
    return make_model([twin], [("x", FLOAT, [1, 2, 3, 4])], [("y", FLOAT, None)], inits,
                      opset=19, extra_opsets=[("pplpy", 1)])


@pytest.mark.parametrize("attrs,message", [
    (dict(onnx_opset=10), "cannot stand for Resize-10"),  # Resize10Op: another op context
    (dict(post_ops=["select"], post_op_params=[0.0, 0.0], post_op_operands=[4],
          post_op_broadcasts=[0]), "needs a condition input"),
    (dict(post_ops=["relu"], post_op_params=[0.0, 0.0], post_op_operands=[-1],
          post_op_broadcasts=[0], post_op_conditions=[3], post_op_condition_broadcasts=[0]),
     "takes no condition input"),
])
def test_a_bad_twin_is_a_model_error(attrs, message):
    model = twin_model("Resize", ["", "sc"], [("sc", np.array([1, 1, 2, 2], np.float32))],
                       **attrs)
    with pytest.raises(pplpy.ModelError, match=message):
        pplpy.load(model.SerializeToString())


def test_a_hand_written_reduce_twin_of_an_older_form_runs():
    """pplpy::ReduceMean with onnx_opset 13 reads its axes attribute as ReduceMean-13 does."""
    model = twin_model("ReduceMean", [], [], onnx_opset=13, axes=[1, 3], keepdims=0,
                       post_ops=["neg"], post_op_params=[0.0, 0.0], post_op_operands=[-1],
                       post_op_broadcasts=[0])
    x = rand(1, 2, 3, 4)
    got = pplpy.load(model.SerializeToString()).run({"x": x})["y"]
    np.testing.assert_allclose(got, -x.mean(axis=(1, 3)), rtol=1e-5, atol=1e-6)
