"""The thread pool plans run on (pplpy_pool.h): workers that join a run when they wake, a
caller that never waits for one that has not started, two job slots used in turn, a busy
pool that runs a nested plan on its caller's thread, and workers started again after fork."""

import multiprocessing
import os
import random
import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pplpy
from pplpy.engines.x86.impls._copy import make_copy_step, make_fill_step
from pplpy.runtime.step import Plan, PythonStep, ThreadPool, shared_pool

N = 1 << 20  # elements: far above the size where fill and copy steps become parallel


def fill_and_copy(pool, src, dst, value, threads=4):
    """A plan of two parallel steps: src[:] = value, then dst[:] = src."""
    steps = [make_fill_step(src.ctypes.data, src.size, np.float32(value).tobytes()),
             make_copy_step(dst.ctypes.data, src.ctypes.data, src.nbytes)]
    assert all(step.parallel for step in steps)
    return Plan(steps, threads, pool)


def test_a_pool_starts_one_worker_fewer_than_its_threads():
    assert ThreadPool(4).workers == 3
    assert ThreadPool(1).workers == 0
    assert shared_pool(3) is shared_pool(3)
    assert shared_pool(3).num_threads == 3


def test_plans_taking_turns_on_one_pool_give_their_own_results():
    # Slots alternate between runs and a slot keeps the steps of the plan it ran last:
    # plans run in a random order must never run another plan's steps.
    pool = ThreadPool(4)
    arrays = [(np.zeros(N, np.float32), np.zeros(N, np.float32)) for _ in range(3)]
    plans = [fill_and_copy(pool, src, dst, i + 1) for i, (src, dst) in enumerate(arrays)]
    order = random.Random(0).choices(range(3), k=60)
    for i in order:
        for src, dst in arrays:
            dst.fill(-1)
        plans[i].run()
        for j, (src, dst) in enumerate(arrays):
            if j == i:
                assert (dst == i + 1).all()
            else:
                assert (dst == -1).all()


def test_a_plan_started_while_its_pool_is_busy_runs_on_the_caller():
    # A Python step (on the caller's thread, inside a run) runs another plan on the same
    # pool: it cannot wait for the pool, so it runs alone, and both plans finish.
    pool = ThreadPool(3)
    a_src, a_dst, b_src, b_dst = (np.zeros(N, np.float32) for _ in range(4))
    inner = fill_and_copy(pool, b_src, b_dst, 7.0, threads=3)
    outer = Plan([make_fill_step(a_src.ctypes.data, N, np.float32(5).tobytes()),
                  PythonStep(inner.run, "nested"),
                  make_copy_step(a_dst.ctypes.data, a_src.ctypes.data, a_src.nbytes)],
                 3, pool)
    outer.run()
    assert (a_dst == 5).all() and (b_dst == 7).all()


def test_a_failing_step_stops_every_thread_and_the_pool_runs_the_next_plan():
    pool = ThreadPool(2)
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)

    def fail():
        raise ValueError("from a Python step")

    plan = Plan([make_fill_step(src.ctypes.data, N, np.float32(3).tobytes()),
                 PythonStep(fail, "fails"),
                 make_copy_step(dst.ctypes.data, src.ctypes.data, src.nbytes)], 2, pool)
    with pytest.raises(ValueError, match="from a Python step"):
        plan.run()
    assert (dst == 0).all()  # the step after the failure never ran
    fill_and_copy(pool, src, dst, 4.0, threads=2).run()
    assert (dst == 4).all()


def relu_chain_model(depth=6):
    nodes, name = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Neg", [name], [f"y{i}"]))
        name = f"y{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64, 64, 64])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 64, 64, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def out(result):
    """The one output of a run."""
    (value,) = result.values()
    return value


def _threads():
    return len(os.listdir(f"/proc/{os.getpid()}/task"))


def _run_in_child(model_bytes, x, queue):
    before = _threads()  # fork() copied only the calling thread
    rt = pplpy.load(model_bytes, num_threads=2, fusion=False)
    y = out(rt.run({"x": x}))
    queue.put((y, rt._pool.workers, _threads() - before))


def test_a_forked_process_starts_its_own_workers():
    model = relu_chain_model().SerializeToString()
    x = np.random.default_rng(0).standard_normal((4, 64, 64, 64)).astype(np.float32)
    rt = pplpy.load(model, num_threads=2, fusion=False)
    expected = out(rt.run({"x": x}))  # the parent's pool has run: its worker exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        child = context.Process(target=_run_in_child, args=(model, x, queue))
        child.start()
    got, workers, started = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, expected)
    assert workers == 1 and started >= 1  # a worker thread runs in the child
    np.testing.assert_array_equal(out(rt.run({"x": x})), expected)


def test_runtimes_running_at_once_on_their_own_pools():
    model = relu_chain_model()
    x = np.random.default_rng(1).standard_normal((4, 64, 64, 64)).astype(np.float32)
    expected = out(pplpy.load(model.SerializeToString(), num_threads=1).run({"x": x}))
    runtimes = [pplpy.load(model.SerializeToString(), num_threads=2) for _ in range(3)]
    errors = []

    def work(rt):
        try:
            for _ in range(10):
                np.testing.assert_array_equal(out(rt.run({"x": x})), expected)
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(rt,)) for rt in runtimes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    assert len({id(rt._pool) for rt in runtimes}) == 3


def test_an_idle_runtime_leaves_no_thread_spinning():
    # After a run the workers spin for about a millisecond, then sleep: a second later the
    # process's worker threads have used (almost) no CPU time.
    import time

    rt = pplpy.load(relu_chain_model().SerializeToString(), num_threads=2)
    x = np.zeros((4, 64, 64, 64), np.float32)
    rt.run({"x": x})
    time.sleep(0.2)
    before = _threads_cpu_ticks()
    time.sleep(1.0)
    after = _threads_cpu_ticks()
    busy = {tid: after[tid] - before.get(tid, 0) for tid in after}
    assert max(busy.values()) <= 5, busy  # clock ticks (1/100 s): at most 50 ms of CPU


def _threads_cpu_ticks():
    ticks = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks
