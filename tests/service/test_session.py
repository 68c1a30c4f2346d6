"""pplpy.InferenceSession against ONNX Runtime: the same script, one import changed, the same
introspection and outputs; SessionOptions; profiling; concurrent runs."""

import json
import threading

import numpy as np
import pytest
from onnx import helper
from onnx_builders import FLOAT, make_model, ort_loadable

import pplpy

RNG = np.random.default_rng(3)


def cnn_model():
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
        helper.make_node("Sigmoid", ["y"], ["s"], name="sig"),
    ]
    return make_model(nodes, [("x", FLOAT, ["batch", 3, 8, 8])],
                      [("y", FLOAT, ["batch", 8]), ("s", FLOAT, ["batch", 8])], [("w", w)])


def script(ort, model_bytes, x):
    """Code written for ONNX Runtime's CPU provider."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, sess_options=opts,
                                providers=["CPUExecutionProvider"])
    inputs = [(i.name, i.shape, i.type) for i in sess.get_inputs()]
    outputs = [(o.name, o.shape, o.type) for o in sess.get_outputs()]
    every = sess.run(None, {sess.get_inputs()[0].name: x})
    (only_s,) = sess.run(["s"], {"x": x})
    repeated = sess.run(["s", "y", "s"], {"x": x})  # one array per name asked for
    return inputs, outputs, every, only_s, repeated


def test_same_script_runs_on_onnxruntime_and_pplpy():
    import onnxruntime  # in the test extra: a missing install must fail, not skip

    data = ort_loadable(cnn_model())
    x = RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)
    want = script(onnxruntime, data, x)
    got = script(pplpy, data, x)
    assert got[0] == want[0] == [("x", ["batch", 3, 8, 8], "tensor(float)")]
    assert got[1] == want[1]
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-4, atol=1e-5)
    assert len(got[4]) == len(want[4]) == 3
    for a, b in zip(got[4], want[4]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("level", list(pplpy.session.GraphOptimizationLevel))
def test_every_optimisation_level_gives_the_same_answer(level):
    data = cnn_model().SerializeToString()
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    opts = pplpy.SessionOptions()
    opts.graph_optimization_level = level
    got = pplpy.InferenceSession(data, opts).run(None, {"x": x})
    want = pplpy.InferenceSession(data).run(None, {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_errors_are_pplpy_errors(tmp_path):
    data = cnn_model().SerializeToString()
    with pytest.raises(pplpy.PplError, match="provider 'CUDAExecutionProvider'"):
        pplpy.InferenceSession(data, providers=["CUDAExecutionProvider"])
    sess = pplpy.InferenceSession(data)
    with pytest.raises(pplpy.InputError, match=r"unknown output\(s\) \['nope'\]"):
        sess.run(["nope"], {"x": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(pplpy.InputError, match='input "x": expected float32'):
        sess.run(None, {"x": np.zeros((1, 3, 8, 8), np.float64)})
    with pytest.raises(pplpy.ModelError, match="empty"):
        pplpy.InferenceSession(b"")
    opts = pplpy.SessionOptions()
    with pytest.raises(AttributeError):  # as in ONNX Runtime: a typo does not pass silently
        opts.intra_op_num_thread = 2
    with pytest.raises(pplpy.PplError, match="provider 'CUDAExecutionProvider'"):
        pplpy.InferenceSession(data, providers="CUDAExecutionProvider")
    one = pplpy.InferenceSession(data, providers="CPUExecutionProvider")  # a name, not letters
    assert one.get_providers() == ["CPUExecutionProvider"]


def test_profiling_writes_a_chrome_trace(tmp_path):
    opts = pplpy.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    sess = pplpy.InferenceSession(cnn_model().SerializeToString(), opts)
    for _ in range(2):
        sess.run(None, {"x": np.zeros((1, 3, 8, 8), np.float32)})
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "prof_")) and path.endswith(".json")
    events = json.loads(open(path).read())["traceEvents"]
    steps = {e["args"]["node"] for e in events}
    assert {"conv", "gap", "sig"} <= steps and all(e["ph"] == "X" for e in events)
    assert sess.end_profiling() == ""  # once, as ONNX Runtime


def test_python_profiler_trace_from_a_runtime(tmp_path):
    rt = pplpy.load(cnn_model().SerializeToString())
    rt.profiler.enabled = True
    rt.run({"x": np.zeros((2, 3, 8, 8), np.float32)})
    trace = rt.profiler.trace()
    conv = [e for e in trace["traceEvents"] if e["args"]["node"] == "conv"][0]
    assert conv["name"] == "Conv" and conv["args"]["outputs"][0]["shape"] == [2, 8, 8, 8]
    assert conv["args"]["outputs"][0]["format"] in ("NDARRAY", "N16CX")
    assert rt.profiler.save_trace(tmp_path / "t.json") == len(trace["traceEvents"])


def test_concurrent_runs_use_a_pool_of_runtimes():
    opts = pplpy.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.max_concurrency = 4
    sess = pplpy.InferenceSession(cnn_model().SerializeToString(), opts)
    xs = [RNG.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    want = [sess.run(None, {"x": x})[1] for x in xs]
    failures = []

    def work(t):
        for i in range(25):
            k = (t + i) % len(xs)
            if not np.array_equal(sess.run(["s"], {"x": xs[k]})[0], want[k]):
                failures.append((t, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and 1 <= len(sess._all) <= 4
