"""Glow's graph passes (reference/001): each on small graphs, checking the structure after
the pass and that the optimised model computes what the original does (onnx's reference
evaluator on the original model is the oracle); near misses are left alone.  A hypothesis
test builds random element-wise and transpose graphs and compares optimised with
unoptimised outputs."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE

RNG = np.random.default_rng(11)
UNOPTIMISED = [("dead_code_elimination", "once")]
# The default pipeline without fuse_eltwise_chains, for tests that count the element-wise
# nodes another pass leaves (that pass would join them into one chain).
NO_CHAINS = [e for e in DEFAULT_PIPELINE if e.pass_id != "fuse_eltwise_chains"]


def model(nodes, inputs, inits=(), opset=17, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(save_model, m, feeds, passes=None):
    """Load with ``passes`` (default pipeline when None), check against the reference on
    the original model, return (op types in run order without Reorders, pass log)."""
    rt = pplpy.load(save_model(m), passes=passes)
    got = rt.run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for name, w in zip(rt.output_names, want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
    return [n.op_type for n in rt.graph.nodes if n.op_type != "Reorder"], rt.pass_log


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def logged(log, pass_id):
    return next(line for line in log if line.startswith(pass_id + ":"))


# -- CSE -----------------------------------------------------------------------------------


def test_cse_merges_equal_nodes_and_their_readers(save_model):
    nodes = [helper.make_node("Tanh", ["x"], ["a"]), helper.make_node("Tanh", ["x"], ["b"]),
             helper.make_node("Mul", ["a", "x"], ["c"]), helper.make_node("Mul", ["b", "x"], ["d"]),
             helper.make_node("Add", ["c", "d"], ["y"])]
    types, log = run(save_model, model(nodes, [("x", [3, 5])]), {"x": rand(3, 5)},
                     passes=NO_CHAINS)
    assert types == ["Tanh", "Mul", "Add"]
    assert "merged Mul 1" in logged(log, "cse") and "merged Tanh 1" in logged(log, "cse")


def test_cse_keeps_nodes_that_differ_in_attributes_or_are_random(save_model):
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
             helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
             helper.make_node("Add", ["a", "b"], ["y"])]
    types, _ = run(save_model, model(nodes, [("x", [4])]), {"x": rand(4)}, passes=NO_CHAINS)
    assert types.count("LeakyRelu") == 2
    rand_nodes = [helper.make_node("RandomUniformLike", ["x"], ["a"]),
                  helper.make_node("RandomUniformLike", ["x"], ["b"]),
                  helper.make_node("Sub", ["a", "b"], ["y"])]
    rt = pplpy.load(save_model(model(rand_nodes, [("x", [64])])))
    assert [n.op_type for n in rt.graph.nodes].count("RandomUniformLike") == 2
    assert np.any(rt.run({"x": rand(64)})["y"] != 0)


def test_cse_keeps_a_graph_output_producer(save_model):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    m = model(nodes, [("x", [4])], outputs=("y", "z"))
    types, _ = run(save_model, m, {"x": rand(4)})
    assert types == ["Relu", "Relu"]


# -- transposes ------------------------------------------------------------------------------


def test_consecutive_transposes_combine_and_cancel(save_model):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("Transpose", ["c"], ["d"], perm=[1, 0, 2, 3]),
             helper.make_node("Transpose", ["d"], ["y"], perm=[0, 1, 3, 2])]
    types, log = run(save_model, model(nodes, [("x", [2, 3, 4, 5])]), {"x": rand(2, 3, 4, 5)})
    assert types == ["Relu", "Transpose"]
    assert "combined Transposes" in logged(log, "optimize_transposes")


def test_identity_transpose_is_removed_and_data_free_transpose_becomes_reshape(save_model):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 1, 2]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0, 2]),  # dim 0 is 1
             helper.make_node("Neg", ["b"], ["y"])]
    types, log = run(save_model, model(nodes, [("x", [1, 6, 5])]), {"x": rand(1, 6, 5)})
    assert "Transpose" not in types and "Reshape" in types


def test_transpose_sinks_below_elementwise_ops_and_meets_its_inverse(save_model):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1]),
             helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Mul", ["b", "two"], ["c"]),
             helper.make_node("Transpose", ["z"], ["zt"], perm=[0, 2, 1]),
             helper.make_node("Add", ["c", "zt"], ["d"]),
             helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 1])]
    m = model(nodes, [("x", [2, 3, 4]), ("z", [2, 3, 4])], {"two": np.float32(2)})
    types, log = run(save_model, m, {"x": rand(2, 3, 4), "z": rand(2, 3, 4)})
    # the transposes gone, the run is one chain (the sunk values keep their dims)
    assert types == ["EltwiseChain"]
    assert "sank Transpose below Add 1" in logged(log, "sink_transposes")


@pytest.mark.parametrize("perm, sinks", [([0, 1, 3, 2], True), ([0, 2, 1, 3], False)])
def test_transpose_sinks_below_batch_norm_that_keeps_its_channels(save_model, perm, sinks):
    c = 4
    stats = {"g": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.5}
    inverse = list(np.argsort(perm))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("BatchNormalization", ["t", "g", "b", "m", "v"], ["n"]),
             helper.make_node("Transpose", ["n"], ["y"], perm=inverse)]
    shape = [2, c, c, c]  # every permutation keeps a valid BN input
    types, _ = run(save_model, model(nodes, [("x", shape)], stats), {"x": rand(*shape)})
    assert types == (["BatchNormalization"] if sinks else
                     ["Transpose", "BatchNormalization", "Transpose"])


def test_transpose_does_not_sink_into_a_non_scalar_operand(save_model):
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
             helper.make_node("Add", ["a", "bias"], ["y"])]
    m = model(nodes, [("x", [3, 4])], {"bias": rand(3)})
    types, _ = run(save_model, m, {"x": rand(3, 4)})
    assert types == ["Transpose", "Add"]


# -- Relu / MaxPool, Concat, ReduceMean ---------------------------------------------------------


def test_relu_maxpool_swap_only_when_relu_is_no_post_op(save_model):
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], **pool)]
    types, log = run(save_model, model(nodes, [("x", [1, 3, 8, 8])]), {"x": rand(1, 3, 8, 8)})
    # swapped, the Relu then runs as the MaxPool's post-op, on the pooled output
    assert types == ["Add", "MaxPool"]
    w = rand(4, 3, 3, 3)
    conv = [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["y"], **pool)]
    types, _ = run(save_model, model(conv, [("x", [1, 3, 8, 8])], {"w": w}),
                   {"x": rand(1, 3, 8, 8)})
    assert types == ["Conv", "MaxPool"]  # the Relu is the Conv's post-op


def test_nested_concats_merge(save_model):
    nodes = [helper.make_node("Concat", ["x", "z"], ["a"], axis=1),
             helper.make_node("Concat", ["a", "x"], ["b"], axis=-1),
             helper.make_node("Concat", ["b", "z"], ["y"], axis=1)]
    types, _ = run(save_model, model(nodes, [("x", [2, 3]), ("z", [2, 4])]),
                   {"x": rand(2, 3), "z": rand(2, 4)})
    assert types == ["Concat"]


def concat_then(acts, parts):
    """Concat of ``parts`` (conv: a Conv of x; x: the input itself) along channels, then the
    activations ``acts`` ((op, extra inputs) pairs) one after the other."""
    nodes, names = [], []
    for i, part in enumerate(parts):
        if part == "conv":
            nodes.append(helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
            names.append(f"c{i}")
        else:
            names.append("x")
    nodes.append(helper.make_node("Concat", names, ["cat"], axis=1))
    last = "cat"
    for j, (op, extra) in enumerate(acts):
        out = "y" if j == len(acts) - 1 else f"a{j}"
        nodes.append(helper.make_node(op, [last, *extra], [out]))
        last = out
    inits = {f"w{i}": rand(5, 3, 3, 3) for i, p in enumerate(parts) if p == "conv"}
    inits.update(lo=np.float32(0), hi=np.float32(6))
    return model(nodes, [("x", [1, 3, 8, 8])], inits)


@pytest.mark.parametrize("acts", [[("Relu", [])], [("Clip", ["lo", "hi"])],
                                  [("Sigmoid", []), ("Neg", [])]])
def test_activation_after_concat_runs_in_each_producers_epilogue(save_model, acts):
    m = concat_then(acts, ["conv", "conv"])
    types, log = run(save_model, m, {"x": rand(1, 3, 8, 8)})
    # activations in the epilogues; the Concat has no step (its parts are written in place)
    assert types == ["Conv", "Conv", "Concat"]
    assert f"{acts[0][0]} before Concat" in logged(log, "hoist_activations_above_concat")
    rt = pplpy.load(save_model(m))
    for node in rt.graph.nodes:
        if node.op_type == "Conv":
            ops = [p.describe().split("(")[0] for p in rt.result.ops[node].post_ops]
            assert ops == [op.lower() for op, _ in acts], ops
    unfused, _ = run(save_model, m, {"x": rand(1, 3, 8, 8)},
                     passes=[e for e in DEFAULT_PIPELINE if "fusion" in e.modes
                             and e.pass_id != "hoist_activations_above_concat"])
    assert "Concat" in unfused and ("Relu" in unfused or "Clip" in unfused
                                    or "EltwiseChain" in unfused or "Sigmoid" in unfused)


def test_activation_after_concat_stays_when_no_part_can_take_it(save_model):
    types, log = run(save_model, concat_then([("Relu", [])], ["x", "x"]),
                     {"x": rand(1, 3, 8, 8)})
    assert types == ["Concat", "Relu"]
    assert "Relu before Concat" not in logged(log, "hoist_activations_above_concat")
    # one part from a Conv is enough; the input part gets a Relu of its own
    types, _ = run(save_model, concat_then([("Relu", [])], ["conv", "x"]),
                   {"x": rand(1, 3, 8, 8)})
    assert sorted(types) == ["Concat", "Conv", "Relu"] and types.index("Relu") < types.index(
        "Concat")


@pytest.mark.parametrize("reshape", ["Reshape", "Flatten", "shape_of_input"])
def test_activation_after_a_reshape_of_a_conv_runs_in_its_epilogue(save_model, reshape):
    """SegFormer's Mix-FFN: depthwise Conv, Reshape to a sequence, GELU: the GELU moves
    above the Reshape and into the Conv's epilogue (also where the Reshape's shape is
    computed from the Conv output's own dims, as the TorchScript exporter writes
    flatten(2): the Shape then reads the GELU's output)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=16)]
    inits = {"w": rand(16, 1, 3, 3), "s": np.array([2, 16, 20], np.int64)}
    if reshape == "shape_of_input":
        inits.update(lo=np.array([0], np.int64), hi=np.array([2], np.int64),
                     m1=np.array([-1], np.int64))
        nodes += [helper.make_node("Shape", ["c"], ["sc"]),
                  helper.make_node("Slice", ["sc", "lo", "hi"], ["nc"]),
                  helper.make_node("Concat", ["nc", "m1"], ["s2"], axis=0),
                  helper.make_node("Reshape", ["c", "s2"], ["r"])]
    elif reshape == "Reshape":
        nodes.append(helper.make_node("Reshape", ["c", "s"], ["r"]))
    else:
        nodes.append(helper.make_node("Flatten", ["c"], ["r"], axis=2))
    nodes.append(helper.make_node("Gelu", ["r"], ["y"]))
    m = model(nodes, [("x", [2, 16, 4, 5])], inits, opset=20)
    types, log = run(save_model, m, {"x": rand(2, 16, 4, 5)})
    reshape = "Reshape" if reshape == "shape_of_input" else reshape
    assert [t for t in types if t not in ("Shape", "Slice", "Concat")] == ["Conv", reshape]
    assert f"Gelu before {reshape}" in logged(log, "hoist_activations_above_reshapes")
    rt = pplpy.load(save_model(m))
    (conv,) = [n for n in rt.graph.nodes if n.op_type == "Conv"]
    assert [p.describe().split("(")[0] for p in rt.result.ops[conv].post_ops] == ["gelu"]


def test_activation_after_a_reshape_stays_when_the_reshape_is_not_the_only_reader(save_model):
    """The Conv's output also read elsewhere (a graph output): nothing to gain, the
    activation stays after the Reshape."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, [("x", [1, 3, 4, 5])], {"w": rand(4, 3, 3, 3),
                                              "s": np.array([1, 4, 20], np.int64)},
              outputs=("y", "c"))
    types, log = run(save_model, m, {"x": rand(1, 3, 4, 5)})
    assert types == ["Conv", "Reshape", "Relu"]
    assert "before Reshape" not in logged(log, "hoist_activations_above_reshapes")


@pytest.mark.parametrize("bounds, want", [([(0, 2), (2, 5), (5, 8)], []),
                                          ([(1, 3), (3, 6)], ["Slice"])])
def test_concat_of_adjacent_slices(save_model, bounds, want):
    nodes, inits, parts = [], {}, []
    for i, (s, e) in enumerate(bounds):
        inits.update({f"s{i}": np.array([s]), f"e{i}": np.array([e]), f"a{i}": np.array([1])})
        nodes.append(helper.make_node("Slice", ["x", f"s{i}", f"e{i}", f"a{i}"], [f"p{i}"]))
        parts.append(f"p{i}")
    nodes += [helper.make_node("Concat", parts, ["c"], axis=1),
              helper.make_node("Neg", ["c"], ["y"])]
    types, log = run(save_model, model(nodes, [("x", [2, 8])], inits), {"x": rand(2, 8)})
    assert types == want + ["Neg"]


def test_concat_of_slices_with_a_gap_is_kept(save_model):
    inits = {"s0": np.array([0]), "e0": np.array([2]), "s1": np.array([3]),
             "e1": np.array([8]), "ax": np.array([1])}
    nodes = [helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["p0"]),
             helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["p1"]),
             helper.make_node("Concat", ["p0", "p1"], ["y"], axis=1)]
    types, _ = run(save_model, model(nodes, [("x", [2, 8])], inits), {"x": rand(2, 8)})
    assert types == ["Slice", "Slice", "Concat"]


@pytest.mark.parametrize("bounds", [[(0, 2), (2, 1)], [(3, -3), (0, 1), (1, 2)],
                                    [(1, 0), (0, 1), (1, 2)]])
def test_concat_of_slices_one_of_them_empty_keeps_every_row(save_model, bounds):
    """An empty slice (its clamped end before its start: x[2:1]) looks adjacent to its
    neighbours; one Slice from the first start to the last end would drop rows."""
    nodes, inits, parts = [], {"ax": np.array([0])}, []
    for i, (s, e) in enumerate(bounds):
        inits.update({f"s{i}": np.array([s]), f"e{i}": np.array([e])})
        nodes.append(helper.make_node("Slice", ["x", f"s{i}", f"e{i}", "ax"], [f"p{i}"]))
        parts.append(f"p{i}")
    nodes.append(helper.make_node("Concat", parts, ["y"], axis=0))
    run(save_model, model(nodes, [("x", [2, 5])], inits), {"x": rand(2, 5)})


@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_mean_over_spatial_axes_is_global_average_pool(save_model, keepdims, opset):
    if opset >= 18:
        nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)]
        inits = {"axes": np.array([-1, 2])}
    else:
        nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=keepdims)]
        inits = {}
    types, _ = run(save_model, model(nodes, [("x", [2, 32, 5, 5])], inits, opset=opset),
                   {"x": rand(2, 32, 5, 5)})
    assert types[0] == "GlobalAveragePool" and "ReduceMean" not in types


def test_reduce_mean_over_channels_is_kept(save_model):
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2, 3])]
    types, _ = run(save_model, model(nodes, [("x", [2, 3, 4, 4])], opset=13),
                   {"x": rand(2, 3, 4, 4)})
    assert types == ["ReduceMean"]


# -- arithmetic into BatchNormalization and Conv -------------------------------------------------


def test_arithmetic_chain_folds_into_batch_norm_and_conv(save_model):
    c = 6
    bn_inits = {"g": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.5}
    per_channel = {"k1": rand(1, c, 1, 1), "k2": rand(c, 1, 1), "k3": np.float32(3.0),
                   "k4": np.abs(rand(1, c, 1, 1)) + 0.5}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g", "b", "m", "v"], ["n"]),
             helper.make_node("Mul", ["n", "k1"], ["a1"]),
             helper.make_node("Sub", ["a1", "k2"], ["a2"]),
             helper.make_node("Sub", ["k3", "a2"], ["a3"]),
             helper.make_node("Div", ["a3", "k4"], ["y"])]
    m = model(nodes, [("x", [2, c, 5, 5])], {**bn_inits, **per_channel})
    types, log = run(save_model, m, {"x": rand(2, c, 5, 5)})
    assert types == ["Relu", "BatchNormalization"]
    assert "Sub->BatchNormalization 2" in logged(log, "fold_into_batchnorm")
    w = rand(c, 3, 3, 3)
    conv = [helper.make_node("Conv", ["x", "w"], ["a"]),
            helper.make_node("Div", ["a", "k4"], ["d"]),
            helper.make_node("Sub", ["d", "k2"], ["y"])]
    types, _ = run(save_model, model(conv, [("x", [1, 3, 7, 7])], {"w": w, **per_channel}),
                   {"x": rand(1, 3, 7, 7)})
    assert types == ["Conv"]


def test_division_by_the_tensor_is_not_folded(save_model):
    c = 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Div", ["k", "a"], ["y"])]
    m = model(nodes, [("x", [1, 3, 5, 5])], {"w": rand(c, 3, 1, 1), "k": rand(1, c, 1, 1)})
    types, _ = run(save_model, m, {"x": rand(1, 3, 5, 5)})
    assert types == ["Conv", "Div"]


# -- Reshape, Cast, Expand / Tile -------------------------------------------------------------


def test_reshape_chain_merges(save_model):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Reshape", ["a", "s2"], ["b"]),
             helper.make_node("Reshape", ["b", "s3"], ["y"])]
    inits = {"s1": np.array([6, 4]), "s2": np.array([2, -1]), "s3": np.array([0, 3, 4])}
    types, log = run(save_model, model(nodes, [("x", [2, 3, 4])], inits), {"x": rand(2, 3, 4)})
    assert types == ["Reshape"]
    assert "merged Reshapes 2" in logged(log, "merge_reshapes")


def test_reshape_with_a_zero_that_would_copy_a_different_dim_is_kept(save_model):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Reshape", ["a", "s2"], ["y"])]
    inits = {"s1": np.array([3, 2, 4]), "s2": np.array([0, -1])}  # 0 copies 3, not x's 2
    types, _ = run(save_model, model(nodes, [("x", [2, 3, 4])], inits), {"x": rand(2, 3, 4)})
    assert types == ["Reshape", "Reshape"]


def test_a_reshape_to_its_input_dims_goes(save_model):
    """The TorchScript exporter's Reshape after each attention's P V product, its shape
    from Shape / Gather / Unsqueeze / Concat of the value itself: with free batch and
    sequence dims, the output has the input's dims and the Reshape goes; a Reshape that
    moves a dim stays."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i2"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
             helper.make_node("Concat", ["b1", "minus1", "s1", "d"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["same"]),
             helper.make_node("Reshape", ["same", "swap"], ["y"])]
    inits = {"i0": np.array(0), "i2": np.array(2), "ax0": np.array([0]),
             "minus1": np.array([-1]), "d": np.array([8]), "swap": np.array([0, 0, 8, -1])}
    m = model(nodes, [("x", ["batch", 3, "seq", 8])], inits)
    types, log = run(save_model, m, {"x": rand(2, 3, 5, 8)})
    assert types.count("Reshape") == 1
    assert "removed no-op Reshape 1" in logged(log, "merge_reshapes")


def test_a_shape_piece_past_the_rank_stays_an_error(save_model):
    """Gather(Shape(r), 3) of a rank-3 r is out of range: 3 % 3 is place 0, but the piece is
    not r's dim 0, and the run must fail as the model does."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["shape"]),
             helper.make_node("Gather", ["shape", "i3"], ["g"], axis=0),
             helper.make_node("Unsqueeze", ["g", "ax0"], ["u"]),
             helper.make_node("Concat", ["u", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["y"])]
    inits = {"i3": np.array(3), "ax0": np.array([0]), "minus1": np.array([-1])}
    rt = pplpy.load(save_model(model(nodes, [("x", ["batch", "seq", 12])], inits)))
    with pytest.raises(pplpy.PplError):
        rt.run({"x": rand(2, 5, 12)})


@pytest.mark.parametrize("places", [(0, 1), (1, 0)])
def test_a_reshape_shaped_by_its_own_dims(save_model, places):
    """The exporter's head split, Reshape(r, Concat(dim 0 of r, dim 1 of r, 3, 4)): its
    shape becomes the constant (0, 0, 3, 4) and the Shape nodes go; dims taken from
    other places (swapped) are not copies and stay computed."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["shape"])]
    pieces = []
    for place, k in enumerate(places):
        nodes += [helper.make_node("Gather", ["shape", f"i{k}"], [f"g{place}"], axis=0),
                  helper.make_node("Unsqueeze", [f"g{place}", "ax0"], [f"u{place}"])]
        pieces.append(f"u{place}")
    nodes += [helper.make_node("Concat", pieces + ["three", "four"], ["target"], axis=0),
              helper.make_node("Reshape", ["r", "target"], ["y"])]
    inits = {"i0": np.array(0), "i1": np.array(1), "ax0": np.array([0]),
             "three": np.array([3]), "four": np.array([4])}
    dims = ["batch", "seq", 12] if places == (0, 1) else ["n", "n", 12]
    m = model(nodes, [("x", dims)], inits)
    types, log = run(save_model, m, {"x": rand(5, 5, 12)})
    own = places == (0, 1)
    assert ("Shape" in types) != own
    if own:
        assert "Reshape shapes from the input's own dims 1" in logged(log, "merge_reshapes")


@pytest.mark.parametrize("back_to", [[2, 3, 8, 5], [2, 3, 40]])
def test_a_transpose_of_the_last_two_axes_through_3d(save_model, back_to):
    """The dynamo exporter's K^T: Reshape to (-1, 5, 8), Transpose (0, 2, 1), Reshape back
    to x's dims with the last two swapped is one Transpose; reshaped to anything else, the
    chain stays."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "flat"], ["f"]),
             helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "back"], ["y"])]
    inits = {"flat": np.array([-1, 5, 8]), "back": np.array(back_to)}
    types, log = run(save_model, model(nodes, [("x", [2, 3, 5, 8])], inits),
                     {"x": rand(2, 3, 5, 8)})
    if len(back_to) == 4:
        assert types == ["Relu", "Transpose"]
        assert "3-D transposes of 4-D values 1" in logged(log, "merge_reshapes")
    else:
        assert types.count("Transpose") == 1 and types.count("Reshape") == 2


def test_cast_chains_and_no_op_casts(save_model):
    f, d, i32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=f),        # no-op
             helper.make_node("Cast", ["a"], ["b"], to=d),        # exact widening ...
             helper.make_node("Cast", ["b"], ["c"], to=i32),      # ... so one Cast to int32
             helper.make_node("Cast", ["c"], ["e"], to=TensorProto.INT8),  # narrowing ...
             helper.make_node("Cast", ["e"], ["y"], to=f)]                 # ... is kept
    x = (rand(20) * 300).astype(np.float32)
    types, log = run(save_model, model(nodes, [("x", [20])]), {"x": x})
    assert types == ["Cast", "Cast", "Cast"]
    assert "removed no-op Cast 1" in logged(log, "simplify_casts")


def test_expand_and_tile_before_broadcasting_ops_are_dropped(save_model):
    nodes = [helper.make_node("Expand", ["b", "shape"], ["be"]),
             helper.make_node("Add", ["x", "be"], ["a"]),
             helper.make_node("Tile", ["c", "reps"], ["ct"]),
             helper.make_node("Mul", ["a", "ct"], ["y"])]
    inits = {"shape": np.array([2, 3, 4]), "b": rand(3, 1), "c": rand(1, 1, 4),
             "reps": np.array([2, 3, 1])}
    m = model(nodes, [("x", [2, 3, 4])], inits)
    rt_types, log = run(save_model, m, {"x": rand(2, 3, 4)}, passes=[
        "expand_to_broadcast", ("dead_code_elimination", "once")])
    assert rt_types == ["Add", "Mul"]


def test_expand_that_grows_the_result_is_kept(save_model):
    nodes = [helper.make_node("Expand", ["x", "shape"], ["xe"]),
             helper.make_node("Add", ["xe", "b"], ["y"])]
    m = model(nodes, [("x", [3, 1])], {"shape": np.array([3, 4]), "b": rand(3, 1)})
    types, _ = run(save_model, m, {"x": rand(3, 1)}, passes=["expand_to_broadcast"])
    assert types == ["Expand", "Add"]


@pytest.mark.parametrize("op, reps", [("Expand", [4, 3]), ("Tile", [4, 1])])
@pytest.mark.parametrize("reader", ["Add(e, e)", "Sum(e, b, e)"])
def test_expand_read_twice_by_one_node_is_kept(save_model, op, reps, reader):
    """Each use alone broadcasts back to [4, 3], both together do not: x[1, 3] + x[1, 3]."""
    inputs = ["e", "e"] if reader == "Add(e, e)" else ["e", "b", "e"]
    nodes = [helper.make_node(op, ["x", "reps"], ["e"]),
             helper.make_node(reader[:3], inputs, ["y"])]
    m = model(nodes, [("x", [1, 3]), ("b", [1, 3])], {"reps": np.array(reps)})
    types, _ = run(save_model, m, {"x": rand(1, 3), "b": rand(1, 3)},
                   passes=["expand_to_broadcast", ("dead_code_elimination", "once")])
    assert types == [op, reader[:3]]


# -- property: random element-wise and transpose graphs ---------------------------------------

UNARY = ["Relu", "Sigmoid", "Neg", "Abs", "Tanh"]
BINARY = ["Add", "Mul", "Sub", "Max"]


@st.composite
def elementwise_graphs(draw):
    """A random DAG over a rank-3 input: unary ops, binary ops on two earlier values,
    transposes (some repeated, so CSE and cancelling find work)."""
    values, nodes = ["x"], []
    perms = [[0, 2, 1], [1, 0, 2], [2, 1, 0], [0, 1, 2]]
    for i in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "transpose", "scalar"]))
        out = f"v{i}"
        src = draw(st.sampled_from(values))
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [src], [out]))
        elif kind == "binary":
            other = draw(st.sampled_from(values))
            nodes.append(helper.make_node(draw(st.sampled_from(BINARY)), [src, other], [out]))
        elif kind == "scalar":
            nodes.append(helper.make_node("Mul", [src, "half"], [out]))
        else:
            nodes.append(helper.make_node("Transpose", [src], [out],
                                          perm=draw(st.sampled_from(perms))))
        values.append(out)
    nodes.append(helper.make_node("Identity", [values[-1]], ["y"]))
    return model(nodes, [("x", [3, 3, 3])], {"half": np.float32(0.5)})


@settings(max_examples=40, deadline=None)
@given(elementwise_graphs())
def test_optimised_random_graphs_compute_what_unoptimised_ones_do(tmp_path_factory, m):
    path = tmp_path_factory.mktemp("g") / "m.onnx"
    onnx.save(m, path)
    x = np.random.default_rng(0).standard_normal((3, 3, 3)).astype(np.float32)
    got = pplpy.load(str(path)).run({"x": x})["y"]
    plain = pplpy.load(str(path), passes=UNOPTIMISED).run({"x": x})["y"]
    np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-6)
