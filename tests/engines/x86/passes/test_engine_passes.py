"""Each engine pass on a small graph: what it guarantees to the next one."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls.post_ops import PostOp, eltwise
from pplpy.engines.x86.pipeline import OPTIMIZER_PREFIX, PASS_NAMES
from pplpy.models.onnx import load_model
from pplpy.optimizer import PassManager
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

RNG = np.random.default_rng(3)
N16CX, NDARRAY = DataFormat.N16CX, DataFormat.NDARRAY


def model(nodes, inits=(), inputs=(("x", [1, 3, 6, 6]),), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def build(save_model, onnx_model, stop_after=None, fusion=True):
    """Run the pipeline; return the state as it was after ``stop_after`` (or the end)."""
    snapshots = {}

    def on_pass(name, state):
        snapshots[name] = ({n: (n.op_type, n.inputs, n.outputs) for n in state.graph.nodes},
                           {k: v.format for k, v in state.graph.values.items()})

    graph, unparsed = load_model(save_model(onnx_model))
    engine = pplpy.X86Engine(num_threads=1, fusion=fusion)
    result = engine.process(graph, {i.name: i.dims for i in graph.inputs},
                            PassManager(DEFAULT_PIPELINE), on_pass)
    return result, snapshots


W = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)


def test_pipeline_runs_every_pass_in_order(save_model):
    result, snapshots = build(save_model, model([helper.make_node("Relu", ["x"], ["y"])]))
    assert [name for name, _ in result.log] == list(PASS_NAMES)
    # The graph optimiser's passes report inside graph_rewrites, in pipeline order.
    optimizer = [f"{OPTIMIZER_PREFIX}{entry.pass_id}" for entry in DEFAULT_PIPELINE]
    engine = list(PASS_NAMES)
    at = engine.index("graph_rewrites")
    # (snapshots is keyed by name: a pass the pipeline runs twice keeps its first place)
    assert list(snapshots) == list(dict.fromkeys(engine[:at] + optimizer + engine[at:]))


def test_infer_records_types_and_symbolic_dims(save_model):
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2])], {"w": W},
              inputs=(("x", ["N", 3, "H", 8]),))
    result, _ = build(save_model, m)
    x, y = result.graph.values["x"], result.graph.values["y"]
    assert x.dims == ("N", 3, "H", 8)
    assert y.dims[0] == "N" and y.dims[1] == 4 and y.dims[3] == 4
    assert y.dims[2] is None  # ceil(H / 2): depends on H, but is not H
    assert str(y.dtype) == "float32"


def test_reorders_are_memoised_per_value_and_format(save_model):
    """Two Convs read x: one Reorder to N16CX serves both; the graph output is NDARRAY.
    (16 input channels: a Conv reads fewer from NDARRAY itself, with no Reorder.)"""
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]),
               helper.make_node("Conv", ["x", "w"], ["b"]),
               helper.make_node("Add", ["a", "b"], ["y"])],
              {"w": RNG.standard_normal((4, 16, 1, 1)).astype(np.float32)},
              inputs=(("x", [1, 16, 6, 6]),))
    result, snapshots = build(save_model, m)
    nodes, formats = snapshots["select_formats"]
    reorders = [(i, o) for op_type, i, o in nodes.values() if op_type == "Reorder"]
    assert len([r for r in reorders if r[0] == ("x",)]) == 1
    assert formats["a"] is N16CX and formats["y"] is NDARRAY
    names = [n.name for n in result.graph.nodes]
    assert any(name.startswith("ReorderInput_x_of_") for name in names)
    assert "ReorderOutput_y" in names


def test_fusion_folds_single_reader_activations_only(save_model):
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]),
               helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
               helper.make_node("Conv", ["x", "w2"], ["b"]),  # not w: CSE would merge them
               helper.make_node("Relu", ["b"], ["r"]),        # b is read twice: not fused
               helper.make_node("Add", ["c", "r"], ["s"]),
               helper.make_node("Add", ["s", "b"], ["y"])],
              {"w": W, "w2": W + 1, "lo": np.float32(0), "hi": np.float32(6)})
    result, snapshots = build(save_model, m)
    convs = [n for n in result.graph.nodes if n.op_type == "Conv"]
    post_ops = {n.inputs[1]: result.ops[n].__dict__.get("post_ops") for n in convs}
    # a's chain goes on past the Clip (the residual Adds), b's stays empty
    assert post_ops["w"][0] == eltwise(PostOp.CLIP, 0.0, 6.0)
    assert not post_ops["w2"]
    assert [n.op_type for n in result.graph.nodes].count("Relu") == 1
    assert "Clip" in [t for t, _, _ in snapshots["select_formats"][0].values()]
    off, _ = build(save_model, m, fusion=False)
    assert [n.op_type for n in off.graph.nodes].count("Clip") == 1


def test_fused_and_unfused_builds_agree(save_model):
    m = model([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
               helper.make_node("LeakyRelu", ["a"], ["l"], alpha=0.2),
               helper.make_node("Conv", ["l", "w2"], ["b"]),
               helper.make_node("Sigmoid", ["b"], ["y"])],
              {"w": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
               "w2": RNG.standard_normal((5, 4, 1, 1)).astype(np.float32)})
    path = save_model(m)
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    fused, unfused = pplpy.load(path), pplpy.load(path, fusion=False)
    assert len(fused.graph.nodes) < len(unfused.graph.nodes)
    np.testing.assert_allclose(fused.run({"x": x})["y"], unfused.run({"x": x})["y"],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("producer", ["MaxPool", "Conv"])
@pytest.mark.parametrize("passes", [[], ["cse"]])
def test_an_activation_nothing_reads_fuses_and_keeps_its_record(save_model, producer, passes):
    """A pipeline without dead-code elimination leaves a LeakyRelu nothing reads; fused into
    its producer, its output keeps type, dims and format (it lost them, and the plan
    failed on a value without a type)."""
    first = (helper.make_node("Conv", ["x", "w"], ["a"]) if producer == "Conv"
             else helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[1, 1]))
    m = model([first, helper.make_node("LeakyRelu", ["a"], ["dead"]),
               helper.make_node("Relu", ["x"], ["y"])],
              {"w": RNG.standard_normal((5, 3, 1, 1)).astype(np.float32)} if producer == "Conv"
              else {})
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    rt = pplpy.load(save_model(m), num_threads=1, passes=passes)
    assert "LeakyRelu" not in [n.op_type for n in rt.graph.nodes]
    assert rt.graph.values["dead"].dims is not None
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.maximum(x, 0))


def test_constant_subgraphs_fold_before_formats(save_model):
    m = model([helper.make_node("Mul", ["w", "two"], ["w2"]),
               helper.make_node("Conv", ["x", "w2"], ["y"])],
              {"w": W, "two": np.float32(2)})
    result, snapshots = build(save_model, m)
    assert "Mul" not in [t for t, _, _ in snapshots["graph_rewrites"][0].values()]
    rt = pplpy.RuntimeBuilder.from_onnx(save_model(m)).create_runtime()
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(rt.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


def test_matmul_takes_activations_as_post_ops(save_model, isa):
    """MatMul with a constant B (2-D A, batched A) or a B computed at run time: the
    activation runs in the gemm epilogue, on every tier, and agrees with the unfused build."""
    b = RNG.standard_normal((19, 21)).astype(np.float32)
    for a_dims, b_const in (([5, 19], True), ([3, 5, 19], True), ([3, 5, 19], False)):
        inputs = (("x", a_dims),) + (() if b_const else (("b", [19, 21]),))
        m = model([helper.make_node("MatMul", ["x", "b"], ["a"]),
                   helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.5)],
                  {"b": b} if b_const else {}, inputs=inputs)
        result, _ = build(save_model, m)
        (mm,) = result.graph.nodes
        assert mm.op_type == "MatMul"
        assert result.ops[mm].post_ops == [eltwise(PostOp.LEAKY_RELU, 0.5, 0.0)]
        path = save_model(m)
        feeds = {"x": RNG.standard_normal(a_dims).astype(np.float32)}
        if not b_const:
            feeds["b"] = b
        ref = ReferenceEvaluator(m).run(None, feeds)[0]
        for threads in (1, 2):
            for fusion in (True, False):
                got = pplpy.load(path, max_isa=isa, num_threads=threads,
                                 fusion=fusion).run(feeds)["y"]
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_batchnorm_folds_before_formats_and_relu_then_fuses(save_model):
    """Conv-BN-Relu: the BN is gone after graph_rewrites (fold_into_conv), the Relu after
    fuse_post_ops; fusion=False keeps all three."""
    c = 4
    inits = {"w": W, "s": RNG.random(c, np.float32) + 0.5, "b": RNG.random(c, np.float32),
             "m": RNG.random(c, np.float32), "v": RNG.random(c, np.float32) + 0.5}
    m = model([helper.make_node("Conv", ["x", "w"], ["a"]),
               helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["n"]),
               helper.make_node("Relu", ["n"], ["y"])], inits)
    result, snapshots = build(save_model, m)
    assert sorted(t for t, _, _ in snapshots["graph_rewrites"][0].values()) == ["Conv", "Relu"]
    (conv,) = [n for n in result.graph.nodes if n.op_type == "Conv"]
    assert result.ops[conv].post_ops == [eltwise(PostOp.RELU, 0.0, 0.0)]
    off, _ = build(save_model, m, fusion=False)
    assert sorted(n.op_type for n in off.graph.nodes if n.op_type != "Reorder") == [
        "BatchNormalization", "Conv", "Relu"]
