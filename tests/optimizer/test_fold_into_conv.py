"""fold_into_conv / fold_into_gemm: BatchNormalization and per-channel Mul / Add folded into
the weights of the Conv, Gemm or MatMul before them.  Each case: the folded and the unfolded
(``fusion=False``) builds agree, and the graph after the pass has the expected nodes."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.engines.x86.impls.post_ops import PostOp, eltwise
from pplpy.models.onnx import load_model
from pplpy.optimizer import PassContext, PassManager
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

RNG = np.random.default_rng(11)


def rand(*shape, lo=None):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + lo if lo is not None else a


def model(nodes, inits, inputs, opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def bn(prefix, c, x, y, eps=1e-5, var_lo=0.5):
    inits = {f"{prefix}_s": rand(c), f"{prefix}_b": rand(c), f"{prefix}_m": rand(c),
             f"{prefix}_v": rand(c, lo=var_lo)}
    node = helper.make_node("BatchNormalization", [x] + list(inits), [y], epsilon=eps)
    return node, inits


def add_bn(nodes, inits, *args, **kwargs):
    node, more = bn(*args, **kwargs)
    nodes.append(node)
    inits.update(more)


def check(save_model, m, feeds, rtol=1e-4, atol=1e-5):
    """Folded vs unfolded vs the reference; returns the folded model's op types after the
    whole pipeline and the folded model."""
    path = save_model(m)
    fused, unfused = pplpy.load(path, num_threads=1), pplpy.load(path, num_threads=1,
                                                                   fusion=False)
    a, b = fused.run(feeds)["y"], unfused.run(feeds)["y"]
    ref = ReferenceEvaluator(m).run(None, feeds)[0]
    # float32 rounding scales with the terms summed, not with a result that cancels to
    # near 0 (a residual Add then Relu): atol is per unit of the output's largest value.
    atol *= max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    np.testing.assert_allclose(a, ref, rtol=rtol, atol=atol)
    return [n.op_type for n in fused.graph.nodes], fused, unfused


def rewrites(save_model, m, fusion=True):
    """The graph after the engine-independent passes, and the pass manager."""
    graph, _ = load_model(save_model(m))
    pm = PassManager(DEFAULT_PIPELINE)
    engine = pplpy.X86Engine(num_threads=1)
    pm.run(graph, PassContext(evaluate=engine.evaluate, fusion=fusion))
    return graph, pm


def changes(pm, pass_id):
    return sum(r.changes for r in pm.log if r.pass_id == pass_id)


def details(pm, pass_id):
    return {what: n for r in pm.log if r.pass_id == pass_id for what, n in r.details.items()}


def post_ops(loaded, op_type):
    return [loaded.result.ops[n].__dict__.get("post_ops") for n in loaded.graph.nodes
            if n.op_type == op_type]


def test_resnet_block_conv_bn_relu(save_model):
    """Conv(no bias) -> BN -> Relu: one Conv with a bias and a Relu post-op."""
    n, inits = bn("bn", 20, "a", "b")
    inits["w"] = rand(20, 8, 3, 3)
    m = model([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]), n,
               helper.make_node("Relu", ["b"], ["y"])], inits, [("x", [2, 8, 9, 9])])
    graph, pm = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["Conv", "Relu"]
    assert len(graph.nodes[0].inputs) == 3 and graph.nodes[0].outputs == ("b",)
    assert changes(pm, "fold_into_conv") == 1
    assert details(pm, "fold_into_conv") == {"BatchNormalization->Conv": 1}
    assert "w" not in graph.constants  # the unfolded weight is gone (DCE)
    types, fused, unfused = check(save_model, m, {"x": rand(2, 8, 9, 9)})
    assert "BatchNormalization" not in types and "Relu" not in types
    assert post_ops(fused, "Conv") == [[eltwise(PostOp.RELU, 0.0, 0.0)]]
    assert [n.op_type for n in unfused.graph.nodes].count("BatchNormalization") == 1


def test_resnet_block_with_residual_add(save_model):
    """Conv-BN-Relu-Conv-BN-Add(x)-Relu, channels 24 (not a multiple of 16), a shortcut
    Conv-BN: every BN folds; the residual Add (a tensor, not a constant) stays."""
    c = 24
    nodes, inits = [], {"w1": rand(c, c, 3, 3) * 0.2, "w2": rand(c, c, 3, 3) * 0.2,
                        "b2": rand(c), "ws": rand(c, c, 1, 1)}
    nodes.append(helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]))
    add_bn(nodes, inits, "bn1", c, "c1", "n1")
    nodes.append(helper.make_node("Relu", ["n1"], ["r1"]))
    nodes.append(helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]))
    add_bn(nodes, inits, "bn2", c, "c2", "n2", eps=1e-3)
    nodes.append(helper.make_node("Conv", ["x", "ws"], ["cs"]))
    add_bn(nodes, inits, "bns", c, "cs", "ns")
    nodes.append(helper.make_node("Add", ["n2", "ns"], ["s"]))
    nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    m = model(nodes, inits, [("x", [1, c, 10, 10])])
    graph, pm = rewrites(save_model, m)
    assert sorted(n.op_type for n in graph.nodes) == ["Add", "Conv", "Conv", "Conv", "Relu",
                                                      "Relu"]
    assert changes(pm, "fold_into_conv") == 3
    off, _ = rewrites(save_model, m, fusion=False)
    assert [n.op_type for n in off.nodes].count("BatchNormalization") == 3
    check(save_model, m, {"x": rand(1, c, 10, 10)})


@pytest.mark.parametrize("c", [32, 19])
def test_mobilenet_depthwise_conv_bn_clip(save_model, c):
    """Depthwise (group = channels) Conv-BN-Clip(0, 6), then pointwise Conv-BN."""
    nodes, inits = [], {"wd": rand(c, 1, 3, 3), "wp": rand(12, c, 1, 1),
                        "lo": np.float32(0), "hi": np.float32(6)}
    nodes.append(helper.make_node("Conv", ["x", "wd"], ["d"], group=c, pads=[1, 1, 1, 1],
                                  strides=[2, 2]))
    add_bn(nodes, inits, "bn1", c, "d", "nd")
    nodes.append(helper.make_node("Clip", ["nd", "lo", "hi"], ["r"]))
    nodes.append(helper.make_node("Conv", ["r", "wp"], ["p"]))
    add_bn(nodes, inits, "bn2", 12, "p", "y")
    m = model(nodes, inits, [("x", [1, c, 11, 11])])
    types, fused, _ = check(save_model, m, {"x": rand(1, c, 11, 11) * 3})
    assert types.count("BatchNormalization") == 0 and "Clip" not in types
    assert post_ops(fused, "Conv")[0] == [eltwise(PostOp.CLIP, 0.0, 6.0)]


def test_grouped_conv_bn(save_model):
    nodes, inits = [helper.make_node("Conv", ["x", "w"], ["a"], group=3)], {
        "w": rand(9, 2, 3, 3)}
    add_bn(nodes, inits, "bn", 9, "a", "y")
    m = model(nodes, inits, [("x", [2, 6, 7, 7])])
    types, _, _ = check(save_model, m, {"x": rand(2, 6, 7, 7)})
    assert "BatchNormalization" not in types and types.count("Conv") == 1


def test_bn_with_variance_near_zero_and_large_epsilon(save_model):
    """var = 0 (a dead channel) with epsilon: s = scale / sqrt(eps) is large but finite."""
    c = 5
    n, inits = bn("bn", c, "a", "y", eps=1e-2)
    inits["bn_v"] = np.array([0, 1e-8, 1e-6, 0.5, 2], np.float32)
    inits["w"] = rand(c, 3, 1, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]), n], inits, [("x", [1, 3, 4, 4])])
    check(save_model, m, {"x": rand(1, 3, 4, 4)}, rtol=1e-4, atol=1e-4)
    n, inits2 = bn("bn", c, "a", "y", eps=1e-5)
    inits2["bn_v"] = np.zeros(c, np.float32)
    inits2["w"] = inits["w"]
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]), n], inits2, [("x", [1, 3, 4, 4])])
    types, _, _ = check(save_model, m, {"x": rand(1, 3, 4, 4)}, rtol=1e-4, atol=1e-3)
    assert "BatchNormalization" not in types


def test_conv_mul_add_per_channel(save_model):
    """Conv -> Mul(1, C, 1, 1) -> Add(C, 1, 1): both fold; a constant that varies along a
    spatial axis, or a channel vector on the wrong axis, does not."""
    c = 6
    inits = {"w": rand(c, 3, 3, 3), "b": rand(c), "s": rand(1, c, 1, 1), "t": rand(c, 1, 1)}
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["a"]),
               helper.make_node("Mul", ["s", "a"], ["m"]),
               helper.make_node("Add", ["m", "t"], ["y"])], inits, [("x", [1, 3, 8, 8])])
    graph, pm = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["Conv"]
    assert details(pm, "fold_into_conv") == {"Mul->Conv": 1, "Add->Conv": 1}
    check(save_model, m, {"x": rand(1, 3, 8, 8)})
    for bad in (rand(1, 1, 6, 1), rand(6)):  # along H; along W (6 == C by chance)
        m = model([helper.make_node("Conv", ["x", "w"], ["a"]),
                   helper.make_node("Mul", ["a", "s"], ["y"])], {"w": inits["w"], "s": bad},
                  [("x", [1, 3, 8, 8])])
        graph, _ = rewrites(save_model, m)
        assert [n.op_type for n in graph.nodes] == ["Conv", "Mul"]
        check(save_model, m, {"x": rand(1, 3, 8, 8)})


def test_no_fold_when_conv_output_is_read_twice_or_returned(save_model):
    n, inits = bn("bn", 4, "a", "b")
    inits["w"] = rand(4, 3, 1, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]), n,
               helper.make_node("Add", ["a", "b"], ["y"])], inits, [("x", [1, 3, 5, 5])])
    graph, _ = rewrites(save_model, m)
    assert "BatchNormalization" in [n.op_type for n in graph.nodes]
    check(save_model, m, {"x": rand(1, 3, 5, 5)})
    # The Conv's output is a graph output: kept.
    graph_proto = m.graph
    graph_proto.output.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, None))
    graph, _ = rewrites(save_model, m)
    assert "BatchNormalization" in [n.op_type for n in graph.nodes]


def test_no_fold_with_weights_computed_at_run_time(save_model):
    n, inits = bn("bn", 4, "a", "y")
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]), n], inits,
              [("x", [1, 3, 5, 5]), ("w", [4, 3, 1, 1])])
    graph, _ = rewrites(save_model, m)
    assert "BatchNormalization" in [n.op_type for n in graph.nodes]


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_mul_add_per_feature(save_model, trans_b):
    """Gemm(alpha, beta, C) -> Mul(per feature) -> Add(per feature) -> Relu: one Gemm with a
    Relu post-op; transB handled."""
    k, n = 21, 18
    b = rand(n, k) if trans_b else rand(k, n)
    inits = {"B": b, "C": rand(n), "s": rand(n), "t": rand(1, n)}
    m = model([helper.make_node("Gemm", ["x", "B", "C"], ["g"], transB=trans_b, alpha=0.5,
                                beta=2.0),
               helper.make_node("Mul", ["g", "s"], ["m"]),
               helper.make_node("Add", ["t", "m"], ["a"]),
               helper.make_node("Relu", ["a"], ["y"])], inits, [("x", [5, k])])
    graph, _ = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["Gemm", "Relu"]
    assert graph.nodes[0].param.beta == 1.0 and graph.nodes[0].param.alpha == 0.5
    types, fused, _ = check(save_model, m, {"x": rand(5, k)})
    assert types == ["Gemm"]
    assert post_ops(fused, "Gemm") == [[eltwise(PostOp.RELU, 0.0, 0.0)]]


def test_gemm_bn_without_c(save_model):
    n, inits = bn("bn", 10, "g", "y")
    inits["B"] = rand(7, 10)
    m = model([helper.make_node("Gemm", ["x", "B"], ["g"]), n], inits, [("x", [3, 7])])
    types, _, _ = check(save_model, m, {"x": rand(3, 7)})
    assert types == ["Gemm"]


def test_matmul_add_becomes_gemm_and_relu_fuses(save_model):
    inits = {"B": rand(16, 10), "bias": rand(10), "s": rand(10)}
    m = model([helper.make_node("MatMul", ["x", "B"], ["mm"]),
               helper.make_node("Mul", ["mm", "s"], ["ms"]),
               helper.make_node("Add", ["ms", "bias"], ["a"]),
               helper.make_node("Relu", ["a"], ["y"])], inits, [("x", [4, 16])])
    graph, pm = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["Gemm", "Relu"]
    assert details(pm, "fold_into_gemm") == {"Mul->MatMul": 1, "Add->Gemm": 1}
    types, fused, _ = check(save_model, m, {"x": rand(4, 16)})
    assert types == ["Gemm"]


def test_batched_matmul_keeps_the_add_but_fuses_relu(save_model):
    """A 3-D A: Mul folds into B, the Add is not a Gemm's C (Gemm is 2-D): fuse_matmul_bias
    makes the pair one MatMulBias; MatMul -> Relu fuses."""
    inits = {"B": rand(16, 10), "bias": rand(10), "s": rand(10)}
    m = model([helper.make_node("MatMul", ["x", "B"], ["mm"]),
               helper.make_node("Mul", ["mm", "s"], ["ms"]),
               helper.make_node("Add", ["ms", "bias"], ["y"])], inits, [("x", [2, 4, 16])])
    graph, _ = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["MatMulBias"]
    check(save_model, m, {"x": rand(2, 4, 16)})
    m = model([helper.make_node("MatMul", ["x", "B"], ["mm"]),
               helper.make_node("Sigmoid", ["mm"], ["y"])], inits, [("x", [2, 4, 16])])
    types, fused, _ = check(save_model, m, {"x": rand(2, 4, 16)})
    assert types == ["MatMul"]
    assert post_ops(fused, "MatMul") == [[eltwise(PostOp.SIGMOID, 0.0, 0.0)]]


@pytest.mark.parametrize("op, operand_first", [("Mul", False), ("Div", False), ("Sub", True),
                                               ("Add", False)])
def test_matmul_bias_takes_an_affine_after_its_bias(save_model, op, operand_first):
    """MatMul (3-D A) + Add(bias) is one MatMulBias; the arithmetic after the bias folds into
    its W and bias on the pipeline's second fold_into_gemm; the Relu after it then fuses."""
    inits = {"B": rand(16, 10), "bias": rand(10), "c": rand(10, lo=0.5)}
    operands = ["c", "a"] if operand_first else ["a", "c"]
    m = model([helper.make_node("MatMul", ["x", "B"], ["mm"]),
               helper.make_node("Add", ["mm", "bias"], ["a"]),
               helper.make_node(op, operands, ["s"]),
               helper.make_node("Relu", ["s"], ["y"])], inits, [("x", [2, 4, 16])])
    graph, pm = rewrites(save_model, m)
    assert [n.op_type for n in graph.nodes] == ["MatMulBias", "Relu"]
    folds = [r.details for r in pm.log if r.pass_id == "fold_into_gemm"]
    assert [dict(d) for d in folds] == [{}, {f"{op}->MatMulBias": 1}]
    types, fused, _ = check(save_model, m, {"x": rand(2, 4, 16)})
    assert types == ["MatMulBias"]
    assert post_ops(fused, "MatMulBias") == [[eltwise(PostOp.RELU, 0.0, 0.0)]]


def test_matmul_bias_with_post_ops_keeps_the_affine_after_them(save_model):
    """A MatMulBias read back from a saved model with a Relu post-op: Mul(-1) after it is
    not a map of the bias (relu(-y) is not -relu(y)), so it must not fold into W and b."""
    w, bias = rand(16, 10), rand(10)
    node = helper.make_node("MatMulBias", ["x", "B", "bias"], ["r"], domain="pplpy",
                            post_ops=["relu"], post_op_params=[0.0, 0.0],
                            post_op_operands=[-1], post_op_broadcasts=[0])
    m = model([node, helper.make_node("Mul", ["r", "minus"], ["y"])],
              {"B": w, "bias": bias, "minus": np.float32(-1.0)}, [("x", [2, 4, 16])])
    m.opset_import.append(helper.make_opsetid("pplpy", 1))
    x = rand(2, 4, 16)
    got = pplpy.load(save_model(m), num_threads=1).run({"x": x})["y"]
    np.testing.assert_allclose(got, -np.maximum(x @ w + bias, 0), rtol=1e-5, atol=1e-5)


def test_disable_fusion_turns_the_folds_off(save_model):
    n, inits = bn("bn", 4, "a", "y")
    inits["w"] = rand(4, 3, 1, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]), n], inits, [("x", [1, 3, 5, 5])])
    graph, pm = rewrites(save_model, m, fusion=False)
    assert "BatchNormalization" in [n.op_type for n in graph.nodes]
    # The folds run in the "fusion" mode only: the no_fusion build skips them.
    assert not [r for r in pm.log if r.pass_id.startswith("fold_")]


def flattened_bn(x_dims, flat, w_cols=12, back=True, extra_reader=False, act="HardSwish"):
    """LeViT's Linear -> BatchNorm1d: MatMul, Reshape to ``flat``, BN, Reshape back (when
    ``back``), an activation; ``extra_reader``: the flattened value is also a second output
    of the graph's last node, through an Add."""
    nodes = [helper.make_node("MatMul", ["x", "B"], ["mm"]),
             helper.make_node("Reshape", ["mm", "flat"], ["f"])]
    inits = {"B": rand(x_dims[-1], w_cols), "flat": np.asarray(flat, np.int64)}
    add_bn(nodes, inits, "bn", flat[1], "f", "n")
    last = "n"
    if back:
        nodes.append(helper.make_node("Reshape", ["n", "back"], ["r"]))
        inits["back"] = np.asarray(x_dims[:-1] + [w_cols], np.int64)
        last = "r"
    if extra_reader:
        nodes.append(helper.make_node("Add", [last, "f"], ["s"]) if not back else
                     helper.make_node("Add", ["r", "mm"], ["s"]))
        last = "s"
    nodes.append(helper.make_node(act, [last], ["y"]))
    return model(nodes, inits, [("x", x_dims)])


@pytest.mark.parametrize("x_dims", [[2, 5, 16], [10, 16], [2, 3, 5, 16]])
@pytest.mark.parametrize("back", [False, True])
def test_batchnorm_of_a_flattened_projection_folds(save_model, x_dims, back):
    """BN over the columns of a MatMul's output flattened to (rows, C) folds into W and a
    bias: a MatMulBias (N-D A) or a Gemm (2-D A), the Reshape then writing the BN's output;
    an activation right after that Reshape fuses into the projection's epilogue."""
    rows = int(np.prod(x_dims[:-1]))
    m = flattened_bn(x_dims, [rows, 12], back=back)
    graph, pm = rewrites(save_model, m)
    want = "Gemm" if len(x_dims) == 2 else "MatMulBias"
    assert "BatchNormalization" not in [n.op_type for n in graph.nodes]
    assert details(pm, "fold_into_gemm") == {
        f"BatchNormalization->{want} (through a flattening Reshape)": 1}
    types, fused, _ = check(save_model, m, {"x": rand(*x_dims)})
    assert types.count(want) == 1 and "BatchNormalization" not in types
    if not back:
        assert post_ops(fused, want) == [[eltwise(PostOp.HARD_SWISH, 0.0, 0.0)]]


def test_batchnorm_of_a_reshaped_gemm_folds(save_model):
    """A Gemm's (M, N) output, reshaped to itself, then BN over its columns: into the Gemm."""
    nodes = [helper.make_node("Gemm", ["x", "B", "C"], ["g"], transB=1),
             helper.make_node("Reshape", ["g", "flat"], ["f"])]
    inits = {"B": rand(12, 16), "C": rand(12), "flat": np.asarray([-1, 12], np.int64)}
    add_bn(nodes, inits, "bn", 12, "f", "y")
    m = model(nodes, inits, [("x", [6, 16])])
    graph, pm = rewrites(save_model, m)
    assert details(pm, "fold_into_gemm") == {
        "BatchNormalization->Gemm (through a flattening Reshape)": 1}
    types, _, _ = check(save_model, m, {"x": rand(6, 16)})
    assert "BatchNormalization" not in types


@pytest.mark.parametrize("case", ["last_axis_split", "read_twice", "not_flat", "rank_1"])
def test_batchnorm_of_a_reshape_that_moves_channels_stays(save_model, case):
    """Only a Reshape that merges the leading dims and keeps the columns as the BN's
    channels, read by the BN alone, lets the BN fold."""
    x_dims, flat, kwargs = {
        "last_axis_split": ([2, 5, 16], [20, 6], {}),     # columns cut in two
        "read_twice": ([2, 5, 16], [10, 12], {"extra_reader": True}),
        "not_flat": ([2, 5, 16], [2, 60], {}),             # BN over (2, 60): not the columns
        "rank_1": ([4, 16], [4, 12, 1], {"back": True}),   # 3-D BN input
    }[case]
    m = flattened_bn(x_dims, flat, **kwargs)
    graph, pm = rewrites(save_model, m)
    assert "BatchNormalization" in [n.op_type for n in graph.nodes]
    check(save_model, m, {"x": rand(*x_dims)})
