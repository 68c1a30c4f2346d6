"""Conv, Gemm and MatMul through pplpy.load against onnx.reference, every ISA cap: weights
constant (packed once, raw copy released) or computed at run time (packed inside the step),
fused post-ops, batched MatMul, and the same bits for teams of 1, 2 and 3 threads."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from pplpy.engines.x86.impls.post_ops import PostOp

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def declared(names, feeds):
    """Graph inputs with the shapes of their feeds."""
    return [(name, FLOAT, list(feeds[name].shape)) for name in names]


def check(model, feeds, isa, tmp_path, threads=(1, 2, 3), fused=None):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    results = []
    for t in threads:
        rt = pplpy.load(path, max_isa=isa, num_threads=t)
        if fused is not None:
            assert [n.op_type for n in rt.graph.nodes if n.op_type not in ("Reorder",)] == fused
        results.append(rt.run(feeds)["y"])
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4)
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("constant_w", [True, False], ids=["const-w", "run-time-w"])
@pytest.mark.parametrize("group,ic,oc,kernel,attrs", [
    (1, 19, 37, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    (3, 12, 18, (3, 3), {"pads": [0, 1, 2, 0], "dilations": [2, 1]}),
    (20, 20, 20, (5, 5), {"pads": [2, 2, 2, 2]}),
    (1, 19, 21, (3,), {"pads": [1, 1]}),                             # 1-D
])
def test_conv_relu(isa, constant_w, group, ic, oc, kernel, attrs, tmp_path):
    rank = len(kernel)
    spatial = (9, 11)[:rank]
    w = rand(oc, ic // group, *kernel)
    b = rand(oc)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], group=group, **attrs),
             helper.make_node("Relu", ["t"], ["y"])]
    inits = [("b", b)] + ([("w", w)] if constant_w else [])
    feeds = {"x": rand(2, ic, *spatial)}
    if not constant_w:
        feeds["w"] = w
    model = make_model(nodes, declared(feeds, feeds), [("y", FLOAT, None)], inits)
    check(model, feeds, isa, tmp_path, fused=["Conv"])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("constant_b", [True, False], ids=["const-b", "run-time-b"])
@pytest.mark.parametrize("trans_a,trans_b,c_shape", [(0, 0, (37,)), (1, 1, (23, 1)),
                                                      (0, 1, (23, 37)), (1, 0, None)])
def test_gemm_sigmoid(isa, constant_b, trans_a, trans_b, c_shape, tmp_path):
    m, k, n = 23, 300, 37
    b = rand(n, k) if trans_b else rand(k, n)
    names = ["a", "b"] + ([] if c_shape is None else ["c"])
    nodes = [helper.make_node("Gemm", names, ["t"], transA=trans_a, transB=trans_b, alpha=0.7,
                              beta=-1.3),
             helper.make_node("Sigmoid", ["t"], ["y"])]
    inits = [("b", b)] if constant_b else []
    feeds = {"a": rand(k, m) if trans_a else rand(m, k)}
    if not constant_b:
        feeds["b"] = b
    if c_shape is not None:  # C constant with a constant B, else computed at run time
        if constant_b:
            inits.append(("c", rand(*c_shape)))
        else:
            feeds["c"] = rand(*c_shape)
    model = make_model(nodes, declared(feeds, feeds), [("y", FLOAT, None)], inits)
    check(model, feeds, isa, tmp_path, fused=["Gemm"])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("constant_b", [True, False], ids=["const-b", "run-time-b"])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 17, 40), (3, 40, 33)),
                                             ((4, 17, 40), (40, 33)), ((40,), (2, 40, 33)),
                                             ((2, 1, 5, 40), (1, 3, 40, 1)),
                                             ((1, 2048), (2048, 1000)), ((40,), (40,)),
                                             ((4, 0), (0, 20)), ((2, 4, 0), (2, 0, 5))])
def test_matmul(isa, constant_b, a_shape, b_shape, tmp_path):
    b = rand(*b_shape)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    feeds = {"a": rand(*a_shape)}
    if not constant_b:
        feeds["b"] = b
    model = make_model(nodes, declared(feeds, feeds), [("y", FLOAT, None)],
                       [("b", b)] if constant_b else [])
    check(model, feeds, isa, tmp_path, threads=(1, 2))


def test_constant_weights_are_released(tmp_path):
    """Packed weights replace the raw constants: the runtime holds them once."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["t"], ["f"]),
             helper.make_node("Gemm", ["f", "g", "c"], ["y"], transB=1)]
    inits = [("w", rand(8, 3, 3, 3)), ("b", rand(8)), ("g", rand(10, 8 * 4 * 4)),
             ("c", rand(10))]
    model = make_model(nodes, [("x", FLOAT, [1, 3, 4, 4])], [("y", FLOAT, None)], inits)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path)
    assert not {"w", "b", "g", "c"} & set(rt.graph.constants)
    feeds = {"x": rand(1, 3, 4, 4)}
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("code", [PostOp.TANH, PostOp.HARD_SWISH])
@pytest.mark.parametrize("group", [1, 24])
def test_every_activation_code_runs_in_the_conv_epilogue(code, group):
    """The direct and depthwise conv epilogues apply every code of _activation_fp32.h, not
    only the first four (fusion may hand them any activation of the table)."""
    from pplpy.common.isa import supported_isas
    from pplpy.engines.x86.impls.dispatch import load_variant

    rng = np.random.default_rng(5)
    c = 24
    x = rng.standard_normal((1, c, 6, 6)).astype(np.float32)
    w = rng.standard_normal((c, c // group, 3, 3)).astype(np.float32)
    conv = load_variant("conv_fp32", supported_isas()[0])
    xb = np.zeros((1, 2, 6, 6, 16), np.float32)
    xb[:, 0, :, :, :16] = x[0, :16].transpose(1, 2, 0)
    xb[:, 1, :, :, :8] = x[0, 16:].transpose(1, 2, 0)
    yb = np.zeros_like(xb)
    conv.conv2d_n16cx_fp32(xb, conv.conv_pack_weight(w, group), None, yb, c, c, group, 3, 3,
                           1, 1, 1, 1, 1, 1, int(code), 0.0, 0.0, 1)
    y = np.concatenate([yb[0, 0, :, :, :16], yb[0, 1, :, :, :8]], -1).transpose(2, 0, 1)
    ref = ReferenceEvaluator(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=group)], "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])).run(None, {"x": x, "w": w})[0][0]
    want = np.tanh(ref) if code == PostOp.TANH else ref * np.clip(ref / 6 + 0.5, 0, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
