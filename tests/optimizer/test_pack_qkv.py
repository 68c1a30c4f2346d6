"""pack_qkv and pplpy::PackedAttention: self-attention whose Q, K, V come from one Split of a
projection (GPT-2) or from three projections of one input (BERT, ViT), built with
onnx.helper as an opset-23 Attention in its 3-D form.  Each positive case checks the graph
pplpy runs and the outputs against ``onnx.reference.ReferenceEvaluator`` on the original
model, on every ISA tier; each near miss must keep its Attention and still match.
"""

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.errors import PplError

F = TensorProto.FLOAT
B, S, HIDDEN = 2, 9, 32
RNG = np.random.default_rng(11)


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes, inits, inputs, opset=23, extra_outputs=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(o, F, None) for o in ("y", *extra_outputs)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _attention(q, k, v, mask=None, q_heads=4, kv_heads=4, **attrs):
    """Attention in the 3-D form; ``mask`` (a kind or None) reads the input "mask"."""
    inputs = [q, k, v] + (["mask"] if mask else [])
    return helper.make_node("Attention", inputs, ["y"], q_num_heads=q_heads,
                            kv_num_heads=kv_heads, **attrs)


def _weights(widths):
    return [(RNG.standard_normal((HIDDEN, w)) / np.sqrt(HIDDEN)).astype(np.float32)
            for w in widths]


def split_model(widths=(32, 32, 32), mask=None, **attn):
    """x -> MatMul(W) + b -> Split(widths) -> Attention (GPT-2's form)."""
    w = np.concatenate(_weights(widths), axis=1)
    inits = [_const("w", w), _const("b", (0.1 * RNG.standard_normal(w.shape[1])).astype(
        np.float32)), _const("sizes", np.array(widths, np.int64))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["qkv"]),
             helper.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=2),
             _attention("q", "k", "v", mask, **attn)]
    inputs = [("x", F, [B, S, HIDDEN])]
    if mask is not None:
        inputs.append(mask_input(mask))
    return _model(nodes, inits, inputs)


def projections_model(widths=(32, 32, 32), mask=None, q_input="x", unbiased="", q_scale=None,
                      **attn):
    """Q, K, V = x @ W + b each (BERT's form); Q's projection may read another input; the
    projections named in ``unbiased`` have no bias (T5, Whisper's keys); ``q_scale``
    multiplies Q after its bias (BART's and Whisper's ``q_proj(x) * scaling``)."""
    nodes, inits = [], []
    for name, w in zip("qkv", _weights(widths)):
        inits.append(_const(f"w{name}", w))
        src = q_input if name == "q" else "x"
        out = "q_unscaled" if name == "q" and q_scale is not None else name
        if name in unbiased:
            nodes.append(helper.make_node("MatMul", [src, f"w{name}"], [out]))
        else:
            inits.append(_const(f"b{name}", (0.1 * RNG.standard_normal(w.shape[1])).astype(
                np.float32)))
            nodes += [helper.make_node("MatMul", [src, f"w{name}"], [f"m{name}"]),
                      helper.make_node("Add", [f"m{name}", f"b{name}"], [out])]
        if out != name:
            inits.append(_const("q_scale", np.asarray(q_scale, np.float32)))
            nodes.append(helper.make_node("Mul", [out, "q_scale"], [name]))
    nodes.append(_attention("q", "k", "v", mask, **attn))
    inputs = [("x", F, [B, S, HIDDEN])]
    if q_input != "x":
        inputs.append((q_input, F, [B, S, HIDDEN]))
    if mask is not None:
        inputs.append(mask_input(mask))
    return _model(nodes, inits, inputs)


def mask_input(kind):
    return ("mask", TensorProto.BOOL if kind == "bool" else F, [B, 1, S, S])


def feeds_for(model):
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.BOOL:
            feeds[value.name] = RNG.random(dims) > 0.3
        else:
            feeds[value.name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


def ops(rt):
    return Counter(n.op_type for n in rt.graph.nodes)


def check(model, isa="avx512", threads=1):
    """The runtime, after checking its output against the reference on the model."""
    feeds = feeds_for(model)
    rt = pplpy.load(model.SerializeToString(), num_threads=threads, max_isa=isa)
    (want,) = ReferenceEvaluator(model).run(["y"], feeds)
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    return rt


def pack_log(rt):
    return dict(next(r for r in rt.result.pass_log if r.pass_id == "pack_qkv").details)


@pytest.mark.parametrize("mask, attn", [
    (None, {}),
    ("bool", {}),
    ("float", {"scale": 0.3}),
    (None, {"is_causal": 1}),
])
def test_split_form(isa, mask, attn):
    rt = check(split_model(mask=mask, **attn), isa)
    assert pack_log(rt) == {"Split+Attention->PackedAttention": 1}
    types = ops(rt)
    assert types["PackedAttention"] == 1 and not {"Split", "Attention"} & set(types)


@pytest.mark.parametrize("mask, attn", [(None, {}), ("float", {}), (None, {"is_causal": 1})])
def test_projections_form(isa, mask, attn):
    rt = check(projections_model(mask=mask, **attn), isa)
    assert pack_log(rt) == {"3 MatMulBias+Attention->MatMulBias+PackedAttention": 1}
    types = ops(rt)
    assert types == {"MatMulBias": 1, "PackedAttention": 1}
    (gemm,) = [n for n in rt.graph.nodes if n.op_type == "MatMulBias"]
    assert rt.graph.values[gemm.outputs[0]].dims[-1] == 3 * 32


@pytest.mark.parametrize("unbiased", ["k", "qkv"])
def test_projections_without_a_bias(isa, unbiased):
    """A projection with no bias (a plain MatMul of the same input) counts, with a zero
    bias: Whisper's key projection, all of T5's."""
    rt = check(projections_model(unbiased=unbiased), isa)
    assert pack_log(rt) == {"3 MatMulBias+Attention->MatMulBias+PackedAttention": 1}
    assert ops(rt) == {"MatMulBias": 1, "PackedAttention": 1}


@pytest.mark.parametrize("q_scale", [0.125, np.linspace(0.5, 1.5, 32)])
def test_scaled_query_projection(isa, q_scale):
    """Q = (x @ Wq + bq) * scaling (BART, Whisper): fold_into_gemm's second run takes the
    scale into Wq and bq once fuse_matmul_bias has made the MatMulBias, so the three
    projections pack (a per-column scale too)."""
    rt = check(projections_model(q_scale=q_scale), isa)
    assert pack_log(rt) == {"3 MatMulBias+Attention->MatMulBias+PackedAttention": 1}
    assert ops(rt) == {"MatMulBias": 1, "PackedAttention": 1}
    folds = [r for r in rt.result.pass_log if r.pass_id == "fold_into_gemm"]
    assert [dict(r.details) for r in folds] == [{}, {"Mul->MatMulBias": 1}]


def test_grouped_query_widths(isa):
    """4 query heads over 2 KV heads: Q 32 wide, K and V 16 each."""
    for build in (split_model, projections_model):
        rt = check(build(widths=(32, 16, 16), kv_heads=2), isa)
        assert ops(rt)["PackedAttention"] == 1
        (node,) = [n for n in rt.graph.nodes if n.op_type == "PackedAttention"]
        assert node.param.qkv_hidden_sizes == (32, 16, 16)


def test_threads_agree():
    model = projections_model(mask="bool")
    feeds = feeds_for(model)
    one = pplpy.load(model.SerializeToString(), num_threads=1).run(feeds)["y"]
    two = pplpy.load(model.SerializeToString(), num_threads=2).run(feeds)["y"]
    np.testing.assert_array_equal(one, two)


def test_near_misses_keep_attention():
    # Q projected from another input: not one GEMM's output
    rt = check(projections_model(q_input="other"))
    assert ops(rt)["Attention"] == 1 and ops(rt)["MatMulBias"] == 3
    # Q also a graph output: the Split must write it
    model = split_model()
    model.graph.output.append(helper.make_tensor_value_info("q", F, None))
    feeds = feeds_for(model)
    rt = pplpy.load(model.SerializeToString(), num_threads=1)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = rt.run(feeds)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-5)
    assert ops(rt)["Attention"] == 1 and ops(rt)["Split"] == 1
    # an unfused build keeps the spelling
    unfused = pplpy.load(split_model().SerializeToString(), num_threads=1, fusion=False)
    assert "PackedAttention" not in ops(unfused) and ops(unfused)["Split"] == 1


def interleaved_model(head_widths=(8, 8, 16), heads=4, mask=None, back="transpose",
                      split_axis=3, extra_outputs=(), **attn):
    """LeViT's attention: x -> MatMul + b -> Reshape (B, S, H, dq + dk + dv) -> Split along
    the last axis -> Transpose(0, 2, 1, 3) each -> Attention (4-D form) -> Transpose back
    -> Reshape (B, S, H * dv).  ``mask``: None, "bias" (a constant (H, S, S) added to the
    scores, LeViT's attention biases) or "bool" (an input (B, 1, S, S))."""
    width = sum(head_widths)
    w = (RNG.standard_normal((HIDDEN, heads * width)) / np.sqrt(HIDDEN)).astype(np.float32)
    inits = [_const("w", w), _const("b", (0.1 * RNG.standard_normal(heads * width)).astype(
        np.float32)), _const("heads_shape", np.array([B, S, heads, width], np.int64)),
        _const("sizes", np.array(head_widths, np.int64)),
        _const("out_shape", np.array([B, S, heads * head_widths[2]], np.int64))]
    names = ["q", "k", "v"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["qkv"]),
             helper.make_node("Reshape", ["qkv", "heads_shape"], ["heads"])]
    if split_axis == 3:
        nodes.append(helper.make_node("Split", ["heads", "sizes"], [f"{n}_part" for n in names],
                                      axis=3))
        nodes += [helper.make_node("Transpose", [f"{n}_part"], [n], perm=[0, 2, 1, 3])
                  for n in names]
    else:  # heads transposed first, then split: not the interleaved spelling
        nodes += [helper.make_node("Transpose", ["heads"], ["heads_t"], perm=[0, 2, 1, 3]),
                  helper.make_node("Split", ["heads_t", "sizes"], names, axis=3)]
    inputs = [("x", F, [B, S, HIDDEN])]
    if mask == "bias":
        inits.append(_const("mask", RNG.standard_normal((heads, S, S)).astype(np.float32)))
    elif mask == "bool":
        inputs.append(mask_input("bool"))
    nodes.append(helper.make_node("Attention", names + (["mask"] if mask else []), ["att"],
                                  **attn))
    perm = [0, 2, 1, 3] if back == "transpose" else [0, 2, 3, 1]
    nodes += [helper.make_node("Transpose", ["att"], ["att_t"], perm=perm),
              helper.make_node("Reshape", ["att_t", "out_shape"], ["y"])]
    if back != "transpose":
        inits[-1] = _const("out_shape", np.array([B, S, -1], np.int64))
    return _model(nodes, inits, inputs, extra_outputs=extra_outputs)


@pytest.mark.parametrize("mask, attn", [(None, {}), ("bias", {"scale": 0.25}), ("bool", {}),
                                        (None, {"is_causal": 1})])
@pytest.mark.parametrize("head_widths", [(8, 8, 16), (16, 16, 16)])
def test_heads_interleaved_form(isa, mask, attn, head_widths):
    rt = check(interleaved_model(head_widths, mask=mask, **attn), isa)
    assert pack_log(rt) == {"Split+Transposes+Attention+Transpose->PackedAttention": 1}
    types = ops(rt)
    assert types["PackedAttention"] == 1
    assert not {"Split", "Transpose", "Attention"} & set(types), types
    (node,) = [n for n in rt.graph.nodes if n.op_type == "PackedAttention"]
    assert node.param.heads_interleaved == 1
    assert node.param.qkv_hidden_sizes == tuple(4 * w for w in head_widths)


def test_heads_interleaved_near_misses_keep_attention():
    for model in (interleaved_model(back="other"),        # the output goes elsewhere
                  interleaved_model(split_axis=1),        # heads transposed before the Split
                  interleaved_model(extra_outputs=("att",))):  # Attention's output read too
        rt = check(model)
        assert ops(rt)["Attention"] == 1 and "PackedAttention" not in ops(rt)


def _hand_written(sizes, width):
    """A model with a pplpy::PackedAttention written by hand over a (B, S, width) input."""
    node = helper.make_node("PackedAttention", ["qkv"], ["y"], domain="pplpy",
                            q_num_heads=4, kv_num_heads=4, qkv_hidden_sizes=list(sizes))
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("qkv", F, [B, S, width])],
                              [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("pplpy", 1)])


def test_hand_written_node_runs_and_checks_its_widths():
    model = _hand_written((32, 32, 32), 96)
    qkv = RNG.standard_normal((B, S, 96)).astype(np.float32)
    got = pplpy.load(model.SerializeToString(), num_threads=1).run({"qkv": qkv})["y"]
    q, k, v = np.split(qkv, 3, axis=2)
    ref = _model([_attention("q", "k", "v")], [], [(n, F, [B, S, 32]) for n in "qkv"])
    (want,) = ReferenceEvaluator(ref).run(None, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(PplError, match="widths"):
        pplpy.load(_hand_written((32, 32, 16), 96).SerializeToString())
    with pytest.raises(PplError, match="three positive widths"):
        pplpy.load(_hand_written((48, 48), 96).SerializeToString())


def test_heads_interleaved_saved_and_reloaded(tmp_path):
    model = interleaved_model(mask="bias")
    src, out = tmp_path / "m.onnx", tmp_path / "m.opt.onnx"
    src.write_bytes(model.SerializeToString())
    pplpy.save_optimized_model(str(src), str(out))
    feeds = feeds_for(model)
    reloaded = pplpy.load(str(out), num_threads=1)
    (node,) = [n for n in reloaded.graph.nodes if n.op_type == "PackedAttention"]
    assert node.param.heads_interleaved == 1
    np.testing.assert_array_equal(reloaded.run(feeds)["y"],
                                  pplpy.load(str(src), num_threads=1).run(feeds)["y"])
