"""Swish, SwiGLU, TensorScatter, CausalConvWithState, LinearAttention and FlexAttention
through pplpy.load, against onnx.reference on random inputs: every attribute and optional
input, every ISA tier, 1 and 2 threads (which must agree bit for bit); Swish and SwiGLU also
in N16CX behind a Conv, fused into its epilogue and not.  Bad shapes are pplpy ShapeErrors
naming the input; float16 is an UnsupportedOpError at load."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pplpy
from onnx_builders import ISAS, make_model

FLOAT, INT64, FLOAT16 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT16
_ELEM = {np.float32: FLOAT, np.int64: INT64, np.float16: FLOAT16, np.int32: TensorProto.INT32,
         np.uint8: TensorProto.UINT8}
_RNG = np.random.default_rng(11)
PREVIEW = "ai.onnx.preview"


def _f(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _vi(name, array):
    return (name, _ELEM[array.dtype.type], list(array.shape))


def _node_model(op_type, feeds, outputs, attrs, opset, domain="", extra_opsets=()):
    """A one-node model; ``feeds`` name -> array (None: the optional input is omitted)."""
    names = [name if value is not None else "" for name, value in feeds.items()]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, outputs, name="n", domain=domain, **attrs)
    present = {k: v for k, v in feeds.items() if v is not None}
    return make_model([node], [_vi(k, v) for k, v in present.items()],
                      [(o, 0, None) for o in outputs if o], opset=opset,
                      extra_opsets=extra_opsets), present


def _check(save_model, model, feeds, isa, rtol=1e-4, atol=1e-5, **load):
    with np.errstate(over="ignore"):  # exp overflows in the reference's sigmoid
        want = ReferenceEvaluator(model).run(None, feeds)
    path = save_model(model)
    results = []
    for threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=threads, **load)
        got = rt.run(feeds)
        for name, w in zip(rt.output_names, want):
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
        results.append(got)
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name])


def _fails(save_model, model, error, *words):
    with pytest.raises(error) as info:
        pplpy.load(save_model(model))
    for word in words:
        assert word in str(info.value)


# -- Swish and SwiGLU ----------------------------------------------------------------------

ALPHAS = [None, 0.5, -1.3, 0.0]


def _alpha(alpha):
    return {} if alpha is None else {"alpha": alpha}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_swish(save_model, isa, alpha):
    x = _f(3, 70) * 4
    x[0, :4] = [0.0, -100.0, 100.0, 1e-30]
    model, feeds = _node_model("Swish", {"x": x}, ["y"], _alpha(alpha), 24)
    _check(save_model, model, feeds, isa)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_swiglu(save_model, isa, alpha):
    model, feeds = _node_model("SwiGLU", {"a": _f(2, 5, 300) * 3, "b": _f(2, 5, 300)}, ["y"],
                               _alpha(alpha), 28)
    _check(save_model, model, feeds, isa)


def _conv_then(op_type, alpha, with_gate):
    """Conv (so N16CX arrives) -> op; SwiGLU gates one Conv's output with another's."""
    w1, w2 = _f(20, 3, 3, 3), _f(20, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])]
    inputs = ["c1"]
    if with_gate:
        nodes.append(helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1]))
        inputs.append("c2")
    nodes.append(helper.make_node(op_type, inputs, ["y"], **_alpha(alpha)))
    model = make_model(nodes, [("x", FLOAT, [1, 3, 6, 6])], [("y", FLOAT, None)],
                       [("w1", w1), ("w2", w2)] if with_gate else [("w1", w1)],
                       opset=28 if with_gate else 24)
    return model, {"x": _f(1, 3, 6, 6)}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("op_type", ["Swish", "SwiGLU"])
def test_swish_and_swiglu_n16cx(save_model, isa, fusion, op_type):
    model, feeds = _conv_then(op_type, 0.7, op_type == "SwiGLU")
    _check(save_model, model, feeds, isa, atol=1e-4, fusion=fusion)


def test_swiglu_bad_inputs(save_model):
    model, _ = _node_model("SwiGLU", {"a": _f(2, 4), "b": _f(2, 5)}, ["y"], {}, 28)
    _fails(save_model, model, pplpy.ShapeError, "A and B must have the same shape")
    model, _ = _node_model("SwiGLU", {"a": _f(2, 4).astype(np.float16),
                                      "b": _f(2, 4).astype(np.float16)}, ["y"], {}, 28)
    _fails(save_model, model, pplpy.UnsupportedOpError, "float16")


# -- TensorScatter -------------------------------------------------------------------------

SCATTER_CASES = {
    # name: (past shape, update shape, attributes, write indices)
    "default_axis_no_indices": ((2, 3, 8, 4), (2, 3, 3, 4), {}, None),
    "linear_indices": ((2, 3, 8, 4), (2, 3, 2, 4), {"mode": "linear"}, [0, 6]),
    "circular_wraps": ((2, 2, 5, 3), (2, 2, 3, 3), {"mode": "circular"}, [4, 1]),
    "axis_1": ((3, 6, 2, 5), (3, 2, 2, 5), {"axis": 1}, [1, 4, 0]),
    "axis_last_3d": ((2, 4, 9), (2, 4, 4), {"axis": -1, "mode": "circular"}, [7, 2]),
    "big_parallel": ((4, 8, 256, 64), (4, 8, 16, 64), {}, [0, 10, 100, 240]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", SCATTER_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_tensor_scatter(save_model, isa, case, dtype):
    past_shape, update_shape, attrs, indices = SCATTER_CASES[case]
    feeds = {"past": _f(*past_shape).astype(dtype), "update": _f(*update_shape).astype(dtype),
             "idx": None if indices is None else np.array(indices, np.int64)}
    model, feeds = _node_model("TensorScatter", feeds, ["present"], attrs, 24)
    _check(save_model, model, feeds, isa, rtol=0, atol=0)


def test_tensor_scatter_negative_and_bad_write_indices(save_model):
    """A negative linear write index counts from the end, as numpy; one whose rows leave the
    cache (the reference raises IndexError, ONNX Runtime refuses it) skips them, nothing is
    written out of bounds, and the run raises an InputError naming it."""
    past, update = _f(2, 1, 4, 2), _f(2, 1, 2, 2)
    model, feeds = _node_model("TensorScatter", {"past": past, "update": update,
                                                 "idx": np.array([1, -1], np.int64)},
                               ["present"], {}, 24)
    rt = pplpy.load(save_model(model))
    want = past.copy()
    want[0, :, 1:3] = update[0]
    want[1, :, 3] = update[1, :, 0]  # -1 + 0: the last row
    want[1, :, 0] = update[1, :, 1]  # -1 + 1 = 0
    np.testing.assert_array_equal(rt.run(feeds)["present"], want)
    for bad in (3, -5):
        with pytest.raises(pplpy.InputError, match=rf'node "n" .*write index {bad} puts rows '
                                                   r"of the 2-row update outside the cache"):
            rt.run(dict(feeds, idx=np.array([0, bad], np.int64)))
    np.testing.assert_array_equal(rt.run(feeds)["present"], want)


@pytest.mark.parametrize("past, update, idx, attrs, words", [
    ((2, 8, 4), (2, 9, 4), None, {}, ["update has 9 rows", "more than the cache's 8"]),
    ((2, 8, 4), (2, 3, 5), None, {}, ["update's dim 2 is 5"]),
    ((2, 8, 4), (2, 3, 4), (3,), {}, ["write_indices must have shape [2]"]),
    ((2, 8, 4), (2, 8, 4), None, {"axis": 0}, ["other than the batch axis 0"]),
])
def test_tensor_scatter_bad_shapes(save_model, past, update, idx, attrs, words):
    feeds = {"past": _f(*past), "update": _f(*update),
             "idx": None if idx is None else np.zeros(idx, np.int64)}
    model, _ = _node_model("TensorScatter", feeds, ["present"], attrs, 24)
    _fails(save_model, model, pplpy.ShapeError, *words)


# -- CausalConvWithState ------------------------------------------------------------------

@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("activation", [None, "none", "silu", "swish"])
@pytest.mark.parametrize("bias, past", [(False, False), (True, False), (False, True),
                                        (True, True)])
@pytest.mark.parametrize("B, C, L, k", [(2, 5, 9, 4), (1, 3, 2, 5), (2, 4, 1, 4),
                                         (1, 2, 6, 1), (3, 64, 400, 4)])
def test_causal_conv_with_state(save_model, isa, activation, bias, past, B, C, L, k):
    feeds = {"x": _f(B, C, L), "w": _f(C, 1, k), "bias": _f(C) if bias else None,
             "past": _f(B, C, k - 1) if past else None}
    attrs = {} if activation is None else {"activation": activation}
    model, feeds = _node_model("CausalConvWithState", feeds, ["y", "state"], attrs, 27)
    _check(save_model, model, feeds, isa)


@pytest.mark.parametrize("shapes, words", [
    (((2, 4, 6), (4, 1, 3), None, None), []),
    (((2, 4), (4, 1, 3), None, None), ["input must be (batch, channels, length)"]),
    (((2, 4, 6), (4, 2, 3), None, None), ["weight must be (4, 1, k)"]),
    (((2, 4, 6), (4, 1, 3), (5,), None), ["bias must be (4,)"]),
    (((2, 4, 6), (4, 1, 3), None, (2, 4, 3)), ["past_state must be (2, 4, 2)"]),
])
def test_causal_conv_bad_shapes(save_model, shapes, words):
    feeds = dict(zip(("x", "w", "bias", "past"),
                     (None if s is None else _f(*s) for s in shapes)))
    model, feeds = _node_model("CausalConvWithState", feeds, ["y", "state"], {}, 27)
    if not words:  # the well-formed model of the list runs
        pplpy.load(save_model(model)).run(feeds)
        return
    _fails(save_model, model, pplpy.ShapeError, *words)


def test_causal_conv_bad_activation(save_model):
    model, _ = _node_model("CausalConvWithState", {"x": _f(1, 2, 3), "w": _f(2, 1, 2)},
                           ["y", "state"], {"activation": "gelu"}, 27)
    _fails(save_model, model, pplpy.UnsupportedOpError, "activation 'gelu'")


# -- LinearAttention ----------------------------------------------------------------------

def _linear_feeds(rule, B, T, Hq, Hkv, dk, dv, past, decay_per_key, beta_shared):
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    k = _f(B, T, Hkv, dk)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # delta rules expect unit keys
    return {
        "q": _f(B, T, Hq * dk), "k": k.reshape(B, T, Hkv * dk), "v": _f(B, T, Hkv * dv),
        "past": _f(B, Hkv, dk, dv) * 0.5 if past else None,
        "decay": (-np.abs(_f(B, T, Hkv * (dk if decay_per_key else 1))) * 0.3
                  if gated else None),
        "beta": (1 / (1 + np.exp(-_f(B, T, 1 if beta_shared else Hkv)))).astype(np.float32)
        if delta else None,
    }


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rule", [None, "linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("variant", ["mha", "gqa_per_key_decay", "mqa_shared_beta_scale",
                                     "decode", "big"])
def test_linear_attention(save_model, isa, rule, past, variant):
    dims = {"mha": (2, 5, 2, 2, 8, 6), "gqa_per_key_decay": (1, 4, 4, 2, 4, 8),
            "mqa_shared_beta_scale": (2, 3, 3, 1, 8, 8), "decode": (3, 1, 2, 2, 16, 16),
            "big": (2, 20, 8, 4, 32, 32)}[variant]
    B, T, Hq, Hkv, dk, dv = dims
    feeds = _linear_feeds(rule or "gated_delta", *dims, past, "per_key" in variant,
                          "shared_beta" in variant)
    attrs = {"q_num_heads": Hq, "kv_num_heads": Hkv, "chunk_size": 16}
    if rule is not None:
        attrs["update_rule"] = rule
    if "scale" in variant:
        attrs["scale"] = 0.25
    model, feeds = _node_model("LinearAttention", feeds, ["y", "state"], attrs, 27)
    _check(save_model, model, feeds, isa, rtol=1e-4, atol=2e-5)


def _linear_model(shapes, rule="gated_delta", outputs=("y", "state")):
    feeds = dict(zip(("q", "k", "v", "past", "decay", "beta"),
                     (None if s is None else _f(*s) for s in shapes)))
    return _node_model("LinearAttention", feeds, list(outputs),
                       {"q_num_heads": 2, "kv_num_heads": 1, "update_rule": rule}, 27)


@pytest.mark.parametrize("shapes, words", [
    (((1, 3, 8), (1, 3, 4), (1, 3, 4), None, (1, 3, 1), (1, 3, 1)), []),
    (((1, 3, 8), (1, 3, 4)[:2], (1, 3, 4), None, (1, 3, 1), (1, 3, 1)),
     ["key must be packed 3-D"]),
    (((1, 3, 7), (1, 3, 4), (1, 3, 4), None, (1, 3, 1), (1, 3, 1)),
     ["query's last dim 7 is not a multiple of its 2 heads"]),
    (((1, 3, 8), (1, 3, 6), (1, 3, 4), None, (1, 3, 1), (1, 3, 1)), ["key's last dim"]),
    (((1, 3, 8), (1, 3, 4), (1, 2, 4), None, (1, 3, 1), (1, 3, 1)),
     ["query, key and value must share (B, T)"]),
    (((1, 3, 8), (1, 3, 4), (1, 3, 4), (1, 1, 4, 5), (1, 3, 1), (1, 3, 1)),
     ["past_state must be [1, 1, 4, 4]"]),
    (((1, 3, 8), (1, 3, 4), (1, 3, 4), None, (1, 3, 3), (1, 3, 1)), ["decay must be"]),
    (((1, 3, 8), (1, 3, 4), (1, 3, 4), None, (1, 3, 1), (1, 3, 2)), ["beta must be"]),
])
def test_linear_attention_bad_shapes(save_model, shapes, words):
    model, feeds = _linear_model(shapes)
    if not words:  # the well-formed model of the list runs, present_state omitted too
        pplpy.load(save_model(model)).run(feeds)
        model, feeds = _linear_model(shapes, outputs=("y", ""))
        pplpy.load(save_model(model)).run(feeds)
        return
    _fails(save_model, model, pplpy.ShapeError, *words)


def test_linear_attention_rule_inputs(save_model):
    model, _ = _linear_model(((1, 3, 8), (1, 3, 4), (1, 3, 4), None, None, (1, 3, 1)))
    _fails(save_model, model, pplpy.UnsupportedOpError, "needs input decay")
    model, _ = _linear_model(((1, 3, 8), (1, 3, 4), (1, 3, 4), None, (1, 3, 1), None),
                             rule="linear")
    _fails(save_model, model, pplpy.UnsupportedOpError, "takes no input decay")


# -- FlexAttention ------------------------------------------------------------------------

def _mod_graph(name, kind):
    """Modifier subgraphs: additive bias, causal mask (Shape/Range/Where), soft cap."""
    x, y = (helper.make_tensor_value_info(n, FLOAT, ["B", "H", "L", "S"])
            for n in ("x", "y"))
    c = helper.make_tensor
    if kind == "bias":
        nodes = [helper.make_node("Add", ["x", "b"], ["y"])]
        inits = [c("b", FLOAT, [], [0.5])]
    elif kind == "scale":
        nodes = [helper.make_node("Mul", ["x", "b"], ["y"])]
        inits = [c("b", FLOAT, [], [0.7])]
    elif kind == "softcap":
        nodes = [helper.make_node("Div", ["x", "cap"], ["t"]),
                 helper.make_node("Tanh", ["t"], ["u"]),
                 helper.make_node("Mul", ["u", "cap"], ["y"])]
        inits = [c("cap", FLOAT, [], [2.0])]
    else:  # causal
        nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                 helper.make_node("Gather", ["shape", "i2"], ["L"], axis=0),
                 helper.make_node("Gather", ["shape", "i3"], ["S"], axis=0),
                 helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
                 helper.make_node("Reshape", ["qr", "qs"], ["qi"]),
                 helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
                 helper.make_node("GreaterOrEqual", ["qi", "kr"], ["m"]),
                 helper.make_node("Where", ["m", "x", "ninf"], ["y"])]
        inits = [c("i2", INT64, [], [2]), c("i3", INT64, [], [3]), c("zero", INT64, [], [0]),
                 c("one", INT64, [], [1]), c("qs", INT64, [2], [-1, 1]),
                 c("ninf", FLOAT, [], [-np.inf])]
    return helper.make_graph(nodes, name, [x], [y], inits)


FLEX_CASES = {
    # name: (Q, K, V shapes, attributes)
    "plain": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6), {}),
    "gqa_scaled": ((2, 6, 3, 16), (2, 2, 9, 16), (2, 2, 9, 16), {"scale": 0.2}),
    "long": ((1, 2, 70, 32), (1, 2, 150, 32), (1, 2, 150, 32), {}),
    "score_mod": ((1, 4, 5, 8), (1, 2, 6, 8), (1, 2, 6, 4), {"score_mod": "bias"}),
    "causal": ((2, 2, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8), {"score_mod": "causal"}),
    "softcap_prob_mod": ((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8),
                         {"score_mod": "softcap", "prob_mod": "scale",
                          "softmax_precision": 1}),
    "prob_mod_gqa": ((2, 4, 3, 8), (2, 1, 4, 8), (2, 1, 4, 3), {"prob_mod": "bias"}),
}


def _flex_model(q, k, v, attrs):
    attrs = dict(attrs)
    for name in ("score_mod", "prob_mod"):
        if name in attrs:
            attrs[name] = _mod_graph(name, attrs[name])
    feeds = {"Q": _f(*q), "K": _f(*k), "V": _f(*v)}
    return _node_model("FlexAttention", feeds, ["Y"], attrs, 26, domain=PREVIEW,
                       extra_opsets=[(PREVIEW, 1)])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", FLEX_CASES)
def test_flex_attention(save_model, isa, case):
    model, feeds = _flex_model(*FLEX_CASES[case])
    _check(save_model, model, feeds, isa, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("q, k, v, words", [
    ((2, 4, 5), (2, 4, 7, 8), (2, 4, 7, 8), ["Q must be rank 4"]),
    ((2, 4, 5, 8), (1, 4, 7, 8), (2, 4, 7, 8), ["same batch size"]),
    ((2, 4, 5, 8), (2, 4, 7, 6), (2, 4, 7, 8), ["Q's head size 8 differs from K's 6"]),
    ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 6, 8), ["K and V must have the same heads"]),
    ((2, 4, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), ["4 query heads are not a multiple of 3"]),
])
def test_flex_attention_bad_shapes(save_model, q, k, v, words):
    model, _ = _flex_model(q, k, v, {})
    _fails(save_model, model, pplpy.ShapeError, *words)


def test_flex_attention_unsupported(save_model):
    model, _ = _flex_model((1, 1, 2, 4), (1, 1, 2, 4), (1, 1, 2, 4), {"softmax_precision": 11})
    _fails(save_model, model, pplpy.UnsupportedOpError, "softmax_precision=11")
    # A modifier with an op pplpy lacks makes the node unsupported, naming the subgraph.
    model, _ = _flex_model((1, 1, 2, 4), (1, 1, 2, 4), (1, 1, 2, 4), {"score_mod": "bias"})
    attr = next(a for a in model.graph.node[0].attribute if a.name == "score_mod")
    attr.g.node[0].op_type = "NoSuchOp"
    _fails(save_model, model, pplpy.UnsupportedOpError, "score_mod subgraph", "NoSuchOp")
