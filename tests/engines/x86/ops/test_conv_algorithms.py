"""Conv's algorithms (direct, Winograd F(4x4, 3x3)) through pplpy.load against onnx.reference,
every ISA cap: which layers choose which, PPLPY_CONV_ALGO, post-ops, threads, and that both
algorithms agree."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from pplpy.engines.x86.ops.onnx.conv import choose_algorithm, winograd_pays_for_team
from pplpy.errors import PplError
from pplpy.params.onnx import ConvParam
from pplpy.tools.pplnn import format_graph

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_model(ic, oc, h, w, pads=(1, 1, 1, 1), bias=True, activation=None, kernel=3,
               strides=(1, 1), constant_w=True):
    wt = (rand(oc, ic, kernel, kernel) / np.sqrt(ic * kernel * kernel)).astype(np.float32)
    inputs = ["x", "w"] + (["b"] if bias else [])
    out = "t" if activation else "y"
    nodes = [helper.make_node("Conv", inputs, [out], pads=list(pads), strides=list(strides))]
    if activation:
        nodes.append(helper.make_node(activation, ["t"], ["y"]))
    inits = ([("w", wt)] if constant_w else []) + ([("b", rand(oc))] if bias else [])
    feeds = {"x": rand(2, ic, h, w)}
    if not constant_w:
        feeds["w"] = wt
    declared = [(name, FLOAT, list(v.shape)) for name, v in feeds.items()]
    return make_model(nodes, declared, [("y", FLOAT, None)], inits), feeds


def run(model, feeds, tmp_path, isa=None, threads=1, algo=None, monkeypatch=None):
    """(output, the Conv kernel's algorithm)."""
    if algo is not None:
        monkeypatch.setenv("PPLPY_CONV_ALGO", algo)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=threads)
    kernel, = [k for n, k in rt.result.kernels.items() if n.op_type == "Conv"]
    return rt.run(feeds)["y"], kernel.algorithm


def assert_close(got, want):
    """Winograd's error grows with the output magnitude: tolerances relative to it."""
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


# (ic, oc, h, w, pads, bias, activation)
CASES = [
    (16, 16, 8, 8, (1, 1, 1, 1), True, None),
    (20, 37, 11, 13, (1, 1, 1, 1), True, "Relu"),      # channels not multiples of 16
    (33, 17, 11, 9, (0, 0, 0, 0), False, None),       # no pads, odd sizes
    (24, 40, 10, 9, (1, 0, 0, 1), True, "Sigmoid"),   # asymmetric pads
    (64, 64, 14, 14, (1, 1, 1, 1), True, "LeakyRelu"),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_winograd_matches_reference(isa, case, tmp_path, monkeypatch):
    ic, oc, h, w, pads, bias, activation = case
    model, feeds = conv_model(ic, oc, h, w, pads, bias, activation)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    one, algo = run(model, feeds, tmp_path, isa, 1, "auto", monkeypatch)
    assert algo == "winograd_f4x3"
    assert_close(one, want)
    two, _ = run(model, feeds, tmp_path, isa, 2)
    np.testing.assert_array_equal(two, one)  # the split does not depend on the team
    direct, algo = run(model, feeds, tmp_path, isa, 1, "direct", monkeypatch)
    assert algo == "direct"
    assert_close(direct, want)
    assert_close(one, direct)


@pytest.mark.parametrize("isa", ISAS)
def test_forced_winograd_on_small_layers(isa, tmp_path, monkeypatch):
    """PPLPY_CONV_ALGO=winograd runs layers auto leaves direct: few channels, tiny images."""
    for ic, oc, h, w in [(3, 5, 9, 7), (8, 16, 4, 5), (16, 16, 2, 3)]:
        model, feeds = conv_model(ic, oc, h, w)
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        assert run(model, feeds, tmp_path, isa, 1, "auto", monkeypatch)[1] == "direct"
        got, algo = run(model, feeds, tmp_path, isa, 2, "winograd", monkeypatch)
        assert algo == "winograd_f4x3"
        assert_close(got, want)


@pytest.mark.parametrize("kwargs", [
    {"kernel": 5, "pads": (2, 2, 2, 2)},
    {"strides": (2, 2)},
    {"constant_w": False},
], ids=["5x5", "stride-2", "run-time-w"])
def test_winograd_falls_back_to_direct(kwargs, tmp_path, monkeypatch):
    model, feeds = conv_model(16, 16, 9, 9, **kwargs)
    got, algo = run(model, feeds, tmp_path, None, 1, "winograd", monkeypatch)
    assert algo == "direct"
    assert_close(got, ReferenceEvaluator(model).run(None, feeds)[0])


def test_choose_algorithm():
    p = ConvParam(pads=(1, 1, 1, 1))
    w = (64, 64, 3, 3)
    assert choose_algorithm(p, (1, 64, 56, 56), w, True, (56, 56), "auto") == "winograd_f4x3"
    assert choose_algorithm(p, None, w, True, None, "auto") == "winograd_f4x3"  # unknown H, W
    assert choose_algorithm(p, (1, 64, 4, 4), w, True, (4, 4), "auto") == "direct"
    big = (256, 256, 3, 3)
    assert choose_algorithm(p, (1, 256, 14, 14), big, True, (14, 14), "auto") == "winograd_f4x3"
    assert choose_algorithm(p, (1, 256, 7, 7), big, True, (7, 7), "auto") == "direct"
    wide = (512, 512, 3, 3)
    assert choose_algorithm(p, (1, 512, 28, 28), wide, True, (28, 28), "auto") == "winograd_f4x3"
    assert choose_algorithm(p, (1, 512, 14, 14), wide, True, (14, 14), "auto") == "winograd_f4x3"
    assert choose_algorithm(p, (1, 512, 7, 7), wide, True, (7, 7), "auto") == "direct"
    assert choose_algorithm(p, None, (512, 2048, 3, 3), True, None, "auto") == "winograd_f4x3"
    assert choose_algorithm(p, None, (1024, 2048, 3, 3), True, None, "auto") == "direct"  # cap
    assert choose_algorithm(p, (1, 8, 56, 56), (64, 8, 3, 3), True, (56, 56), "auto") == "direct"
    assert choose_algorithm(p, (1, 64, 56, 56), w, False, (56, 56), "auto") == "direct"
    assert choose_algorithm(ConvParam(group=2), None, (64, 32, 3, 3), True) == "direct"
    assert choose_algorithm(ConvParam(dilations=(2, 2)), None, w, True) == "direct"
    assert choose_algorithm(p, (1, 64, 56, 56), w, True, (56, 56), "direct") == "direct"
    assert choose_algorithm(p, (1, 8, 4, 4), (8, 8, 3, 3), True, (4, 4), "winograd") \
        == "winograd_f4x3"
    with pytest.raises(PplError, match="PPLPY_CONV_ALGO"):
        choose_algorithm(p, None, w, True, None, "fast")


def test_winograd_pays_for_team():
    assert winograd_pays_for_team(2, 14, 1) and winograd_pays_for_team(2, 14, 2)
    assert not winograd_pays_for_team(2, 14, 16)    # 1/2 of Winograd's time vs 1/14
    assert winograd_pays_for_team(16, 32, 16)       # all threads busy in both: fewer FLOPs
    assert winograd_pays_for_team(8, 32, 16)        # ties go to Winograd (1/16 each)


@pytest.mark.parametrize("isa", ISAS)
def test_large_team_takes_direct_where_winograd_has_few_items(isa, tmp_path, monkeypatch):
    """DenseNet-121's 128 -> 32 3x3 at 14x14: 16 tiles in blocks of at least a register tile
    (14 rows on avx512, 6 on fma) and one or two output panels make 2 (avx512) or 6 (fma)
    Winograd work items, so a team of 16 runs it direct (14 rows cut for the team); sse's
    2-row tiles give Winograd 16 items, and it keeps them.  One thread keeps Winograd.  All
    match the reference."""
    monkeypatch.delenv("PPLPY_CONV_ALGO", raising=False)
    model, _ = conv_model(128, 32, 14, 14)
    feeds = {"x": rand(1, 128, 14, 14)}
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    one, algo_one = run(model, feeds, tmp_path, isa, 1)
    many, algo_many = run(model, feeds, tmp_path, isa, 16)
    many_want = "winograd_f4x3" if isa == "sse" else "direct"
    assert (algo_one, algo_many) == ("winograd_f4x3", many_want)
    assert_close(one, want)
    assert_close(many, want)


@pytest.mark.parametrize("forced", [None, "direct"])
def test_dump_graph_shows_the_algorithm(tmp_path, monkeypatch, forced):
    """One thread: a team of every CPU (the default) took this layer direct on the 16-core
    Xeon, where Winograd's few items would leave most of the team idle."""
    if forced:
        monkeypatch.setenv("PPLPY_CONV_ALGO", forced)
    else:
        monkeypatch.delenv("PPLPY_CONV_ALGO", raising=False)
    model, _ = conv_model(32, 32, 16, 16, activation="Relu")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=1)
    text = format_graph(rt.graph, rt.result.ops, rt.tensor_shapes(), kernels=rt.result.kernels)
    assert f"algorithm  {forced or 'winograd_f4x3'}" in text


def test_strided_conv_stack_over_a_free_length_loads(isa, tmp_path):
    """wav2vec2's feature encoder: 1-D convs (kernel 10 stride 5, then kernel 3 stride 2)
    over a free length.  At build time that length holds its probe value, which the stack
    takes below the last kernel's size: the kernel's algorithm choice must take the size as
    unknown (loading had failed with an internal error), and every real length run; one too
    short for the stack is the same ShapeError ONNX Runtime reports."""
    chans, nodes, inits, x = 4, [], [], "x"
    for i, (k, s) in enumerate([(10, 5), (3, 2), (3, 2), (3, 2), (3, 2)]):
        inits.append((f"w{i}", rand(chans, 1 if i == 0 else chans, k) / np.float32(k * chans)))
        out = "y" if i == 4 else f"c{i}"
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [out], strides=[s]))
        x = out
    model = make_model(nodes, [("x", FLOAT, [1, 1, "T"])], [("y", FLOAT, None)], inits)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=1)
    for length in (400, 1000, 4001):
        feeds = {"x": rand(1, 1, length)}
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(PplError, match="smaller than the effective kernel"):
        rt.run({"x": rand(1, 1, 60)})
