"""Attention, RotaryEmbedding, Einsum, QuantizeLinear/DequantizeLinear and the random ops
through pplpy.load, against onnx.reference (numpy for the random ops' statistics), on every
ISA tier, with 1 and 2 threads."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pplpy
from onnx_builders import ISAS, make_model

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
_NP = {FLOAT: np.float32, BOOL: np.bool_, INT64: np.int64, TensorProto.DOUBLE: np.float64,
       TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT32: np.int32,
       TensorProto.INT16: np.int16}


def _run_both(save_model, model, feeds, isa, rtol=1e-4, atol=1e-5, ref_model=None):
    """pplpy with 1 and 2 threads against the reference (run on ``ref_model`` where given:
    an equivalent model at an opset the reference implements); returns pplpy's outputs."""
    want = ReferenceEvaluator(ref_model or model).run(None, feeds)
    path = save_model(model)
    results = []
    for threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=threads)
        got = rt.run(feeds)
        for name, w in zip(rt.output_names, want):
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
        results.append(got)
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name])
    return results[0]


def _vi(name, array):
    elem = {v: k for k, v in _NP.items()}[array.dtype.type]
    return (name, elem, list(array.shape))


# -- Attention ---------------------------------------------------------------------------

_RNG = np.random.default_rng(7)


def _f(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


ATTENTION_CASES = {
    # name: (opset, attributes, inputs (None: absent), outputs)
    "4d_gqa": (23, {}, dict(Q=_f(2, 4, 5, 8), K=_f(2, 2, 7, 8), V=_f(2, 2, 7, 6)), 1),
    "4d_long_causal": (23, {"is_causal": 1},
                       dict(Q=_f(1, 2, 70, 32), K=_f(1, 2, 150, 32), V=_f(1, 2, 150, 32)), 1),
    "3d_scaled_softcap": (23, {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.3,
                               "softcap": 2.0},
                          dict(Q=_f(2, 9, 32), K=_f(2, 11, 16), V=_f(2, 11, 12)), 1),
    "bool_mask_short": (23, {}, dict(Q=_f(1, 2, 4, 8), K=_f(1, 2, 6, 8), V=_f(1, 2, 6, 8),
                                     attn_mask=_RNG.random((4, 5)) > 0.3), 1),
    "float_mask_3d_qk_bias": (23, {"qk_matmul_output_mode": 2},
                              dict(Q=_f(1, 2, 4, 8), K=_f(1, 2, 6, 8), V=_f(1, 2, 6, 8),
                                   attn_mask=_f(2, 4, 6)), 4),
    "past_present_softmax_out": (23, {"qk_matmul_output_mode": 3, "is_causal": 1},
                                 dict(Q=_f(2, 4, 3, 8), K=_f(2, 2, 3, 8), V=_f(2, 2, 3, 5),
                                      attn_mask=_f(2, 1, 3, 7), past_key=_f(2, 2, 4, 8),
                                      past_value=_f(2, 2, 4, 5)), 4),
    "3d_past_present": (23, {"q_num_heads": 2, "kv_num_heads": 2},
                        dict(Q=_f(1, 3, 16), K=_f(1, 3, 16), V=_f(1, 3, 16),
                             past_key=_f(1, 2, 5, 8), past_value=_f(1, 2, 5, 8)), 3),
    "nonpad_causal": (24, {"is_causal": 1},
                      dict(Q=_f(2, 2, 2, 8), K=_f(2, 2, 9, 8), V=_f(2, 2, 9, 8),
                           nonpad_kv_seqlen=np.array([5, 9], np.int64)), 1),
    "window": (25, {"is_causal": 1, "left_window_size": 2},
               dict(Q=_f(1, 1, 6, 8), K=_f(1, 1, 6, 8), V=_f(1, 1, 6, 8)), 1),
    "fully_masked_rows": (23, {}, dict(Q=_f(1, 1, 3, 4), K=_f(1, 1, 4, 4), V=_f(1, 1, 4, 4),
                                       attn_mask=np.array([[1, 0, 1, 0], [0, 0, 0, 0],
                                                           [1, 1, 1, 1]], bool)), 1),
}
_ATTN_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
_ATTN_OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_attention(name, isa, save_model):
    opset, attrs, feeds, n_out = ATTENTION_CASES[name]
    last = max(i for i, n in enumerate(_ATTN_INPUTS) if n in feeds)
    inputs = [n if n in feeds else "" for n in _ATTN_INPUTS[:last + 1]]
    node = helper.make_node("Attention", inputs, list(_ATTN_OUTPUTS[:n_out]), **attrs)
    model = make_model([node], [_vi(n, feeds[n]) for n in inputs if n],
                       [(o, FLOAT, None) for o in _ATTN_OUTPUTS[:n_out]], opset=opset)
    _run_both(save_model, model, feeds, isa)


def test_attention_unsupported_type_names_the_input(save_model):
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"])
    model = make_model([node], [(n, TensorProto.FLOAT16, [1, 1, 2, 4]) for n in "QKV"],
                       [("Y", TensorProto.FLOAT16, None)], opset=23)
    with pytest.raises(pplpy.UnsupportedOpError, match='input "?Q"? is float16'):
        pplpy.load(save_model(model))


def test_attention_two_shapes_one_runtime(save_model):
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1)
    model = make_model([node], [(n, FLOAT, [1, 2, "S", 8]) for n in "QKV"],
                       [("Y", FLOAT, None)], opset=23)
    rt = pplpy.load(save_model(model))
    ref = ReferenceEvaluator(model)
    for s in (3, 40):
        feeds = {n: _f(1, 2, s, 8) for n in "QKV"}
        np.testing.assert_allclose(rt.run(feeds)["Y"], ref.run(None, feeds)[0], rtol=1e-4,
                                   atol=1e-5)


# -- RotaryEmbedding ---------------------------------------------------------------------

def _rotary_case(rank, interleaved, rdim, with_pos):
    B, S, H, D = 2, 5, 3, 8
    R = rdim or D
    x = _f(B, H, S, D) if rank == 4 else _f(B, S, H * D)
    feeds = {"X": x}
    if with_pos:
        feeds["cos_cache"], feeds["sin_cache"] = _f(12, R // 2), _f(12, R // 2)
        feeds["position_ids"] = _RNG.integers(0, 12, (B, S)).astype(np.int64)
    else:
        feeds["cos_cache"], feeds["sin_cache"] = _f(B, S, R // 2), _f(B, S, R // 2)
    attrs = {"interleaved": interleaved}
    if rdim:
        attrs["rotary_embedding_dim"] = rdim
    if rank == 3:
        attrs["num_heads"] = H
    return feeds, attrs


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rank,interleaved,rdim,with_pos", [
    (4, 0, 0, True), (4, 1, 4, True), (3, 0, 6, False), (3, 1, 0, True), (4, 1, 0, False)])
def test_rotary_embedding(rank, interleaved, rdim, with_pos, isa, save_model):
    feeds, attrs = _rotary_case(rank, interleaved, rdim, with_pos)
    names = list(feeds)
    node = helper.make_node("RotaryEmbedding", names, ["Y"], **attrs)
    model = make_model([node], [_vi(n, feeds[n]) for n in names], [("Y", FLOAT, None)],
                       opset=23)
    _run_both(save_model, model, feeds, isa, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [12, -13])
def test_rotary_embedding_position_id_out_of_range_raises(bad, save_model):
    """A position id past the caches gives a zero row in the step (no stray read) and the
    run raises an InputError naming it, as ONNX Runtime refuses it; the next run is right."""
    feeds, attrs = _rotary_case(4, 0, 0, True)
    node = helper.make_node("RotaryEmbedding", list(feeds), ["Y"], name="rope", **attrs)
    model = make_model([node], [_vi(n, a) for n, a in feeds.items()], [("Y", FLOAT, None)],
                       opset=23)
    rt = pplpy.load(save_model(model))
    want = rt.run(feeds)["Y"]
    ids = feeds["position_ids"].copy()
    ids[1, 2] = bad
    with pytest.raises(pplpy.InputError, match=rf'node "rope" .*position id {bad} is out of '
                                               r"range for caches of 12 rows"):
        rt.run(dict(feeds, position_ids=ids))
    np.testing.assert_array_equal(rt.run(feeds)["Y"], want)


# -- Einsum ------------------------------------------------------------------------------

EINSUM_CASES = [
    ("bhqd,bhkd->bhqk", [(2, 3, 17, 16), (2, 3, 19, 16)]),     # GEMM, trans_b
    ("bhqk,bhkd->bhqd", [(2, 3, 17, 19), (2, 3, 19, 16)]),     # GEMM
    ("ij,jk", [(33, 20), (20, 41)]),                             # implicit output
    ("ji,jk->ki", [(20, 33), (20, 41)]),                         # trans_a, swapped output
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)]),                    # broadcast batch
    ("...ii->...i", [(2, 3, 4, 4)]),                             # diagonal with ellipsis
    ("i,i", [(7,), (7,)]),                                       # inner product
    ("ij->", [(5, 6)]),                                          # full sum
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),                  # three operands
    ("...j,j...->...", [(2, 3, 4), (4, 3)]),                     # ellipsis broadcast
    ("abc -> cba", [(2, 3, 4)]),                                 # spaces, transpose
    ("bhlk,bhtk->bhlt", [(1, 1, 37, 16), (1, 1, 23, 16)]),     # CvT: size-1 labels, GEMM
    ("bhlt,bhtv->bhlv", [(1, 3, 9, 23), (1, 3, 23, 8)]),
    ("xij,jk->xik", [(1, 5, 6), (6, 1)]),                        # one column
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("equation,shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(equation, shapes, isa, save_model):
    feeds = {f"x{i}": _f(*s) for i, s in enumerate(shapes)}
    node = helper.make_node("Einsum", list(feeds), ["y"], equation=equation)
    model = make_model([node], [_vi(n, a) for n, a in feeds.items()], [("y", FLOAT, None)],
                       opset=12)
    _run_both(save_model, model, feeds, isa)


@pytest.mark.parametrize("equation,shapes,gemm", [
    ("bhlk,bhtk->bhlt", [(1, 1, 37, 16), (1, 1, 23, 16)], True),
    ("bhlt,bhtv->bhlv", [(1, 3, 9, 23), (1, 3, 23, 8)], True),
    ("bhqd,bhkd->bhqk", [(2, 3, 17, 16), (2, 3, 19, 16)], True),
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)], True),      # a broadcast batch
    ("ij,jk->ik", [(3, 1), (4, 2)], False),              # a broadcast contraction
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], False),   # three operands
])
def test_einsum_takes_the_gemm_where_it_can(equation, shapes, gemm, save_model, monkeypatch):
    """A matmul-shaped float32 contraction runs as a batched GEMM, labels of size 1 (batch
    1, one head) and broadcast batch labels included; a contracted label broadcast from
    size 1 and three operands take the direct step."""
    from pplpy.engines.x86.ops.onnx import einsum as einsum_op

    direct = []
    make = einsum_op._einsum.make_einsum_step
    monkeypatch.setattr(einsum_op._einsum, "make_einsum_step",
                        lambda *a, **k: direct.append(a) or make(*a, **k))
    feeds = {f"x{i}": _f(*s) for i, s in enumerate(shapes)}
    node = helper.make_node("Einsum", list(feeds), ["y"], equation=equation)
    model = make_model([node], [_vi(n, a) for n, a in feeds.items()], [("y", FLOAT, None)],
                       opset=12)
    _run_both(save_model, model, feeds, None)
    assert bool(direct) is not gemm


@pytest.mark.parametrize("dtype", [TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32])
def test_einsum_other_types(dtype, save_model):
    a = (_RNG.standard_normal((3, 4)) * 5).astype(_NP[dtype])
    b = (_RNG.standard_normal((4, 2)) * 5).astype(_NP[dtype])
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")
    model = make_model([node], [_vi("a", a), _vi("b", b)], [("y", dtype, None)], opset=28)
    _run_both(save_model, model, {"a": a, "b": b}, None)


# -- QuantizeLinear / DequantizeLinear ---------------------------------------------------

# Per-axis scales exist from opset 13, int16 from 21.
QUANTIZE_CASES = [
    pytest.param(opset, qtype, per_axis,
                 id=f"opset{opset}-{TensorProto.DataType.Name(qtype)}-{'axis' if per_axis else 'tensor'}")
    for opset in (10, 13, 19, 21, 23)
    for qtype in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16)
    for per_axis in (False, True)
    if not (per_axis and opset < 13) and not (qtype == TensorProto.INT16 and opset < 21)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset, qtype, per_axis", QUANTIZE_CASES)
def test_quantize_dequantize(opset, qtype, per_axis, isa, save_model):
    x = (_RNG.standard_normal((2, 3, 70, 5)) * 200).astype(np.float32)
    # Saturation (the reference overflows past int32, so no larger) and ties to even.
    x.flat[:4] = [1e6, -1e6, 2.5, -3.5]
    scale = (np.array([0.5, 2.0, 1.5], np.float32) if per_axis
             else np.array(1.5, np.float32))
    zp = np.array([3, 1, 0] if per_axis else 2, _NP[qtype])
    attrs = {"axis": 1} if opset >= 13 else {}
    q_node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs)
    d_node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)
    ios = ([_vi("x", x), _vi("s", scale), _vi("z", zp)],
           [("q", qtype, None), ("y", FLOAT, None)])
    model = make_model([q_node, d_node], *ios, opset=opset)
    # The reference implements these ops from opset 19; 10 and 13 mean the same here.
    ref = make_model([q_node, d_node], *ios, opset=max(opset, 19))
    _run_both(save_model, model, {"x": x, "s": scale, "z": zp}, isa, rtol=0, atol=0,
              ref_model=ref)


def test_dequantize_int32_without_zero_point(save_model):
    x = _RNG.integers(-2**20, 2**20, (4, 33)).astype(np.int32)
    s = np.array(0.25, np.float32)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    ios = ([_vi("x", x), _vi("s", s)], [("y", FLOAT, None)])
    _run_both(save_model, make_model([node], *ios, opset=13), {"x": x, "s": s}, None,
              rtol=0, atol=0, ref_model=make_model([node], *ios, opset=19))


def test_blocked_quantization_is_unsupported(save_model):
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    model = make_model([node], [("x", TensorProto.INT8, [2, 4]), ("s", FLOAT, [2, 2])],
                       [("y", FLOAT, None)], opset=21)
    with pytest.raises(pplpy.UnsupportedOpError, match="block_size"):
        pplpy.load(save_model(model))


# -- random ops --------------------------------------------------------------------------

def _random_model(op_type, attrs, like=None, opset=22):
    inputs = [] if like is None else [_vi("x", like)]
    node = helper.make_node(op_type, ["x"] if like is not None else [], ["y"], **attrs)
    dtype = attrs.get("dtype", FLOAT if like is None else None)
    out = dtype if dtype is not None else {v: k for k, v in _NP.items()}[like.dtype.type]
    return make_model([node], inputs, [("y", out, None)], opset=opset)


@pytest.mark.parametrize("isa", ISAS)
def test_random_distributions(isa, save_model):
    cases = [
        ("RandomUniform", {"shape": [200, 500], "low": -2.0, "high": 3.0}, None),
        ("RandomNormal", {"shape": [200, 500], "mean": 1.0, "scale": 2.0,
                          "dtype": TensorProto.DOUBLE}, None),
        ("RandomUniformLike", {"low": 1.0, "high": 2.0}, np.zeros((300, 300), np.float32)),
        ("RandomNormalLike", {"dtype": FLOAT}, np.zeros((300, 300), np.float64)),
    ]
    for op_type, attrs, like in cases:
        for seed in (None, 5.0):
            if seed is not None:
                attrs = dict(attrs, seed=seed)
            path = save_model(_random_model(op_type, attrs, like))
            feeds = {} if like is None else {"x": like}
            rt = pplpy.load(path, max_isa=isa, num_threads=1)
            y1, again = rt.run(feeds)["y"], rt.run(feeds)["y"]
            y2 = pplpy.load(path, max_isa=isa, num_threads=2).run(feeds)["y"]
            if seed is not None:
                np.testing.assert_array_equal(y1, y2)  # a seed fixes the values
                np.testing.assert_array_equal(y1, again)
            else:  # each run draws new values, each build from its own entropy (float32
                # draws coincide by chance at a rate of about 2^-23 per element)
                assert np.mean(y1 == again) < 1e-3 and np.mean(y1 == y2) < 1e-3
            if "Uniform" in op_type:
                lo, hi = attrs["low"], attrs["high"]
                assert lo <= y1.min() and y1.max() < hi
                assert abs(y1.mean() - (lo + hi) / 2) < 0.02 * (hi - lo)
            else:
                mean, scale = attrs.get("mean", 0.0), attrs.get("scale", 1.0)
                assert abs(y1.mean() - mean) < 0.02 * scale
                assert abs(y1.std() - scale) < 0.02 * scale


@pytest.mark.parametrize("out", [None, TensorProto.BOOL, TensorProto.INT64])
def test_bernoulli(out, save_model):
    p = _RNG.random((400, 250)).astype(np.float32)
    attrs = {"seed": 3.0} if out is None else {"dtype": out}
    model = _random_model("Bernoulli", attrs, like=p, opset=15)
    y = pplpy.load(save_model(model), num_threads=2).run({"x": p})["y"]
    assert y.dtype == (np.float32 if out is None else _NP[out]) and y.shape == p.shape
    y = y.astype(np.float64)
    assert np.isin(y, [0, 1]).all()
    assert abs(y.mean() - p.mean()) < 0.01
    assert abs(y[p < 0.1].mean() - p[p < 0.1].mean()) < 0.01


def test_random_float16_is_unsupported(save_model):
    model = _random_model("RandomUniform", {"shape": [2], "dtype": TensorProto.FLOAT16})
    with pytest.raises(pplpy.UnsupportedOpError, match="dtype float16"):
        pplpy.load(save_model(model))




def test_random_ops_are_not_folded(tmp_path):
    """RandomUniform has no inputs: constant folding must not turn it into a constant."""
    from onnx import TensorProto, helper

    import onnx as _onnx

    graph = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["r"], shape=[64]),
         helper.make_node("Add", ["r", "x"], ["y"])], "rand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "rand.onnx"
    _onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    rt = pplpy.load(path)
    assert any(n.op_type == "RandomUniform" for n in rt.graph.nodes)
    x = np.zeros(64, np.float32)
    first = rt.run({"x": x})["y"]
    assert ((0 <= first) & (first < 1)).all() and len(np.unique(first)) > 32


def test_unseeded_draws_differ_between_runs_and_runtimes_of_one_build(tmp_path):
    """Runtimes of one builder share the kernel's draw counter, so no two runs (on either
    runtime, from two threads at once) repeat each other's values."""
    import threading

    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("RandomNormal", [], ["y"], shape=[256])],
                              "rand", [], [helper.make_tensor_value_info(
                                  "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    builder = pplpy.RuntimeBuilder.from_onnx(model.SerializeToString())
    runtimes = [builder.create_runtime() for _ in range(2)]
    draws = []

    def run(rt):
        for _ in range(20):
            draws.append(rt.run({})["y"])

    threads = [threading.Thread(target=run, args=(rt,)) for rt in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({d.tobytes() for d in draws}) == 40


def test_random_uniform_stays_below_high_in_float32():
    """low + (high - low) * u rounds to high for u near 1: the step keeps [low, high)."""
    from pplpy.engines.x86.impls import _random
    from pplpy.runtime.step import run_steps

    y = np.empty(3_000_000, np.float32)
    for seed in (1, 2, 3):
        run_steps([_random.make_random_step("uniform", np.float32, y.ctypes.data, y.size, seed,
                                            1.0, 1.0, 0, False, (y,))], 2)
        assert 1.0 <= y.min() and y.max() < 2.0
