"""Post-op chains (oneDNN's post-ops, reference/000) on Conv (N16CX), Gemm, MatMul and
pplpy::MatMulBias (NDARRAY) and ConvTranspose (both formats) through pplpy.load, against
onnx.reference on the unfused model: chains of 1 (ConvTranspose) or 2 to 4 entries of every
kind (eltwise, sum, binary add/mul/max/min, prelu) and every broadcast (per tensor, per
channel, per element), operands constant or computed at run time, every ISA tier, 1 and 2
threads (the same bits); a ResNet basic block fuses to two Conv nodes; near misses (an
intermediate read twice, an operand that broadcasts the wrong way, one that widens the output)
stay separate nodes."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model, ort_session

import pplpy
from pplpy.optimizer import DEFAULT_PIPELINE
from pplpy.engines.x86.impls.post_ops import (Broadcast, PostOp, PostOpEntry, PostOpKind,
                                              eltwise)

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op_type, inputs, output, **attrs):
    return helper.make_node(op_type, inputs, [output], **attrs)


POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
PRODUCERS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulBias"} | POOLS


def writer(rt, name):
    """The producer writing value ``name``, through a Reorder to NDARRAY."""
    (node,) = [n for n in rt.graph.nodes if n.outputs[0] == name]
    return writer(rt, node.inputs[0]) if node.op_type == "Reorder" else node


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)[0]


def onnxruntime_reference(model, feeds):
    """ONNX Runtime's output: the oracle where the model has BatchNormalization, which
    onnx.reference (onnx 1.23) computes unlike the spec's formula (0.3 off on random
    inputs, where ONNX Runtime and pplpy agree to 1e-6)."""
    return ort_session(model).run(None, feeds)[0]


def load_and_check(model, feeds, isa, tmp_path, kinds, oracle=reference, min_len=2):
    """Fused runtimes (1 and 2 threads) match onnx.reference and each other; nothing but
    producers (and reorders) is left, and the chain of the one writing y has the kinds
    ``kinds`` (less leading Adds and Muls the optimiser folded into the producer's weights and
    bias), ``min_len`` entries at least; the
    unfused build matches too.  Returns the fused runtime and that chain."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    want = oracle(model, feeds)
    results = []
    for threads in (1, 2):
        rt = pplpy.load(path, max_isa=isa, num_threads=threads)
        assert {n.op_type for n in rt.graph.nodes} <= PRODUCERS | {"Reorder"}
        fused = writer(rt, "y")
        post_ops = rt.result.ops[fused].post_ops
        got = [e.kind for e in post_ops]
        folded = len(kinds) - len(got)
        assert got == kinds[folded:] and all(k is PostOpKind.BINARY for k in kinds[:folded])
        assert len(got) >= min_len, got
        results.append(rt.run(feeds)["y"])
    # absolute error relative to the output's scale: Winograd's transforms round more
    atol = 1e-4 * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=atol)
    np.testing.assert_array_equal(results[1], results[0])
    plain = pplpy.load(path, max_isa=isa, fusion=False).run(feeds)["y"]
    np.testing.assert_allclose(plain, want, rtol=1e-4, atol=atol)
    return rt, post_ops


def inputs_of(feeds):
    return [(name, FLOAT, list(v.shape)) for name, v in feeds.items()]


# Conv (N16CX, 21 output channels: a partial channel block and partial panels).  "r" is an
# element operand computed at run time in N16CX (another conv of the same shape); constants
# "s" (scalar), "ch" (per channel) and "sl" (PRelu slope per channel); a per-channel operand
# computed at run time: test_runtime_channel_operand_of_conv_fuses.
CONV_CHAINS = {
    "sum-relu": ([node("Add", ["t", "r"], "u"), node("Relu", ["u"], "y")],
                 [PostOpKind.SUM, PostOpKind.ELTWISE]),
    "mul-add-prelu-clip": ([node("Mul", ["ch", "t"], "u"), node("Add", ["u", "s"], "v"),
                            node("PRelu", ["v", "sl"], "z"),
                            node("Clip", ["z", "lo", "hi"], "y")],
                           [PostOpKind.BINARY, PostOpKind.BINARY, PostOpKind.PRELU,
                            PostOpKind.ELTWISE]),
    "sigmoid-max-min-tanh": ([node("Sigmoid", ["t"], "u"), node("Max", ["r", "u"], "v"),
                              node("Min", ["v", "s"], "z"), node("Tanh", ["z"], "y")],
                             [PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.BINARY,
                              PostOpKind.ELTWISE]),
    "add-ch-gelu-mul-r": ([node("Add", ["t", "ch"], "u"), node("Gelu", ["u"], "v"),
                           node("Mul", ["v", "r"], "y")],
                          [PostOpKind.BINARY, PostOpKind.ELTWISE, PostOpKind.BINARY]),
    "hardswish-min-ch-prelu-s": ([node("HardSwish", ["t"], "u"), node("Min", ["u", "ch"], "v"),
                                  node("PRelu", ["v", "s"], "y")],
                                 [PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.PRELU]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("algo", ["direct", "winograd", "depthwise", "pointwise"])
@pytest.mark.parametrize("chain", sorted(CONV_CHAINS))
def test_conv_chains(isa, algo, chain, tmp_path, monkeypatch):
    # pointwise: 1x1 over 90 flattened pixels, 37 output channels, whose last 16-channel
    # block is a half-valid panel on avx512 (the 28-row narrow tile of _brgemm_fp32.h)
    oc, k = (37, 1) if algo == "pointwise" else (21, 3)
    pads = [k // 2] * 4
    monkeypatch.setenv("PPLPY_CONV_ALGO", "winograd" if algo == "winograd" else "direct")
    ic, group = (oc, oc) if algo == "depthwise" else (19, 1)
    tail, kinds = CONV_CHAINS[chain]
    nodes = [node("Conv", ["x", "w", "b"], "t", pads=pads, group=group),
             node("Conv", ["x", "w2"], "r", pads=pads, group=group)] + tail
    inits = [("w", rand(oc, ic // group, k, k)), ("b", rand(oc)),
             ("w2", rand(oc, ic // group, k, k)), ("s", np.array([0.25], np.float32)),
             ("ch", rand(oc, 1, 1)), ("sl", rand(oc, 1, 1)),
             ("lo", np.float32(-0.5)), ("hi", np.float32(1.5))]
    feeds = {"x": rand(2, ic, 9, 10)}
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=20)
    load_and_check(model, feeds, isa, tmp_path, kinds)


# Gemm / MatMul / MatMulBias (NDARRAY, N = 37: a partial panel; K = 300: two K chunks).
# "e" an element operand computed at run time, "cv" per column at run time, constants "s",
# "ch" (per column) and "sl" (PRelu slope per column).
GEMM_CHAINS = {
    "add-ch-gelu-mul-e-relu": ([node("Add", ["t", "ch"], "u"), node("Gelu", ["u"], "v"),
                                node("Mul", ["e", "v"], "z"), node("Relu", ["z"], "y")],
                               [PostOpKind.BINARY, PostOpKind.ELTWISE, PostOpKind.BINARY,
                                PostOpKind.ELTWISE]),
    "sum-max-s-prelu-ch": ([node("Add", ["e", "t"], "u"), node("Max", ["u", "s"], "v"),
                            node("PRelu", ["v", "sl"], "y")],
                           [PostOpKind.SUM, PostOpKind.BINARY, PostOpKind.PRELU]),
    "min-cv-sum-sigmoid": ([node("Min", ["cv", "t"], "u"), node("Add", ["u", "e"], "v"),
                            node("Sigmoid", ["v"], "y")],
                           [PostOpKind.BINARY, PostOpKind.SUM, PostOpKind.ELTWISE]),
    "leaky-mul-s-prelu-e": ([node("LeakyRelu", ["t"], "u", alpha=0.1),
                             node("Mul", ["u", "s"], "v"), node("PRelu", ["v", "e"], "y")],
                            [PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.PRELU]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("producer", ["Gemm", "MatMul", "MatMul3d", "MatMulBias"])
@pytest.mark.parametrize("chain", sorted(GEMM_CHAINS))
def test_gemm_chains(isa, producer, chain, tmp_path):
    m, k, n = 23, 300, 37
    tail, kinds = GEMM_CHAINS[chain]
    lead = (2,) if producer in ("MatMul3d", "MatMulBias") else ()
    feeds = {"a": rand(*lead, m, k), "e": rand(*lead, m, n), "cv": rand(n)}
    inits = [("bw", rand(k, n)), ("s", np.array(0.3, np.float32)), ("ch", rand(n)),
             ("sl", rand(n))]
    if producer == "Gemm":
        head = [node("Gemm", ["a", "bw", "c"], "t", alpha=0.5)]
        inits.append(("c", rand(n)))
    elif producer == "MatMulBias":  # the optimiser makes it from MatMul + Add(bias), 3-D A
        head = [node("MatMul", ["a", "bw"], "mm"), node("Add", ["mm", "bias"], "t")]
        inits.append(("bias", rand(n)))
    else:
        head = [node("MatMul", ["a", "bw"], "t")]
    model = make_model(head + tail, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=20)
    load_and_check(model, feeds, isa, tmp_path, kinds)


# ConvTranspose (stride 2, output_padding 1; 21 output channels: chunks of 16 and 5, or 3
# groups of 7 whose chunks straddle N16CX blocks), NDARRAY from the graph input or N16CX
# after a Conv.  "r" an element operand computed at run time (another ConvTranspose of the
# same shape and format), "cv" per channel at run time; constants "s", "ch", "sl".  Only
# activations with f(0) = 0 in N16CX chains (the padding lanes rule).
DECONV_CHAINS = {
    "relu": ([node("Relu", ["t"], "y")], [PostOpKind.ELTWISE]),
    "add-cv": ([node("Add", ["cv", "t"], "y")], [PostOpKind.BINARY]),
    "sum-relu": ([node("Add", ["t", "r"], "u"), node("Relu", ["u"], "y")],
                 [PostOpKind.SUM, PostOpKind.ELTWISE]),
    "tanh-max-r-min-s": ([node("Tanh", ["t"], "u"), node("Max", ["r", "u"], "v"),
                          node("Min", ["v", "s"], "y")],
                         [PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.BINARY]),
    "mul-ch-add-s-prelu-ch": ([node("Mul", ["ch", "t"], "u"), node("Add", ["u", "s"], "v"),
                               node("PRelu", ["v", "sl"], "y")],
                              [PostOpKind.BINARY, PostOpKind.BINARY, PostOpKind.PRELU]),
    "prelu-s-mul-r-clip": ([node("PRelu", ["t", "s"], "u"), node("Mul", ["u", "r"], "v"),
                            node("Clip", ["v", "lo", "hi"], "y")],
                           [PostOpKind.PRELU, PostOpKind.BINARY, PostOpKind.ELTWISE]),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["ndarray", "n16cx"])
@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("chain", sorted(DECONV_CHAINS))
def test_conv_transpose_chains(isa, layout, group, chain, tmp_path):
    ic, oc = 12, 21
    tail, kinds = DECONV_CHAINS[chain]
    attrs = dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=group)
    src = "h" if layout == "n16cx" else "x"
    head = [node("Conv", ["x", "wc"], "h")] if layout == "n16cx" else []
    nodes = head + [node("ConvTranspose", [src, "w", "b"], "t", **attrs),
                    node("ConvTranspose", [src, "w2"], "r", **attrs)] + tail
    inits = [("wc", rand(ic, ic, 1, 1)), ("w", rand(ic, oc // group, 3, 3)), ("b", rand(oc)),
             ("w2", rand(ic, oc // group, 3, 3)), ("s", np.array([0.25], np.float32)),
             ("ch", rand(oc, 1, 1)), ("sl", rand(oc, 1, 1)),
             ("lo", np.float32(-0.5)), ("hi", np.float32(1.5))]
    feeds = {"x": rand(2, ic, 5, 6), "cv": rand(oc, 1, 1)}
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=20)
    # onnx.reference (1.23) fails on a grouped ConvTranspose: ONNX Runtime is the oracle there
    oracle = reference if group == 1 else onnxruntime_reference
    rt, _ = load_and_check(model, feeds, isa, tmp_path, kinds, oracle, min_len=1)
    fused = writer(rt, "y")
    assert fused.op_type == "ConvTranspose"
    assert rt.graph.values[fused.outputs[0]].format.name == layout.upper()


def test_conv_transpose_chain_survives_save_and_reload(tmp_path):
    """A ConvTranspose with post-ops is saved as pplpy::ConvTranspose and runs the same."""
    feeds = {"x": rand(1, 4, 5, 5)}
    nodes = [node("ConvTranspose", ["x", "w"], "t", strides=[2, 2]),
             node("Add", ["t", "s"], "u"), node("Relu", ["u"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)],
                       [("w", rand(4, 5, 3, 3)), ("s", np.array([0.1], np.float32))])
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    saved = tmp_path / "saved.onnx"
    pplpy.save_optimized_model(tmp_path / "m.onnx", saved)
    back = pplpy.load(saved)
    assert [n.op_type for n in back.graph.nodes if n.op_type != "Reorder"] == ["ConvTranspose"]
    np.testing.assert_array_equal(back.run(feeds)["y"], rt.run(feeds)["y"])
    np.testing.assert_allclose(rt.run(feeds)["y"], reference(model, feeds), rtol=1e-4,
                               atol=1e-4)


def test_conv_transpose_operand_per_pixel_does_not_fuse(tmp_path):
    feeds = {"x": rand(1, 8, 6, 6), "o": rand(1, 1, 6, 6)}
    nodes = [node("ConvTranspose", ["x", "w"], "t"), node("Mul", ["t", "o"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("w", rand(8, 8, 1, 1))])
    assert unfused(model, feeds, tmp_path, "ConvTranspose") == ["ConvTranspose", "Mul"]


# Pools (21 channels: a partial N16CX block), NDARRAY from the graph input or N16CX after a
# Conv.  "r" an element operand computed at run time (the same pool of another input, same
# format), "cv" per channel at run time; constants "s", "ch", "sl".
POOL_CHAINS = {
    "relu": ([node("Relu", ["t"], "y")], [PostOpKind.ELTWISE]),
    "add-ch": ([node("Add", ["t", "ch"], "y")], [PostOpKind.BINARY]),
    "sum-relu": ([node("Add", ["r", "t"], "u"), node("Relu", ["u"], "y")],
                 [PostOpKind.SUM, PostOpKind.ELTWISE]),
    "mul-cv-max-s-prelu-ch": ([node("Mul", ["t", "cv"], "u"), node("Max", ["u", "s"], "v"),
                               node("PRelu", ["v", "sl"], "y")],
                              [PostOpKind.BINARY, PostOpKind.BINARY, PostOpKind.PRELU]),
    "tanh-min-r-clip": ([node("Tanh", ["t"], "u"), node("Min", ["r", "u"], "v"),
                         node("Clip", ["v", "lo", "hi"], "y")],
                        [PostOpKind.ELTWISE, PostOpKind.BINARY, PostOpKind.ELTWISE]),
}
POOL_NODES = {
    "MaxPool": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "AveragePool": dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1],
                        count_include_pad=1),
    "GlobalAveragePool": {},
    "GlobalMaxPool": {},
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["ndarray", "n16cx"])
@pytest.mark.parametrize("pool", sorted(POOL_NODES))
@pytest.mark.parametrize("chain", sorted(POOL_CHAINS))
def test_pool_chains(isa, layout, pool, chain, tmp_path):
    c = 21
    tail, kinds = POOL_CHAINS[chain]
    attrs = POOL_NODES[pool]
    if layout == "n16cx":
        head, src, src2 = [node("Conv", ["x", "wc"], "h"), node("Conv", ["x2", "wc"], "h2")], \
            "h", "h2"
    else:
        head, src, src2 = [], "x", "x2"
    nodes = head + [node(pool, [src], "t", **attrs), node(pool, [src2], "r", **attrs)] + tail
    inits = [("wc", rand(c, c, 1, 1)), ("s", np.array([0.25], np.float32)),
             ("ch", rand(c, 1, 1)), ("sl", rand(c, 1, 1)),
             ("lo", np.float32(-0.5)), ("hi", np.float32(1.5))]
    feeds = {"x": rand(2, c, 7, 9), "x2": rand(2, c, 7, 9), "cv": rand(c, 1, 1)}
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits, opset=20)
    rt, _ = load_and_check(model, feeds, isa, tmp_path, kinds, min_len=1)
    fused = writer(rt, "y")
    assert fused.op_type == pool
    assert rt.graph.values[fused.outputs[0]].format.name == layout.upper()


def test_pool_chain_survives_save_and_reload(tmp_path):
    """A pool with post-ops is saved as its pplpy-domain twin and runs the same."""
    feeds = {"x": rand(1, 5, 6, 6), "cv": rand(1, 5, 1, 1)}
    nodes = [node("MaxPool", ["x"], "t", kernel_shape=[2, 2]), node("Mul", ["t", "cv"], "u"),
             node("Relu", ["u"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)])
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    pplpy.save_optimized_model(tmp_path / "m.onnx", tmp_path / "saved.onnx")
    back = pplpy.load(tmp_path / "saved.onnx")
    assert [n.op_type for n in back.graph.nodes if n.op_type != "Reorder"] == ["MaxPool"]
    np.testing.assert_array_equal(back.run(feeds)["y"], rt.run(feeds)["y"])
    np.testing.assert_allclose(rt.run(feeds)["y"], reference(model, feeds), rtol=1e-5,
                               atol=1e-6)


def test_maxpool_with_indices_does_not_fuse(tmp_path):
    feeds = {"x": rand(1, 4, 6, 6)}
    nodes = [helper.make_node("MaxPool", ["x"], ["t", "i"], kernel_shape=[2, 2]),
             node("Relu", ["t"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)])
    assert unfused(model, feeds, tmp_path, "MaxPool") == ["MaxPool", "Relu"]


def test_pool_operand_per_pixel_does_not_fuse(tmp_path):
    feeds = {"x": rand(1, 8, 6, 6), "o": rand(1, 1, 3, 3)}
    nodes = [node("AveragePool", ["x"], "t", kernel_shape=[2, 2], strides=[2, 2]),
             node("Add", ["t", "o"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)])
    assert unfused(model, feeds, tmp_path, "AveragePool") == ["AveragePool", "Add"]


def resnet_block(c=24, hw=8):
    """Conv-BN-Relu-Conv-BN-Add(x)-Relu, PyTorch's export of a basic block, after a stem
    Conv-Relu that makes its input x (N16CX, as inside a ResNet)."""
    def bn(name, x, out):
        return ([node("BatchNormalization", [x, f"{name}s", f"{name}b", f"{name}m", f"{name}v"],
                      out)],
                [(f"{name}s", RNG.random(c, np.float32) + 0.5), (f"{name}b", rand(c)),
                 (f"{name}m", rand(c)), (f"{name}v", RNG.random(c, np.float32) + 0.5)])
    n1, i1 = bn("bn1", "c1", "n1")
    n2, i2 = bn("bn2", "c2", "n2")
    nodes = ([node("Conv", ["x0", "w0"], "c0"), node("Relu", ["c0"], "x"),
              node("Conv", ["x", "w1"], "c1", pads=[1, 1, 1, 1])] + n1
             + [node("Relu", ["n1"], "r1"), node("Conv", ["r1", "w2"], "c2", pads=[1, 1, 1, 1])]
             + n2 + [node("Add", ["n2", "x"], "s"), node("Relu", ["s"], "y")])
    inits = [("w0", rand(c, 3, 1, 1)), ("w1", rand(c, c, 3, 3) * 0.2),
             ("w2", rand(c, c, 3, 3) * 0.2)] + i1 + i2
    feeds = {"x0": rand(1, 3, hw, hw)}
    return make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], inits), feeds


@pytest.mark.parametrize("isa", ISAS)
def test_resnet_basic_block_fuses_to_two_convs(isa, tmp_path):
    model, feeds = resnet_block()
    rt, post_ops = load_and_check(model, feeds, isa, tmp_path,
                                  [PostOpKind.SUM, PostOpKind.ELTWISE], onnxruntime_reference)
    # stem, then the block's two convs
    assert [n.op_type for n in rt.graph.nodes if n.op_type != "Reorder"] == ["Conv"] * 3
    assert post_ops[0] == PostOpEntry(PostOpKind.SUM, 0, 1.0, 0.0, post_ops[0].operand,
                                      Broadcast.ELEMENT)
    assert post_ops[1] == eltwise(PostOp.RELU)
    second = writer(rt, "y")
    assert second.inputs[post_ops[0].operand] == "x"  # the block's input, N16CX


def test_dump_graph_lists_the_chain(tmp_path):
    from pplpy.tools.pplnn import format_graph
    model, _ = resnet_block()
    onnx.save(model, tmp_path / "m.onnx")
    rt = pplpy.load(tmp_path / "m.onnx")
    text = format_graph(rt.graph, ops=rt.result.ops)
    line = [ln for ln in text.splitlines() if "post-ops" in ln and "sum" in ln]
    assert line and "relu" in line[0], text


# The engine's post-op fusion alone: without the optimiser's element-wise chains, which
# would join what an epilogue leaves (tests/optimizer/test_eltwise_chains.py).
NO_CHAINS = [e for e in DEFAULT_PIPELINE if e.pass_id != "fuse_eltwise_chains"]


def unfused(model, feeds, tmp_path, producer):
    """The nodes of the fused build (reorders aside); asserts it still matches reference."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, passes=NO_CHAINS)
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)
    return [n.op_type for n in rt.graph.nodes if n.op_type != "Reorder"]


def test_intermediate_read_twice_does_not_fuse(tmp_path):
    feeds = {"x": rand(1, 8, 6, 6)}
    nodes = [node("Conv", ["x", "w"], "t"), node("Relu", ["t"], "u"),
             node("Add", ["u", "t"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("w", rand(8, 8, 1, 1))])
    assert unfused(model, feeds, tmp_path, "Conv") == ["Conv", "Relu", "Add"]


@pytest.mark.parametrize("operand,lead", [((23, 1), ()), ((2, 23, 37), ())],
                         ids=["per-row", "widens"])
def test_operand_of_another_broadcast_does_not_fuse(operand, lead, tmp_path):
    feeds = {"a": rand(*lead, 23, 30), "o": rand(*operand)}
    nodes = [node("MatMul", ["a", "bw"], "t"), node("Add", ["t", "o"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("bw", rand(30, 37))])
    assert unfused(model, feeds, tmp_path, "MatMul") == ["MatMul", "Add"]


def test_runtime_channel_operand_of_conv_fuses(tmp_path):
    """Add keeps N16CX for a channel vector computed at run time: it joins the chain."""
    feeds = {"x": rand(1, 8, 6, 6), "cv": rand(1, 8, 1, 1)}
    nodes = [node("Conv", ["x", "w"], "t"), node("Add", ["t", "cv"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("w", rand(8, 8, 1, 1))])
    assert unfused(model, feeds, tmp_path, "Conv") == ["Conv"]


def test_conv_operand_per_pixel_does_not_fuse(tmp_path):
    feeds = {"x": rand(1, 8, 6, 6), "o": rand(1, 1, 6, 6)}
    nodes = [node("Conv", ["x", "w"], "t"), node("Mul", ["t", "o"], "y")]
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("w", rand(8, 8, 1, 1))])
    assert unfused(model, feeds, tmp_path, "Conv") == ["Conv", "Mul"]


def test_chain_of_32_post_ops_stops_there(tmp_path):
    feeds = {"a": rand(5, 7), "s": np.array([0.9], np.float32)}  # s at run time: no folding
    nodes = [node("MatMul", ["a", "bw"], "t0")]
    for i in range(40):
        nodes.append(node("Add" if i % 2 else "Mul", [f"t{i}", "s"], f"t{i + 1}"))
    nodes.append(node("Relu", ["t40"], "y"))
    model = make_model(nodes, inputs_of(feeds), [("y", FLOAT, None)], [("bw", rand(7, 9))])
    kinds = unfused(model, feeds, tmp_path, "MatMul")
    assert kinds[0] == "MatMul" and len(kinds) == 1 + 41 - 32
