"""Stress: runtimes of one RuntimeBuilder run from 8 threads at once (1,000 runs each, three
batch sizes) and give outputs identical to one thread's; one runtime's RSS stays flat over
10,000 runs; a failing run (a wrong-shape feed, a plugin op that raises) changes nothing for
the runs after it, alone and amid concurrent runs.

The model is a small residual CNN (Conv/Relu/Conv/Add/Relu/GlobalAveragePool, free batch)
behind a plugin op ``Guard`` that copies its input and raises on a marked one, so the runs
stay in the tens of microseconds and the whole file takes a few seconds."""

import threading

import numpy as np
import pytest
from onnx import helper
from onnx_builders import FLOAT, make_model

import pplpy
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import same_shape_as_input

DOMAIN = "test.stress"
MARK = np.float32(-12345.0)  # x[0, 0, 0, 0] == MARK makes Guard raise
BATCHES = (1, 2, 3)
THREADS = 8
RUNS = 1000


class MarkedInput(Exception):
    pass


class _GuardKernel(X86Kernel):
    def do_execute(self, ctx):
        x = ctx.inputs[0]
        if x.size and x.flat[0] == MARK:
            raise MarkedInput("marked input")
        ctx.outputs[0][...] = x


@op(DOMAIN, "Guard", since=1)
class GuardOp(X86OptKernel):
    infer_shape = same_shape_as_input

    def create_kernel(self):
        return _GuardKernel(self)


def cnn_model():
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Guard", ["x"], ["gx"], name="guard", domain=DOMAIN),
        helper.make_node("Conv", ["gx", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["y"], name="gap"),
    ]
    return make_model(nodes, [("x", FLOAT, ["N", 3, 8, 8])], [("y", FLOAT, ["N", 8, 1, 1])],
                      [("w1", w1), ("b1", b1), ("w2", w2)], extra_opsets=[(DOMAIN, 1)])


@pytest.fixture(scope="module")
def builder():
    return pplpy.RuntimeBuilder.from_onnx(cnn_model().SerializeToString(),
                                          engines=[pplpy.X86Engine(num_threads=2)])


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(11)
    return [rng.standard_normal((BATCHES[i % len(BATCHES)], 3, 8, 8)).astype(np.float32)
            for i in range(12)]


@pytest.fixture(scope="module")
def expected(builder, feeds):
    rt = builder.create_runtime()
    return [rt.run({"x": x})["y"] for x in feeds]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_the_reference_is_the_model(builder, feeds, expected):
    """The single-thread results the others are compared with are the model's (numpy)."""
    x = feeds[0]
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)

    def conv(a, w):
        p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.stack([p[:, :, i:i + 8, j:j + 8] for i in range(3) for j in range(3)], -1)
        return np.einsum("nchwk,ock->nohw", cols, w.reshape(w.shape[0], w.shape[1], 9))

    r1 = np.maximum(conv(x, w1) + b1[None, :, None, None], 0)
    want = np.maximum(conv(r1, w2) + r1, 0).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(expected[0], want, rtol=1e-4, atol=1e-5)


def test_8_threads_1000_runs_each_match_one_thread(builder, feeds, expected):
    errors, mismatches = [], []
    start = threading.Barrier(THREADS)

    def worker(tid):
        try:
            rt = builder.create_runtime()
            start.wait()
            for i in range(RUNS):
                k = (i + tid) % len(feeds)
                out = rt.run({"x": feeds[k]})["y"]
                if not np.array_equal(out, expected[k]):
                    mismatches.append((tid, i, k))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append((tid, repr(exc)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == []
    assert mismatches == [], f"{len(mismatches)} runs differ, first {mismatches[:5]}"


def test_threads_sharing_one_runtime_are_serialised(builder, feeds, expected):
    """Calls on one Runtime from several threads wait for each other (a lock): still exact."""
    rt = builder.create_runtime()
    bad = []

    def worker(tid):
        for i in range(200):
            k = (i * 3 + tid) % len(feeds)
            if not np.array_equal(rt.run({"x": feeds[k]})["y"], expected[k]):
                bad.append((tid, i))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert bad == []


def test_rss_flat_over_10000_runs(builder, feeds, expected):
    rt = builder.create_runtime()
    for i in range(500):  # warm up: one plan per batch size, allocator pools
        rt.run({"x": feeds[i % len(feeds)]})
    before = rss_bytes()
    for i in range(10_000):
        out = rt.run({"x": feeds[i % len(feeds)]})
    after = rss_bytes()
    assert np.array_equal(out["y"], expected[(10_000 - 1) % len(feeds)])
    assert after - before < 5 * 2**20, f"RSS grew {(after - before) / 2**20:.1f} MB"


def _marked(x):
    x = x.copy()
    x[0, 0, 0, 0] = MARK
    return x


def test_a_failing_run_changes_nothing_after_it(builder, feeds, expected):
    rt = builder.create_runtime()
    wrong_shape = np.zeros((1, 3, 9, 8), np.float32)
    for i in range(60):
        k = i % len(feeds)
        if i % 3 == 1:
            with pytest.raises(pplpy.InputError, match='input "x"'):
                rt.run({"x": wrong_shape})
        elif i % 3 == 2:
            with pytest.raises(pplpy.PluginError, match='node "guard"') as info:
                rt.run({"x": _marked(feeds[k])})
            assert isinstance(info.value.__cause__, MarkedInput)
        assert np.array_equal(rt.run({"x": feeds[k]})["y"], expected[k])


def test_failing_runs_amid_concurrent_runs(builder, feeds, expected):
    """Two threads fail every other run (bad shape, marked input) while four run good feeds:
    the good runs, theirs and the others', are all exact."""
    errors, mismatches = [], []

    def good(tid):
        rt = builder.create_runtime()
        for i in range(300):
            k = (i + tid) % len(feeds)
            if not np.array_equal(rt.run({"x": feeds[k]})["y"], expected[k]):
                mismatches.append((tid, i))

    def failing(tid):
        rt = builder.create_runtime()
        try:
            for i in range(150):
                k = (i + tid) % len(feeds)
                bad = (np.zeros((2, 3, 8, 7), np.float32) if tid % 2 else _marked(feeds[k]))
                try:
                    rt.run({"x": bad})
                except (pplpy.InputError, pplpy.PluginError):
                    pass
                else:
                    errors.append((tid, i, "no error"))
                if not np.array_equal(rt.run({"x": feeds[k]})["y"], expected[k]):
                    mismatches.append((tid, i))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append((tid, repr(exc)))

    threads = ([threading.Thread(target=good, args=(t,)) for t in range(4)]
               + [threading.Thread(target=failing, args=(t,)) for t in range(2)])
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and mismatches == []
