"""A fused sum post-op accumulating into its destination (pplpy/runtime/inplace_sum.py): a
Conv + residual Add writes its output over the residual's memory where the residual dies
there, and nowhere else.  Every case against onnx.reference, on every ISA tier, at one and
two threads, with where the output was placed read off the plan."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy

C, HW = 32, 10
RNG = np.random.default_rng(5)


def weight(name, cout, cin, k):
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    return (name, w)


def conv(x, w, y, k):
    return helper.make_node("Conv", [x, w], [y], pads=[k // 2] * 4)


def block(prefix, x, residual, out):
    """out = Relu(Conv1x1(Relu(Conv3x3(x))) + residual): ResNet's block with its residual."""
    nodes = [conv(x, f"{prefix}w1", f"{prefix}h", 3),
             helper.make_node("Relu", [f"{prefix}h"], [f"{prefix}hr"]),
             conv(f"{prefix}hr", f"{prefix}w2", f"{prefix}c", 1),
             helper.make_node("Add", [f"{prefix}c", residual], [f"{prefix}s"]),
             helper.make_node("Relu", [f"{prefix}s"], [out])]
    return nodes, [weight(f"{prefix}w1", C, C, 3), weight(f"{prefix}w2", C, C, 1)]


def model(extra_outputs=(), tail=(), residual_from_input=False):
    """x -> projection r (1x1 conv) and a block over x summing r; ``tail``: more nodes."""
    nodes = [conv("x", "wp", "r", 1)]
    inits = [weight("wp", C, C, 1)]
    body, more = block("b", "x", "r", "y")
    nodes += body + list(tail)
    inits += more
    outputs = [("y" if not tail else "z", FLOAT, [1, C, HW, HW])]
    outputs += [(name, FLOAT, [1, C, HW, HW]) for name in extra_outputs]
    return make_model(nodes, [("x", FLOAT, [1, C, HW, HW])], outputs, inits)


def run(tmp_path, m, isa, threads, **kwargs):
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    rt = pplpy.load(str(path), max_isa=isa, num_threads=threads, **kwargs)
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    got = rt.run({"x": x})
    want = ReferenceEvaluator(m).run(None, {"x": x})
    for name, value in zip([o.name for o in m.graph.output], want):
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
    (plan,) = rt._plans.plans()
    return rt, plan


def unblocked(name):
    """The graph's name of a value the engine copied into N16CX for a Conv ("x_n16cx")."""
    return name.removesuffix("_n16cx")


def summing_nodes(rt, plan):
    """{sum operand: whether the fused node's output lies on it} for every node whose kernel
    may sum in place."""
    placed = {}
    for node in plan.step_nodes:
        operand = rt._result.kernels[node].sum_in_place
        if operand is not None:
            placed[unblocked(node.inputs[operand])] = np.shares_memory(plan.views[node.inputs[operand]],
                                                       plan.views[node.outputs[0]])
    return placed


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ISAS)
def test_a_dying_residual_takes_the_output(tmp_path, isa, threads):
    rt, plan = run(tmp_path, model(), isa, threads)
    # the Add joins one of the two convs it sums (which one is the fusion pass's choice), the
    # other's output its operand, dying there: the fused node's output lies on it
    ((operand, placed),) = summing_nodes(rt, plan).items()
    assert operand in ("r", "bc") and placed
    (node,) = [n for n in plan.step_nodes if rt._result.kernels[n].sum_in_place is not None]
    described = [e.describe(node.inputs) for e in rt._result.ops[node].post_ops]
    assert described[0] == f"sum(1 * {operand})"


@pytest.mark.parametrize("policy", ["mem", "perf"])
def test_the_arena_shrinks_by_the_output(tmp_path, policy):
    m = model()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    sizes = {}
    import pplpy.runtime.plan as plan_module
    real = plan_module.plan_inplace_sums
    for label in ("separate", "in place"):
        plan_module.plan_inplace_sums = real if label == "in place" else (lambda *a: None)
        try:
            rt = pplpy.load(str(path), mm_policy=policy)
            rt.run({"x": x})
        finally:
            plan_module.plan_inplace_sums = real
        sizes[label] = rt.memory()["arena"]
    if policy == "perf":  # every value its own region: the output's region is gone
        assert sizes["separate"] - sizes["in place"] >= 4 * C * HW * HW
    else:
        assert sizes["in place"] <= sizes["separate"]


@pytest.mark.parametrize("isa", ISAS)
def test_a_residual_read_later_keeps_its_memory(tmp_path, isa):
    tail = [helper.make_node("Add", ["y", "r"], ["z"])]  # r read after the sum
    rt, plan = run(tmp_path, model(tail=tail), isa, 2)
    assert summing_nodes(rt, plan) == {"r": False}


@pytest.mark.parametrize("isa", ISAS)
def test_a_residual_that_is_a_graph_output_keeps_its_memory(tmp_path, isa):
    # (the graph output is the Reorder of the conv's N16CX value, which the Reorder reads
    # after the sum)
    rt, plan = run(tmp_path, model(extra_outputs=["r"]), isa, 1)
    assert summing_nodes(rt, plan) == {"r": False}


def own_residual_model():
    """y = Relu(Conv3x3(r) + r), r = Conv1x1(x): the Add can join only the 3x3 conv (r is
    read by it too), which reads r's neighbours after its first tiles are stored."""
    nodes = [conv("x", "wp", "r", 1), conv("r", "w3", "c", 3),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return make_model(nodes, [("x", FLOAT, [1, C, HW, HW])], [("y", FLOAT, [1, C, HW, HW])],
                      [weight("wp", C, C, 1), weight("w3", C, C, 3)])


@pytest.mark.parametrize("isa", ISAS)
def test_a_conv_reading_its_own_residual_writes_elsewhere(tmp_path, isa, monkeypatch):
    monkeypatch.setenv("PPLPY_CONV_ALGO", "direct")
    rt, plan = run(tmp_path, own_residual_model(), isa, 2)
    assert summing_nodes(rt, plan) == {"r": False}  # declared, not placed


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ISAS)
def test_blocks_chain_their_residuals_in_place(tmp_path, isa, threads):
    # ResNet: each block's output is the next block's residual, itself summed in place
    nodes, inits = [conv("x", "wp", "r", 1)], [weight("wp", C, C, 1)]
    previous = "r"
    for i in range(3):
        body, more = block(f"b{i}", previous, previous, f"y{i}")
        nodes += body
        inits += more
        previous = f"y{i}"
    m = make_model(nodes, [("x", FLOAT, [1, C, HW, HW])], [("y2", FLOAT, [1, C, HW, HW])],
                   inits)
    rt, plan = run(tmp_path, m, isa, threads)
    assert summing_nodes(rt, plan) == {"r": True, "y0": True, "y1": True}


@pytest.mark.parametrize("isa", ISAS)
def test_a_fed_residual_is_summed_from_its_blocked_copy(tmp_path, isa):
    # the residual is the graph input: the Conv chain reads the Reorder's N16CX copy of it,
    # which dies at the sum and takes the output; the caller's array is untouched
    body, inits = block("b", "x", "x", "y")
    m = make_model(body, [("x", FLOAT, [1, C, HW, HW])], [("y", FLOAT, [1, C, HW, HW])], inits)
    rt, plan = run(tmp_path, m, isa, 1)
    assert summing_nodes(rt, plan) == {"x": True}
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    kept = x.copy()
    first = rt.run({"x": x})["y"]
    np.testing.assert_array_equal(x, kept)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], first)


class _Shape:
    def __init__(self, dims=(1, 2, 4, 4, 16)):
        self.data_type, self.data_format, self.physical_dims = "float32", "N16CX", dims


class _Node:
    def __init__(self, inputs, outputs):
        self.inputs, self.outputs = inputs, outputs


class _Kernel:
    def __init__(self, operand=None):
        self.sum_in_place = operand


def plan_sums(values, nodes, kernels, written, outputs=(), aliases=None):
    """plan_inplace_sums on a hand-made plan: ``nodes`` in step order, every value's live
    interval from them; returns the aliases it made."""
    from pplpy.runtime.inplace_sum import plan_inplace_sums

    first, last = {}, {}
    for name in values:
        first[name] = last[name] = written.get(name, 0)
    for index, node in enumerate(nodes):
        for name in node.inputs:
            last[name] = max(last[name], index)
    aliases = dict(aliases or {})
    plan_inplace_sums(nodes, kernels, {v: _Shape() for v in values}, aliases, first, last,
                      written, outputs)
    return aliases


def test_the_planner_places_only_on_memory_a_step_wrote():
    # step 0 writes r; step 1 sums r (input 1) into its output y
    nodes = [_Node(["x"], ["r"]), _Node(["x", "r"], ["y"])]
    kernels = {nodes[0]: _Kernel(), nodes[1]: _Kernel(1)}
    assert plan_sums(["x", "r", "y"], nodes, kernels, {"r": 0, "y": 1}) == {"y": ("r", 0)}
    # the same operand as a feed (written by no step) keeps its memory: the caller's next
    # run refills it
    nodes = [_Node(["a", "x"], ["y"])]
    kernels = {nodes[0]: _Kernel(1)}
    assert plan_sums(["a", "x", "y"], nodes, kernels, {"y": 0}) == {}
    # an operand that is a graph output, or lies in another value's buffer whose memory is
    # read later, keeps its memory too
    nodes = [_Node(["x"], ["r"]), _Node(["x", "r"], ["y"])]
    kernels = {nodes[0]: _Kernel(), nodes[1]: _Kernel(1)}
    assert plan_sums(["x", "r", "y"], nodes, kernels, {"r": 0, "y": 1}, outputs=["r"]) == {}


def test_winograd_sums_over_its_stored_tile_so_it_does_not_declare_it(tmp_path):
    rt, plan = run(tmp_path, own_residual_model(), "sse", 1)
    (node,) = [n for n in plan.step_nodes if getattr(rt._result.ops[n], "post_ops", ())]
    kernel = rt._result.kernels[node]
    assert kernel.algorithm == "winograd_f4x3"
    assert kernel.sum_in_place is None and summing_nodes(rt, plan) == {}
