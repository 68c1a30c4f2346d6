"""Plans in stages: values computed by the run that decide shapes (NonZero's count, TopK's k,
NonMaxSuppression's boxes) cut the plan there, and the rest is planned once they are known
(pplpy/runtime/staged_plan.py).  Every case against onnx.reference, on every ISA tier, at one
and two threads; the cut's bookkeeping (plans made, blocked values crossing it, profiling,
memory) through the public API."""

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, INT64, ISAS, make_model

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import follow_input_format
from pplpy.runtime.plan import ExecutionPlan
from pplpy.runtime.staged_plan import StagedPlan
from pplpy.tools.pplnn import main

BOOL = TensorProto.BOOL
RNG = np.random.default_rng(11)
DOMAIN = "test.staged"


class RepeatRowsKernel(X86Kernel):
    def do_execute(self, ctx):
        x, y = ctx.inputs[0], ctx.outputs[0]
        for i in range(y.shape[0]):
            y[i] = x[0]


@op(DOMAIN, "RepeatRows", since=1)
class RepeatRows(X86OptKernel):
    """y = n copies of x[0] along axis 0, n the value of input 1: an op that keeps a blocked
    input (N16CX) and needs a value to know its shape, so that the value crossing a cut
    before it is blocked (pplpy's own ops read values of unknown shapes as NDARRAY)."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    keeps_padding_finite = True
    value_inputs = (1,)
    select_format = follow_input_format

    def infer_shape(self, in_shapes, in_values):
        if in_values[1] is None:
            raise self.value_required(1, "the count")
        return [(int(in_values[1][0]), *in_shapes[0][1:])]

    def create_kernel(self):
        return RepeatRowsKernel(self)


def load(tmp_path, model, **kwargs):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(str(path), **kwargs)


def assert_matches(rt, model, feeds):
    got = rt.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for (name, actual), expected in zip(got.items(), want):
        expected = np.asarray(expected)
        assert actual.dtype == expected.dtype, name
        assert actual.shape == expected.shape, name
        np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=2e-5, err_msg=name)
    return got


def keypoint_model():
    """SuperPoint's keypoint selection in small: a conv's channel maximum over a threshold,
    NonZero, the scores gathered at the points; their sum then shifts the conv's output (a
    blocked N16CX tensor read on both sides of the cut) and an independent square of the
    input is computed before it."""
    w = RNG.standard_normal((19, 5, 3, 3)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("ReduceMax", ["c"], ["s"], axes=[1], keepdims=0),
        helper.make_node("Greater", ["s", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"], name="points"),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["s", "idx"], ["scores"], name="gather"),
        helper.make_node("ReduceSum", ["scores"], ["total"], keepdims=0),
        helper.make_node("Add", ["c", "total"], ["shifted"], name="shift"),
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
    ]
    return make_model(nodes, [("x", FLOAT, [1, 5, 6, 7])],
                      [("idx", INT64, None), ("scores", FLOAT, None),
                       ("shifted", FLOAT, [1, 19, 6, 7]), ("sq", FLOAT, [1, 5, 6, 7])],
                      [("w", w), ("t", np.float32(1.5))], opset=13)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ISAS)
def test_nonzero_over_computed_scores(tmp_path, isa, threads):
    model = keypoint_model()
    rt = load(tmp_path, model, max_isa=isa, num_threads=threads)
    assert rt.formats["c"] is DataFormat.N16CX  # a blocked value crosses the cut
    counts = set()
    for scale in (1.0, 0.5, 2.0, 0.0, 1.0):  # scale 0: no point passes, (3, 0) indices
        x = (RNG.standard_normal((1, 5, 6, 7)) * scale).astype(np.float32)
        counts.add(assert_matches(rt, model, {"x": x})["idx"].shape[0])
    assert 0 in counts and len(counts) > 2
    # one plan for the feeds' shapes: the cut is inside it, not a plan per run
    assert rt.plan_misses == 1


def three_stage_model():
    """NonZero's count decides the next shapes, and TopK's k is computed from the values it
    selected (a reduction of floats the run computes): a cut at NonZero, another at TopK."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "axis0"], ["where"]),
        helper.make_node("Gather", ["x", "where"], ["v"]),
        helper.make_node("Greater", ["v", "half"], ["big"]),
        helper.make_node("Cast", ["big"], ["big_i"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["big_i", "axis0"], ["k"], keepdims=1),
        helper.make_node("TopK", ["v", "k"], ["top", "top_i"], name="top_k"),
    ]
    return make_model(nodes, [("x", FLOAT, [12])],
                      [("top", FLOAT, None), ("top_i", INT64, None), ("v", FLOAT, None)],
                      [("zero", np.float32(0)), ("half", np.float32(0.5)),
                       ("axis0", np.array([0], np.int64))], opset=13)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ISAS)
def test_three_stages(tmp_path, isa, threads):
    model = three_stage_model()
    rt = load(tmp_path, model, max_isa=isa, num_threads=threads)
    for x in (RNG.standard_normal(12), -np.ones(12), np.linspace(-1, 2, 12),
              RNG.standard_normal(12)):
        assert_matches(rt, model, {"x": x.astype(np.float32)})
    plan = rt._last
    assert isinstance(plan, StagedPlan) and isinstance(plan._last_rest, StagedPlan)


@pytest.mark.parametrize("isa", ISAS)
def test_a_blocked_value_crosses_the_cut(tmp_path, isa):
    """A Conv's N16CX output read after the cut by an op that keeps it blocked: it crosses
    in its blocked layout and the rest is planned with its logical dims."""
    w = RNG.standard_normal((19, 5, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Cast", ["r"], ["n"], to=TensorProto.INT64),
             helper.make_node("RepeatRows", ["c", "n"], ["y"], domain=DOMAIN)]
    model = make_model(nodes, [("x", FLOAT, [1, 5, 6, 7]), ("s", FLOAT, [1])],
                       [("y", FLOAT, None)], [("w", w)], extra_opsets=[(DOMAIN, 1)])
    rt = load(tmp_path, model, max_isa=isa)
    assert rt.formats["c"] is DataFormat.N16CX
    x = RNG.standard_normal((1, 5, 6, 7)).astype(np.float32)
    conv = ReferenceEvaluator(make_model(nodes[:1], [("x", FLOAT, [1, 5, 6, 7])],
                                         [("c", FLOAT, None)], [("w", w)])).run(None, {"x": x})
    for n in (3, 1, 0, 2):
        got = rt.run({"x": x, "s": np.array([n], np.float32)})["y"]
        assert got.shape == (n, 19, 6, 7)
        np.testing.assert_allclose(got, np.repeat(conv[0], n, axis=0), rtol=1e-5, atol=1e-5)
    assert set(rt._last.crossing) == {"c", "n"}


def test_rest_plans_are_cached_by_value_and_bounded(tmp_path):
    """The same deciding value again takes the cached rest plan; the runtime keeps at most
    plan_cache_size rest plans, least recently used out."""
    model = keypoint_model()
    rt = load(tmp_path, model, plan_cache_size=2)
    xs = [RNG.standard_normal((1, 5, 6, 7)).astype(np.float32) for _ in range(4)]
    first = rt.run({"x": xs[0]})
    for x in xs[1:]:
        rt.run({"x": x})
        assert rt.memory()["cached_plans"] <= 3  # the first stage and two rests
    again = rt.run({"x": xs[0]})  # planned again (evicted), same results
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    kept = rt._rest_plans.plans()
    rt.run({"x": xs[0]})
    assert rt._rest_plans.plans() == kept  # a hit: no new rest plan
    assert rt.plan_misses == 1


def test_nested_stages_share_one_budget(tmp_path):
    """Two cuts in a row: the rests of the rests count against the same plan_cache_size
    (each StagedPlan keeping its own cache held plan_cache_size squared rest plans)."""
    def live_plans():
        gc.collect()
        return sum(type(o) is ExecutionPlan for o in gc.get_objects())

    model = three_stage_model()
    before = live_plans()
    rt = load(tmp_path, model, plan_cache_size=2)
    for k in range(12):
        x = np.linspace(-1, 1 + 0.1 * k, 12).astype(np.float32) * (1 + (k % 3))
        assert_matches(rt, model, {"x": x})
        # the first stage; two cached rests, each holding at most two plans (a staged one:
        # its first stage, and its last rest, which the cache may have let go of)
        assert live_plans() - before <= 5
        assert rt.memory()["cached_plans"] == live_plans() - before


def test_profiling_memory_and_shapes_cover_both_stages(tmp_path):
    model = keypoint_model()
    rt = load(tmp_path, model)
    rt.profiler.enabled = True
    x = RNG.standard_normal((1, 5, 6, 7)).astype(np.float32)
    for _ in range(3):
        got = rt.run({"x": x})
    assert rt.profiler.runs == 3
    timed = {row[0] for row in rt.profiler.per_node()}
    # the first stage's nodes and the rest's (NonZero itself is computed on the host when
    # the rest is planned: its input is known then)
    assert {"conv", "square", "gather", "shift"} <= timed
    shapes = rt.tensor_shapes()
    assert shapes["scores"].dims == got["scores"].shape and shapes["sq"].dims == (1, 5, 6, 7)
    memory = rt.memory()
    assert memory["arena"] >= rt.memory_bytes > 0


def test_a_bad_computed_value_fails_the_run_only(tmp_path):
    """A computed shape that does not fit is the run's ShapeError naming the node; the next
    run with good data works."""
    nodes = [helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Cast", ["r"], ["shape"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="computed_reshape")]
    model = make_model(nodes, [("x", FLOAT, [2, 6]), ("s", FLOAT, [2])],
                       [("y", FLOAT, None)])
    rt = load(tmp_path, model)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    with pytest.raises(pplpy.ShapeError, match='"computed_reshape"'):
        rt.run({"x": x, "s": np.array([5, 2], np.float32)})
    for s in ([3, 4], [12, 1], [1, 12]):
        assert_matches(rt, model, {"x": x, "s": np.array(s, np.float32)})


def test_a_value_no_cut_can_supply_is_still_refused(tmp_path):
    """A Loop whose body computes a NonZero of its carried value: the Loop's output shapes
    need a value inside the body, which no cut of the outer graph makes known."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["v"], ["v_out"]),
         helper.make_node("NonZero", ["v"], ["nz"])],
        "body",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond", BOOL, []),
         helper.make_tensor_value_info("v", FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("v_out", FLOAT, [4]),
         helper.make_tensor_value_info("nz", INT64, None)])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["v_final", "scan"], body=body,
                              name="loop")]
    model = make_model(nodes, [("x", FLOAT, [4])],
                       [("v_final", FLOAT, None), ("scan", INT64, None)],
                       [("n", np.array(2, np.int64))], opset=13)
    rt = load(tmp_path, model)
    with pytest.raises(pplpy.UnsupportedOpError, match='"loop"'):
        rt.run({"x": np.array([1, 0, 2, 0], np.float32)})


def test_nms_of_a_detector_head(tmp_path):
    """Boxes and scores from a head computed by the run, NonMaxSuppression, the kept boxes
    gathered: a detector's tail."""
    w = RNG.standard_normal((8, 5)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["feat", "w"], ["head"]),
        helper.make_node("Split", ["head", "sizes"], ["raw_boxes", "raw_scores"], axis=2),
        helper.make_node("Sigmoid", ["raw_boxes"], ["boxes"]),
        helper.make_node("Transpose", ["raw_scores"], ["logits"], perm=[0, 2, 1]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"],
                         ["sel"]),
        helper.make_node("Gather", ["sel", "col2"], ["box_ids"], axis=1),
        helper.make_node("Gather", ["boxes", "box_ids"], ["kept"], axis=1),
    ]
    model = make_model(nodes, [("feat", FLOAT, [1, 30, 8])],
                       [("sel", INT64, None), ("kept", FLOAT, None)],
                       [("w", w), ("sizes", np.array([4, 1], np.int64)),
                        ("max_out", np.array([5], np.int64)),
                        ("iou", np.array([0.4], np.float32)),
                        ("thr", np.array([0.3], np.float32)),
                        ("col2", np.array(2, np.int64))], opset=13)
    rt = load(tmp_path, model)
    for _ in range(3):
        assert_matches(rt, model,
                       {"feat": RNG.standard_normal((1, 30, 8)).astype(np.float32)})


def test_pplnn_runs_a_staged_model(tmp_path, capsys):
    path = tmp_path / "keypoints.onnx"
    onnx.save(keypoint_model(), path)
    status = main(["--onnx-model", str(path), "--enable-profiling",
                   "--min-profiling-iterations", "2", "--warmup-iterations", "1"])
    out, _ = capsys.readouterr()
    assert status == 0
    assert "gather" in out and "conv" in out and 'output "idx": int64' in out


def parallel_nonzeros(n):
    """n independent NonZero branches of one input, their counts summed: n cuts."""
    nodes, inits = [], [("zero", np.float32(0))]
    for i in range(n):
        nodes += [helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"]),
                  helper.make_node("Greater", [f"a{i}", "zero"], [f"m{i}"]),
                  helper.make_node("NonZero", [f"m{i}"], [f"nz{i}"]),
                  helper.make_node("ReduceSum", [f"nz{i}"], [f"s{i}"], keepdims=0)]
        inits.append((f"c{i}", np.float32(i / n - 0.5)))
    nodes.append(helper.make_node("Sum", [f"s{i}" for i in range(n)], ["out"]))
    return make_model(nodes, [("x", FLOAT, [16])], [("out", INT64, None)], inits)


def test_cuts_are_bounded(tmp_path):
    """64 cuts run (stages of stages share the root's records, so planning stays linear in
    the cuts); past that the run is refused, not a RecursionError deep in the planner."""
    from pplpy.runtime.staged_plan import MAX_CUTS

    x = np.linspace(-1, 1, 16).astype(np.float32)
    model = parallel_nonzeros(MAX_CUTS)
    assert_matches(load(tmp_path, model), model, {"x": x})
    rt = load(tmp_path, parallel_nonzeros(MAX_CUTS + 1))
    with pytest.raises(pplpy.UnsupportedOpError, match=f"more than {MAX_CUTS} cuts"):
        rt.run({"x": x})


def test_a_failed_run_leaves_no_profile_behind(tmp_path):
    """The first stage has run and recorded its steps when the rest fails: the profiler
    forgets them, as it records nothing of a failed unstaged run."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["y"], name="sigmoid"),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Cast", ["r"], ["shape"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["y", "shape"], ["z"], name="computed_reshape")]
    model = make_model(nodes, [("x", FLOAT, [2, 6]), ("s", FLOAT, [2])],
                       [("z", FLOAT, None)])
    rt = load(tmp_path, model)
    rt.profiler.enabled = True
    x = np.ones((2, 6), np.float32)
    rt.run({"x": x, "s": np.array([3, 4], np.float32)})
    times = dict(rt.profiler.node_times)
    events = len(rt.profiler.trace_events)
    for _ in range(3):
        with pytest.raises(pplpy.ShapeError):
            rt.run({"x": x, "s": np.array([5, 4], np.float32)})
    assert rt.profiler.runs == 1
    assert dict(rt.profiler.node_times) == times and len(rt.profiler.trace_events) == events
    rt.run({"x": x, "s": np.array([3, 4], np.float32)})
    assert rt.profiler.runs == 2 and rt.profiler.node_times["sigmoid"] > times["sigmoid"]
