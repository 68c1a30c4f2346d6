"""The row-wise normalisation ops (LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization,
LogSoftmax, Hardmax) through pplpy.load against onnx.reference (or a numpy oracle of the
spec where the reference is wrong), under every ISA tier, at 1 and 2 threads.

Shapes are large enough in places (> 64K elements) that the steps run in parallel."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.errors import PplError

RNG = np.random.default_rng(23)
FLOAT = TensorProto.FLOAT


def randn(*shape, offset=0.0):
    return (RNG.standard_normal(shape) + offset).astype(np.float32)


def model_of(node, feeds, consts, opset, n_outputs=1):
    """One-node model; ``feeds`` name -> array are graph inputs, ``consts`` initializers."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "g", [vi(k, FLOAT, v.shape) for k, v in feeds.items()],
        [vi(o, FLOAT, None) for o in node.output[:n_outputs] if o],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_both(model, feeds, isa, tmp_path, num_threads=1):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=num_threads)
    got = rt.run(feeds)
    return [got[o.name] for o in model.graph.output]


def check(model, feeds, isa, tmp_path, want=None, rtol=1e-4, atol=1e-4):
    if want is None:
        want = ReferenceEvaluator(model).run(None, feeds)
    for num_threads in (1, 2):
        got = run_both(model, feeds, isa, tmp_path, num_threads)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == np.asarray(w).shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# LayerNormalization and RMSNormalization.

# (X shape, axis, scale shape, bias shape or None)
LAYER_CASES = [
    ((2, 3, 768), -1, (768,), (768,)),              # BERT, rows of 768
    ((4, 3, 5), 1, (3, 5), (3, 5)),
    ((4, 3, 5), -2, (1, 5), (3, 1)),                 # broadcast scale and bias
    ((2, 3, 4, 5), 0, (3, 4, 5), None),              # one row per tensor... 2 rows
    ((6, 7), -1, (1,), (7,)),                        # scalar-like scale
    ((128, 1030), -1, (1030,), (1030,)),             # > 64K elements: parallel
    ((3, 1, 40000), 2, (40000,), (1, 40000)),        # long rows, leading 1 in bias
    ((5,), 0, (5,), (5,)),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", LAYER_CASES, ids=str)
@pytest.mark.parametrize("fed", [False, True], ids=["const", "fed"])
def test_layer_normalization(case, fed, isa, tmp_path):
    shape, axis, s_shape, b_shape = case
    x = randn(*shape, offset=2.0)
    weights = {"s": randn(*s_shape)}
    if b_shape is not None:
        weights["b"] = randn(*b_shape)
    node = helper.make_node("LayerNormalization", ["x", "s", "b" if b_shape else ""],
                            ["y", "mean", "inv"], axis=axis, epsilon=1e-3)
    feeds = {"x": x, **(weights if fed else {})}
    model = model_of(node, feeds, {} if fed else weights, 17, n_outputs=3)
    check(model, feeds, isa, tmp_path)


@pytest.mark.parametrize("isa", ISAS)
def test_layer_normalization_y_only_and_epsilon(isa, tmp_path):
    x = randn(3, 4, 16) * 1e-3  # variance comparable to epsilon
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    model = model_of(node, {"x": x}, {"s": randn(16), "b": randn(16)}, 17)
    check(model, {"x": x}, isa, tmp_path)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", [((2, 3, 768), -1, (768,)), ((4, 3, 5), 1, (1, 5)),
                                  ((2, 3, 4, 5), -3, (3, 4, 5)), ((64, 2048), 1, (2048,))],
                         ids=str)
def test_rms_normalization(case, isa, tmp_path):
    shape, axis, s_shape = case
    x = randn(*shape, offset=1.0)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-4)
    model = model_of(node, {"x": x}, {"s": randn(*s_shape)}, 23)
    check(model, {"x": x}, isa, tmp_path)


def test_layer_normalization_refusals(tmp_path):
    x = randn(2, 3)
    bad_stash = helper.make_node("LayerNormalization", ["x", "s"], ["y"], stash_type=0)
    model = model_of(bad_stash, {"x": x}, {"s": randn(3)}, 17)
    onnx.save(model, tmp_path / "a.onnx")
    with pytest.raises(PplError, match="stash_type"):
        pplpy.load(tmp_path / "a.onnx")
    bad_scale = helper.make_node("LayerNormalization", ["x", "s"], ["y"])
    model = model_of(bad_scale, {"x": x}, {"s": randn(2)}, 17)
    onnx.save(model, tmp_path / "b.onnx")
    with pytest.raises(PplError, match="Scale must broadcast"):
        pplpy.load(tmp_path / "b.onnx")


# ---------------------------------------------------------------------------------------
# InstanceNormalization (NDARRAY and N16CX) and GroupNormalization.

C = 19  # not a multiple of 16: padding lanes matter


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", [1, 6, 22])
@pytest.mark.parametrize("shape", [(2, C, 9, 7), (1, C, 300, 250), (3, 4, 10), (2, 5)],
                         ids=str)
def test_instance_normalization(shape, opset, isa, tmp_path):
    x = randn(*shape, offset=5.0)
    consts = {"s": randn(shape[1]), "b": randn(shape[1])}
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    model = model_of(node, {"x": x}, consts, opset)
    want = ReferenceEvaluator(model_of(node, {"x": x}, consts, 6)).run(None, {"x": x})
    check(model, {"x": x}, isa, tmp_path, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("spatial", [(9, 7), (60, 70)], ids=str)
def test_instance_normalization_n16cx(spatial, isa, tmp_path):
    """After a Conv (which produces N16CX) the op runs blocked, with no reorder."""
    x = randn(2, C, *spatial)
    eye = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
    consts = {"eye": eye, "s": randn(C), "b": randn(C)}
    nodes = [helper.make_node("Conv", ["x", "eye"], ["t"]),
             helper.make_node("InstanceNormalization", ["t", "s", "b"], ["y"], epsilon=1e-4)]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", FLOAT, x.shape)], [vi("y", FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for num_threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=num_threads)
        (node,) = [n for n in rt.graph.nodes if n.op_type == "InstanceNormalization"]
        assert rt.formats[node.outputs[0]] is DataFormat.N16CX
        np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def group_norm_oracle(x, scale, bias, groups, eps):
    """GroupNormalization-21 (scale, bias per channel) or -18 (per group), in numpy."""
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1).astype(np.float64)
    y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)
    if scale.size == groups:
        y = y * scale[:, None] + bias[:, None]
        return y.reshape(x.shape)
    y = y.reshape(n, c, -1) * scale[:, None] + bias[:, None]
    return y.reshape(x.shape)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 4), 3), ((1, 32, 40, 40), 8),
                                          ((3, 4, 7), 4), ((2, 8, 3), 1)], ids=str)
@pytest.mark.parametrize("fed", [False, True], ids=["const", "fed"])
def test_group_normalization(shape, groups, opset, fed, isa, tmp_path):
    x = randn(*shape, offset=-3.0)
    k = groups if opset < 21 else shape[1]
    weights = {"s": randn(k), "b": randn(k)}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups,
                            epsilon=1e-4)
    feeds = {"x": x, **(weights if fed else {})}
    model = model_of(node, feeds, {} if fed else weights, opset)
    want = [group_norm_oracle(x, weights["s"], weights["b"], groups, 1e-4)]
    check(model, feeds, isa, tmp_path, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("channels,groups,spatial", [(32, 1, (30, 40)), (32, 4, (5, 6)),
                                                     (32, 32, (3, 3)), (19, 1, (9, 7)),
                                                     (48, 6, (23, 25))], ids=str)
def test_group_normalization_n16cx(channels, groups, spatial, opset, isa, tmp_path):
    """After a Conv (which produces N16CX) the op runs blocked, with no reorder."""
    x = randn(2, channels, *spatial, offset=3.0)
    eye = np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1)
    k = groups if opset < 21 else channels
    consts = {"eye": eye, "s": randn(k), "b": randn(k)}
    nodes = [helper.make_node("Conv", ["x", "eye"], ["t"]),
             helper.make_node("GroupNormalization", ["t", "s", "b"], ["y"], epsilon=1e-4,
                              num_groups=groups)]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", FLOAT, x.shape)], [vi("y", FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    want = group_norm_oracle(x, consts["s"], consts["b"], groups, 1e-4)
    for num_threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=num_threads)
        (node,) = [n for n in rt.graph.nodes if n.op_type == "GroupNormalization"]
        assert rt.formats[node.outputs[0]] is DataFormat.N16CX
        np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_group_normalization_groups_must_divide_channels(tmp_path):
    x = randn(1, 6, 4)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4)
    model = model_of(node, {"x": x}, {"s": randn(6), "b": randn(6)}, 21)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(PplError, match="num_groups=4 must divide"):
        pplpy.load(tmp_path / "m.onnx")


# ---------------------------------------------------------------------------------------
# MeanVarianceNormalization, LpNormalization, LogSoftmax, Hardmax.

@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape,axes", [((2, 3, 4, 5), None), ((2, 3, 4, 5), (1, -1)),
                                        ((4, 6, 50), (2,)), ((2, 40, 50, 40), (0, 2, 3)),
                                        ((3, 5, 7), (0, 1, 2))], ids=str)
def test_mean_variance_normalization(shape, axes, isa, tmp_path):
    x = randn(*shape, offset=1.0)
    attrs = {} if axes is None else {"axes": list(axes)}
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs)
    model = model_of(node, {"x": x}, {}, 13)
    red = tuple(a % len(shape) for a in (axes or (0, 2, 3)))
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(red, keepdims=True)) / (x64.std(red, keepdims=True) + 1e-9)
    check(model, {"x": x}, isa, tmp_path, [want])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", [((3, 4, 5), -1), ((3, 4, 5), 1), ((3, 4, 5), 0),
                                        ((200, 700), 0), ((700, 200), -1)], ids=str)
def test_lp_normalization(shape, axis, p, isa, tmp_path):
    x = randn(*shape)
    x[0] = 0  # a zero norm along some axis gives 0
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)
    model = model_of(node, {"x": x}, {}, 22)
    # onnx's reference sums x ** p without abs (wrong for p = 1): the spec in numpy.
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis, keepdims=True) ** (1 / p)
    want = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
    check(model, {"x": x}, isa, tmp_path, [want], rtol=1e-5, atol=1e-6)


AXIS_CASES = [((3, 4, 5), None), ((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), -1),
              ((2, 300, 200), 1), ((2, 3, 20000), 2), ((7,), 0)]


def coerced_oracle(op_type, x, axis):
    """Opsets before 13: the op along the rows of x coerced to 2-D at axis (onnx's reference
    implements only the single-axis form)."""
    axis %= x.ndim
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    if op_type == "LogSoftmax":
        z = x2 - x2.max(1, keepdims=True)
        y = z - np.log(np.exp(z).sum(1, keepdims=True))
    else:
        y = np.zeros_like(x2)
        y[np.arange(len(x2)), x2.argmax(1)] = 1
    return y.reshape(x.shape)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape,axis", AXIS_CASES, ids=str)
def test_log_softmax_and_hardmax(op_type, opset, shape, axis, isa, tmp_path):
    x = randn(*shape) * 3
    if op_type == "Hardmax":
        x = np.round(x)  # ties: the first maximum wins
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    model = model_of(node, {"x": x}, {}, opset)
    want = None if opset >= 13 else [coerced_oracle(op_type, x, 1 if axis is None else axis)]
    check(model, {"x": x}, isa, tmp_path, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_rows_with_infinities_and_nan(op_type, isa, tmp_path):
    """Rows with -inf entries, a NaN, a +inf, or -inf everywhere, along the last axis (the
    vector row path): as onnx.reference computes them (x - max first)."""
    x = randn(5, 37) * 3
    x[0, [0, 36]] = -np.inf
    x[1, 18] = np.nan
    x[2, 36] = np.inf
    x[3] = -np.inf
    node = helper.make_node(op_type, ["x"], ["y"], axis=-1)
    model = model_of(node, {"x": x}, {}, 13)
    with np.errstate(invalid="ignore"):
        check(model, {"x": x}, isa, tmp_path, None, rtol=1e-5, atol=1e-6)


def test_shape_cache_keeps_the_most_recent_entries():
    from pplpy.engines.x86.ops.kernel import ShapeCache

    cache, made = ShapeCache(size=3), []

    def make(key):
        made.append(key)
        return np.full(2, key)

    for key in (1, 2, 3, 1, 4, 1, 2):
        np.testing.assert_array_equal(cache.get(key, lambda: make(key)), [key, key])
    # 1 stayed (used again); 2 went when 4 came (3, 1, 4 then) and was made again.
    assert made == [1, 2, 3, 4, 2] and len(cache) == 3


def test_norms_fed_many_shapes_keep_a_bounded_cache_and_stay_right():
    """LayerNormalization over (S, D) with a free S, and MeanVarianceNormalization: each
    kernel derives arrays per input shape (weights expanded to (S, D), offset tables); a
    model fed many lengths kept every one (650 MB over 400 lengths), now the recent few."""
    d = 8
    scale, bias = randn(d), randn(d)
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2),
         helper.make_node("MeanVarianceNormalization", ["x"], ["z"], axes=[1, 2])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", d])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(model.SerializeToString(), num_threads=1, plan_cache_size=2)
    ref = ReferenceEvaluator(model)
    for s in list(range(1, 21)) + [3, 1]:
        x = randn(1, s, d)
        got, want = rt.run({"x": x}), ref.run(None, {"x": x})
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["z"], want[1], rtol=1e-4, atol=1e-4)
    caches = [c for k in rt.result.kernels.values() for c in vars(k).values()
              if type(c).__name__ == "ShapeCache"]
    assert len(caches) == 2 and all(0 < len(c) <= c.size for c in caches)
