"""If, Loop and Scan through pplpy.load, against onnx.reference under every ISA tier: bodies
reading outer values, nesting, loop-carried values and scan outputs, both Scan forms, the
plan-time rules (a condition or trip count the plan cannot know), constant folding, and the
errors a malformed body gives."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from onnx_builders import FLOAT, INT64, ISAS, ort_session

BOOL = TensorProto.BOOL
RNG = np.random.default_rng(11)


def vi(name, elem_type, dims):
    return helper.make_tensor_value_info(name, elem_type, dims)


def model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "control", [vi(*i) for i in inputs],
                              [vi(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference(onnx_model, feeds, by="onnx"):
    """Expected outputs from onnx.reference, or from onnxruntime (``by="ort"``) where the
    reference cannot run the case: its Loop treats an absent cond as false and cannot stack
    zero iterations."""
    if by == "ort":
        session = ort_session(onnx_model)
        return session.run(None, feeds)
    return ReferenceEvaluator(onnx_model).run(None, feeds)


def check(tmp_path, onnx_model, feeds, isa="sse", rtol=1e-5, by="onnx"):
    """Run with pplpy and the reference; returns the pplpy runtime."""
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=2)
    got = rt.run(feeds)
    want = reference(onnx_model, feeds, by)
    for name, expected in zip(rt.output_names, want):
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=1e-6, err_msg=name)
    return rt


def branch(name, nodes, outputs):
    return helper.make_graph(nodes, name, [], [vi(*o) for o in outputs])


def if_model(opset=13):
    """y = If(cond): then x + w (x from the model, w an outer initializer), else x * x."""
    then_g = branch("then", [helper.make_node("Add", ["x", "w"], ["t"])], [("t", FLOAT, None)])
    else_g = branch("else", [helper.make_node("Mul", ["x", "x"], ["e"])], [("e", FLOAT, None)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)
    return model([node], [("cond", BOOL, []), ("x", FLOAT, ["N", 3])], [("y", FLOAT, None)],
                 [("w", RNG.standard_normal(3).astype(np.float32))], opset)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("opset", [11, 13, 16, 19, 21, 23])
def test_if_both_branches_read_outer_values(isa, opset, tmp_path):
    m = if_model(opset)
    for cond in (True, False):
        for n in (1, 4):
            x = RNG.standard_normal((n, 3)).astype(np.float32)
            check(tmp_path, m, {"cond": np.array(cond), "x": x}, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_nested_if(isa, tmp_path):
    inner_then = branch("it", [helper.make_node("Neg", ["x"], ["a"])], [("a", FLOAT, None)])
    inner_else = branch("ie", [helper.make_node("Abs", ["x"], ["b"])], [("b", FLOAT, None)])
    outer_then = branch("ot", [helper.make_node("If", ["c2"], ["r"], then_branch=inner_then,
                                                else_branch=inner_else)], [("r", FLOAT, None)])
    outer_else = branch("oe", [helper.make_node("Relu", ["x"], ["s"])], [("s", FLOAT, None)])
    node = helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)
    m = model([node], [("c1", BOOL, []), ("c2", BOOL, []), ("x", FLOAT, [2, 5])],
              [("y", FLOAT, None)])
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    for c1 in (True, False):
        for c2 in (True, False):
            check(tmp_path, m, {"c1": np.array(c1), "c2": np.array(c2), "x": x}, isa)


def test_if_condition_computed_at_run_time_when_shapes_agree(tmp_path):
    """cond from a float comparison (not known when the plan is made): fine, both branches
    give the same shape."""
    m = if_model()
    m.graph.node.insert(0, helper.make_node("Greater", ["s", "z"], ["cond"]))
    m.graph.input.pop(0)
    m.graph.input.append(vi("s", FLOAT, []))
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "z"))
    x = RNG.standard_normal((3, 3)).astype(np.float32)
    for s in (1.0, -1.0):
        check(tmp_path, m, {"s": np.array(s, np.float32), "x": x})


def test_if_branch_shapes_differ_and_cond_computed_at_run_time(tmp_path):
    """cond computed by another node, branches of different shapes: the If is planned once
    cond is known (a staged plan), each branch in its turn."""
    then_g = branch("t", [helper.make_node("Identity", ["x"], ["a"])], [("a", FLOAT, None)])
    else_g = branch("e", [helper.make_node("Concat", ["x", "x"], ["b"], axis=0)],
                    [("b", FLOAT, None)])
    nodes = [helper.make_node("Greater", ["s", "z"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then_g,
                              else_branch=else_g)]
    m = model(nodes, [("s", FLOAT, []), ("x", FLOAT, [2])], [("y", FLOAT, None)],
              [("z", np.zeros((), np.float32))])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    rt = pplpy.load(path)
    x = np.arange(2, dtype=np.float32)
    for s in (1, -1, 2):
        want = x if s > 0 else np.concatenate([x, x])
        np.testing.assert_array_equal(rt.run({"s": np.array(s, np.float32), "x": x})["y"],
                                      want)
    # Fed as a model input, cond is known when the plan is made: both branches run.
    m2 = model([nodes[1]], [("c", BOOL, []), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    for c in (True, False):
        check(tmp_path, m2, {"c": np.array(c), "x": np.arange(2, dtype=np.float32)})


def loop_body(with_scan=True, own_cond=False):
    """(i, cond, acc) -> (cond, acc + x[i] * k, [acc]); x and k are outer values."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["xi"]),
        helper.make_node("Mul", ["xi", "k"], ["xk"]),
        helper.make_node("Add", ["acc", "xk"], ["acc_out"]),
    ]
    if own_cond:  # keep going while acc_out < 10
        nodes.append(helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0))
        nodes.append(helper.make_node("Less", ["total", "ten"], ["cond_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    outputs = [("cond_out", BOOL, []), ("acc_out", FLOAT, None)]
    if with_scan:
        nodes.append(helper.make_node("Identity", ["acc_out"], ["scan"]))
        outputs.append(("scan", FLOAT, None))
    inits = [numpy_helper.from_array(np.array(10, np.float32), "ten")]
    return helper.make_graph(nodes, "body", [vi("i", INT64, []), vi("cond", BOOL, []),
                                             vi("acc", FLOAT, None)],
                             [vi(*o) for o in outputs], inits)


def loop_model(trip, cond, with_scan=True, own_cond=False):
    body = loop_body(with_scan, own_cond)
    outputs = ["acc_final"] + (["scans"] if with_scan else [])
    node = helper.make_node("Loop", [trip, cond, "acc0"], outputs, name="loop", body=body)
    inputs = [("x", FLOAT, [6, 2]), ("acc0", FLOAT, [2])]
    if trip:
        inputs.append((trip, INT64, []))
    if cond:
        inputs.append((cond, BOOL, []))
    return model([node], inputs, [(o, FLOAT, None) for o in outputs],
                 [("k", np.array([2.0, -1.0], np.float32))])


def loop_feeds(**extra):
    feeds = {"x": RNG.standard_normal((6, 2)).astype(np.float32),
             "acc0": RNG.standard_normal(2).astype(np.float32)}
    feeds.update(extra)
    return feeds


@pytest.mark.parametrize("isa", ISAS)
def test_loop_trip_count_with_carried_values_and_scan_outputs(isa, tmp_path):
    m = loop_model("M", "")
    for trip in (1, 4, 6):
        rt = check(tmp_path, m, loop_feeds(M=np.array(trip, np.int64)), isa, by="ort")
    # No iteration (the reference cannot stack nothing): acc0 back, an empty scan output.
    feeds = loop_feeds(M=np.array(0, np.int64))
    got = rt.run(feeds)
    np.testing.assert_array_equal(got["acc_final"], feeds["acc0"])
    assert got["scans"].shape == (0, 2)


@pytest.mark.parametrize("isa", ISAS)
def test_loop_trip_count_and_cond(isa, tmp_path):
    m = loop_model("M", "c")
    for trip, cond in ((3, True), (6, True)):
        check(tmp_path, m, loop_feeds(M=np.array(trip, np.int64), c=np.array(cond)), isa)
    feeds = loop_feeds(M=np.array(5, np.int64), c=np.array(False))  # no iteration
    got = pplpy.load(tmp_path / "m.onnx", max_isa=isa).run(feeds)
    np.testing.assert_array_equal(got["acc_final"], feeds["acc0"])
    assert got["scans"].shape == (0, 2)


@pytest.mark.parametrize("isa", ISAS)
def test_loop_cond_decided_by_the_body(isa, tmp_path):
    """A while loop: iterations decided at run time, fine without scan outputs (the carried
    value keeps its shape), and with M bounding it."""
    m = loop_model("M", "c", with_scan=False, own_cond=True)
    for trip in (2, 6):
        feeds = loop_feeds(M=np.array(trip, np.int64), c=np.array(True))
        feeds["x"] = np.abs(feeds["x"]) + 1
        check(tmp_path, m, feeds, isa)
    m = loop_model("", "c", with_scan=False, own_cond=True)
    feeds = loop_feeds(c=np.array(True))
    feeds["x"] = np.full((6, 2), 3.0, np.float32)
    feeds["acc0"] = np.zeros(2, np.float32)
    check(tmp_path, m, feeds, isa)


def test_loop_counted_on_the_host_when_every_input_is_known(tmp_path):
    """Body-decided cond with scan outputs: the plan runs the loop on the host (x, acc0 are
    initializers; M and c model inputs fed by value)."""
    m = loop_model("M", "c", with_scan=True, own_cond=True)
    x = np.full((6, 2), 2.0, np.float32)
    acc0 = np.zeros(2, np.float32)
    graph = m.graph
    keep = [i for i in graph.input if i.name not in ("x", "acc0")]
    del graph.input[:]
    graph.input.extend(keep)
    graph.initializer.extend([numpy_helper.from_array(x, "x"),
                              numpy_helper.from_array(acc0, "acc0")])
    rt = check(tmp_path, m, {"M": np.array(6, np.int64), "c": np.array(True)})
    assert rt.run({"M": np.array(6, np.int64), "c": np.array(True)})["scans"].shape[0] < 6


def test_loop_with_unknown_count_and_scan_outputs_is_refused(tmp_path):
    m = loop_model("M", "c", with_scan=True, own_cond=True)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(pplpy.UnsupportedOpError, match='"loop".*iterations'):
        pplpy.load(path).run(loop_feeds(M=np.array(6, np.int64), c=np.array(True)))


def test_loop_on_constants_is_folded(tmp_path):
    """Every input constant: constant folding runs the Loop once at build time."""
    m = loop_model("M", "")
    graph = m.graph
    del graph.input[:]
    graph.initializer.extend([
        numpy_helper.from_array(RNG.standard_normal((6, 2)).astype(np.float32), "x"),
        numpy_helper.from_array(np.ones(2, np.float32), "acc0"),
        numpy_helper.from_array(np.array(3, np.int64), "M")])
    graph.node.append(helper.make_node("Relu", ["acc_final"], ["r"]))
    graph.node.append(helper.make_node("Relu", ["scans"], ["r2"]))
    graph.output[0].name, graph.output[1].name = "r", "r2"
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    rt = pplpy.load(path)
    assert not [n for n in rt.graph.nodes if n.op_type == "Loop"]
    want = reference(m, {}, by="ort")
    got = rt.run({})
    np.testing.assert_allclose(got["r"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["r2"], want[1], rtol=1e-6)


def scan_body(state_rank):
    nodes = [helper.make_node("Add", ["s", "xt"], ["s_out"]),
             helper.make_node("Mul", ["s_out", "w"], ["y"])]
    dims = [None] * state_rank
    return helper.make_graph(nodes, "scan_body", [vi("s", FLOAT, dims), vi("xt", FLOAT, dims)],
                             [vi("s_out", FLOAT, dims), vi("y", FLOAT, dims)])


W = np.array([1.0, 0.5, -2.0], np.float32)


def scan_reference(s0, x, in_axis, in_dir, out_axis, out_dir):
    """The scan of scan_body in numpy: onnx.reference's Scan takes only axis 0, forward
    and no Scan 8 batch form."""
    steps = np.moveaxis(x, in_axis, 0)
    if in_dir:
        steps = steps[::-1]
    s, ys = s0.copy(), []
    for xt in steps:
        s = s + xt
        ys.append(s * W)
    if out_dir:
        ys = ys[::-1]
    return s, np.stack(ys, axis=out_axis)


def run_pplpy(tmp_path, onnx_model, feeds, isa):
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model, path)
    return pplpy.load(path, max_isa=isa, num_threads=2).run(feeds)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("axes", [(0, 0, 0, 0), (1, 1, 0, 1), (-1, 0, -1, 0), (1, 0, 1, 1)])
def test_scan9(isa, axes, tmp_path):
    """Scan 9+: scan input axis / direction, scan output axis / direction; w is outer."""
    in_axis, in_dir, out_axis, out_dir = axes
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], num_scan_inputs=1,
                            body=scan_body(1), scan_input_axes=[in_axis],
                            scan_input_directions=[in_dir], scan_output_axes=[out_axis],
                            scan_output_directions=[out_dir])
    x_shape = (5, 3) if in_axis == 0 else (3, 5)
    m = model([node], [("s0", FLOAT, [3]), ("x", FLOAT, list(x_shape))],
              [("s", FLOAT, None), ("ys", FLOAT, None)], [("w", W)], opset=16)
    feeds = {"s0": RNG.standard_normal(3).astype(np.float32),
             "x": RNG.standard_normal(x_shape).astype(np.float32)}
    got = run_pplpy(tmp_path, m, feeds, isa)
    s, ys = scan_reference(feeds["s0"], feeds["x"], *axes)
    np.testing.assert_allclose(got["s"], s, rtol=1e-6)
    np.testing.assert_allclose(got["ys"], ys, rtol=1e-6)
    if axes == (0, 0, 0, 0):  # the form onnx.reference runs
        check(tmp_path, m, feeds, isa)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("direction", [0, 1])
def test_scan8_with_batch_axis(isa, direction, tmp_path):
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], num_scan_inputs=1,
                            body=scan_body(1), directions=[direction])
    m = model([node], [("s0", FLOAT, [2, 3]), ("x", FLOAT, [2, 4, 3])],
              [("s", FLOAT, None), ("ys", FLOAT, None)], [("w", W)], opset=8)
    feeds = {"s0": RNG.standard_normal((2, 3)).astype(np.float32),
             "x": RNG.standard_normal((2, 4, 3)).astype(np.float32)}
    got = run_pplpy(tmp_path, m, feeds, isa)
    for b in range(2):
        s, ys = scan_reference(feeds["s0"][b], feeds["x"][b], 0, direction, 0, 0)
        np.testing.assert_allclose(got["s"][b], s, rtol=1e-6)
        np.testing.assert_allclose(got["ys"][b], ys, rtol=1e-6)


def test_scan8_short_sequence_lens_is_refused(tmp_path):
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "ys"], name="scan8",
                            num_scan_inputs=1, body=scan_body(1))
    m = model([node], [("s0", FLOAT, [1, 3]), ("x", FLOAT, [1, 4, 3])],
              [("s", FLOAT, None), ("ys", FLOAT, None)],
              [("w", np.ones(3, np.float32)), ("lens", np.array([2], np.int64))], opset=8)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(pplpy.UnsupportedOpError, match='"scan8".*sequence_lens'):
        pplpy.load(path)


def load_error(tmp_path, onnx_model):
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model, path)
    with pytest.raises(pplpy.PplError) as info:
        pplpy.load(path)
    return info.value


def test_body_with_the_wrong_output_count_names_the_node(tmp_path):
    then_g = branch("t", [helper.make_node("Neg", ["x"], ["a"]),
                          helper.make_node("Abs", ["x"], ["b"])],
                    [("a", FLOAT, None), ("b", FLOAT, None)])
    else_g = branch("e", [helper.make_node("Abs", ["x"], ["c"])], [("c", FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], name="twoway", then_branch=then_g,
                            else_branch=else_g)
    m = model([node], [("c", BOOL, []), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    error = load_error(tmp_path, m)
    assert isinstance(error, pplpy.ModelError) and '"twoway"' in str(error)
    assert "then_branch has 2 outputs" in str(error)

    body = loop_body()
    del body.output[2]  # the scan output the node expects
    node = helper.make_node("Loop", ["M", "", "acc0"], ["a", "s"], name="short", body=body)
    m = model([node], [("x", FLOAT, [6, 2]), ("acc0", FLOAT, [2]), ("M", INT64, [])],
              [("a", FLOAT, None), ("s", FLOAT, None)], [("k", np.ones(2, np.float32))])
    error = load_error(tmp_path, m)
    assert isinstance(error, pplpy.ModelError) and '"short"' in str(error)


def test_condition_that_is_not_bool_names_the_node(tmp_path):
    m = if_model()
    node = m.graph.node[0]
    node.name = "floaty"
    m.graph.input[0].CopyFrom(vi("cond", FLOAT, []))
    error = load_error(tmp_path, m)
    assert isinstance(error, pplpy.ModelError)
    assert '"floaty"' in str(error) and "bool" in str(error)

    m = loop_model("M", "c")
    m.graph.input[3].CopyFrom(vi("c", FLOAT, []))
    error = load_error(tmp_path, m)
    assert isinstance(error, pplpy.ModelError) and '"loop"' in str(error)


def test_unsupported_op_inside_a_body_is_reported_at_load(tmp_path):
    then_g = branch("t", [helper.make_node("NoSuchOp", ["x"], ["a"], name="odd")],
                    [("a", FLOAT, None)])
    else_g = branch("e", [helper.make_node("Abs", ["x"], ["b"])], [("b", FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    m = model([node], [("c", BOOL, []), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    error = load_error(tmp_path, m)
    assert isinstance(error, pplpy.UnsupportedOpError) and '"odd"' in str(error)


def test_if_is_a_python_step_and_its_branches_compiled_steps(tmp_path):
    """Control flow is the documented exception to compiled steps (tests/runtime/
    test_runtime.py: PYTHON_STEP_KERNELS); the branch it runs is compiled."""
    from pplpy.runtime.step import PythonStep

    path = tmp_path / "m.onnx"
    onnx.save(if_model(), path)
    rt = pplpy.load(path)
    rt.run({"cond": np.array(True), "x": np.ones((2, 3), np.float32)})
    steps = rt._last.plan.steps
    assert [type(s) for s in steps] == [PythonStep]
    (node,) = [n for n in rt.graph.nodes if n.op_type == "If"]
    body = rt.result.ops[node].then_body
    built = next(b for (types, shapes), b in body._builds.items() if shapes[0] == (2, 3))
    inner = pplpy.runtime.Runtime(built.result, value_feeds=built.value_feeds)
    inner.run({"x": np.ones((2, 3), np.float32), "w": np.ones(3, np.float32)})
    assert inner._last.plan.steps and not any(isinstance(s, PythonStep)
                                              for s in inner._last.plan.steps)


# -- rank-0 initializers read by control flow keep rank 0 --------------------------------------
# (the plan gave Python steps np.ascontiguousarray(value), which is (1,) for a scalar)


def model0(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize("trip", [0, 2])
def test_loop_carries_a_scalar_initializer_with_its_rank(trip):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]),
         helper.make_node("Add", ["k", "w"], ["kn"])],
        "body", [vi("i", INT64, []), vi("cin", BOOL, []), vi("k", FLOAT, [])],
        [vi("cout", BOOL, []), vi("kn", FLOAT, [])])
    m = model0([helper.make_node("Loop", ["M", "", "k0"], ["kf"], body=body)], [],
              [vi("kf", FLOAT, None)],
              [("M", np.array(trip, np.int64)), ("k0", np.array(1.0, np.float32)),
               ("w", np.array(2.5, np.float32))])
    got = pplpy.load(m.SerializeToString(), passes=[]).run({})["kf"]
    assert got.shape == ()
    assert got == np.float32(1.0 + 2.5 * trip)


@pytest.mark.parametrize("cond", [True, False])
def test_if_branch_returns_an_outer_scalar_initializer(cond):
    then_g = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [],
                               [vi("t", FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["w"], ["e"])], "else", [],
                               [vi("e", FLOAT, None)])
    m = model0([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", BOOL, [])], [vi("y", FLOAT, None)], [("w", np.array(2.5, np.float32))])
    got = pplpy.load(m.SerializeToString()).run({"c": np.array(cond)})["y"]
    assert got.shape == ()
    assert got == (2.5 if cond else -2.5)


def test_scan_starts_from_a_scalar_initializer():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["sn"]), helper.make_node("Identity", ["sn"], ["o"])],
        "body", [vi("s", FLOAT, []), vi("xt", FLOAT, [])],
        [vi("sn", FLOAT, []), vi("o", FLOAT, [])])
    m = model0([helper.make_node("Scan", ["s0", "x"], ["sf", "os"], body=body, num_scan_inputs=1)],
              [vi("x", FLOAT, [4])], [vi("sf", FLOAT, None), vi("os", FLOAT, None)],
              [("s0", np.array(1.0, np.float32))])
    got = pplpy.load(m.SerializeToString()).run({"x": np.arange(4, dtype=np.float32)})
    assert got["sf"].shape == () and got["sf"] == 7.0
    np.testing.assert_array_equal(got["os"], [1, 2, 4, 7])


def test_a_dropped_model_frees_its_bodies():
    """Loading and dropping a model with an If leaves none of its bodies (and their builds,
    here a 1 MiB weight each) behind: the table of bodies held each graph alive from its
    own values, so a service that reloads models grew by megabytes per load."""
    import gc
    import weakref

    from pplpy.engines.x86.ops.onnx import control_body

    w = RNG.standard_normal((256, 256)).astype(np.float32)

    def branch(name):
        return helper.make_graph([helper.make_node("MatMul", ["x", "w" + name], [name])],
                                 name, [], [vi(name, FLOAT, [1, 256])],
                                 [numpy_helper.from_array(w, "w" + name)])

    m = model([helper.make_node("If", ["c"], ["y"], then_branch=branch("t"),
                                else_branch=branch("e"))],
              [("x", FLOAT, [1, 256]), ("c", TensorProto.BOOL, [])], [("y", FLOAT, [1, 256])])
    feeds = {"x": np.ones((1, 256), np.float32), "c": np.array(True)}
    # Held strongly until the load is done: an earlier test's graph freed meanwhile could
    # leave its id() to one of this model's branches (that flaked in CI).
    before = list(control_body._BODIES.keys())
    rt = pplpy.load(m.SerializeToString(), num_threads=1)
    np.testing.assert_allclose(rt.run(feeds)["y"], feeds["x"] @ w, rtol=1e-5, atol=1e-4)
    ours = [weakref.ref(g) for g in control_body._BODIES.keys()
            if not any(g is old for old in before)]
    del before
    assert len(ours) >= 2  # the two branches
    del rt
    gc.collect()
    assert all(ref() is None for ref in ours)


def test_a_loop_whose_carried_value_grows_starts_no_pool_per_length():
    """Each length of a growing carried value is a body runtime of its own; each had its own
    thread pool (num_threads - 1 workers a length: 2,000 threads for 300 iterations).  Body
    runtimes run on the process-wide pool now."""
    import os

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Concat", ["v_in", "row"], ["v_out"], axis=0)], "body",
        [vi("it", INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("v_in", FLOAT, ["n", 4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", FLOAT, ["m", 4])])
    m = model([helper.make_node("Loop", ["M", "", "x"], ["v"], body=body)],
              [("x", FLOAT, [1, 4]), ("M", INT64, [])], [("v", FLOAT, ["T", 4])],
              [("row", np.ones((1, 4), np.float32))], opset=17)

    def threads():
        return len(os.listdir("/proc/self/task"))

    before = threads()
    rt = pplpy.load(m.SerializeToString(), num_threads=4)
    x = np.zeros((1, 4), np.float32)
    for trips in (10, 40, 40):
        out = rt.run({"x": x, "M": np.array(trips, np.int64)})["v"]
        np.testing.assert_array_equal(out, np.concatenate([x, np.ones((trips, 4), np.float32)]))
    # The runtime's 3 workers, and at most the process-wide pool's 3 if it was not running.
    assert threads() - before <= 6


def _table_loop(trip_count_input, index_scale, table_rows, acc_dims, dtype=np.float32):
    """A Loop summing rows table[i * index_scale] of a table of ``dtype``."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    body = helper.make_graph(
        [helper.make_node("Mul", ["i", "scale"], ["j"]),
         helper.make_node("Gather", ["table", "j"], ["row"], axis=0),
         helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Add", ["acc", "row"], ["acc_out"])], "body",
        [vi("i", INT64, []), vi("c", TensorProto.BOOL, []), vi("acc", elem, acc_dims)],
        [vi("c_out", TensorProto.BOOL, []), vi("acc_out", elem, acc_dims)],
        [numpy_helper.from_array(np.array(index_scale, np.int64), "scale")])
    table = np.arange(table_rows * max(1, int(np.prod(acc_dims))), dtype=dtype)
    return (helper.make_node("Loop", [trip_count_input, "", "acc0"], ["total"], body=body),
            [("table", table.reshape(table_rows, *acc_dims)), ("acc0", np.zeros(acc_dims, dtype))])


def test_a_loop_that_reads_past_its_table_only_at_a_probe_size_loads():
    """A Loop of N trips (N a free dim) reading table[i] of 200 rows is valid for N <= 200;
    the build's probe sizes (up to 321) ran its body past the table, and the fault of that
    build-time run failed the load.  It is the run's business now."""
    loop, inits = _table_loop("n", 1, 200, [], np.int64)  # int64: computed on the host
    m = model([helper.make_node("Shape", ["x"], ["s"]),
               helper.make_node("Gather", ["s", "one"], ["n"], axis=0), loop,
               helper.make_node("Cast", ["total"], ["t"], to=FLOAT),
               helper.make_node("Add", ["x", "t"], ["y"])],
              [("x", FLOAT, [1, "N"])], [("y", FLOAT, None)],
              inits + [("one", np.array(1, np.int64))], opset=17)
    rt = pplpy.load(m.SerializeToString())
    x = np.zeros((1, 10), np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.full((1, 10), 45, np.float32))
    with pytest.raises(pplpy.InputError, match="index 200 is out of range"):
        rt.run({"x": np.zeros((1, 201), np.float32)})


def test_a_constant_loop_that_reads_past_its_table_fails_each_run_not_the_load():
    """Constant folding computed the constant Loop at load and its Gather's fault failed the
    load with an InputError, no feed given; the node now stays and each run reports it, as
    ONNX Runtime loads the model and fails its runs."""
    loop, inits = _table_loop("n", 2, 4, [3])
    m = model([loop, helper.make_node("Add", ["total", "x"], ["y"])],
              [("x", FLOAT, [3])], [("y", FLOAT, None)],
              inits + [("n", np.array(3, np.int64))], opset=17)
    rt = pplpy.load(m.SerializeToString())
    assert [n.op_type for n in rt.graph.nodes].count("Loop") == 1
    with pytest.raises(pplpy.InputError, match=r'body: node .*index 4 is out of range'):
        rt.run({"x": np.zeros(3, np.float32)})
