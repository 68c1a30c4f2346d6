"""The thread pool plans run on (pplpy_pool.h): workers that join a run when they wake, a
caller that never waits for one that has not started, two job slots used in turn, a busy
pool that runs a nested plan on its caller's thread, workers started again after fork, and
workers bound to CPUs (``bind_threads``) along an order that gives each thread a core of its
own (``cpu_topology.bind_order``)."""

import multiprocessing
import os
import random
import threading
import time
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import pplpy
from pplpy.common.cpu_topology import bind_order, parse_cpu_list, physical_cores
from pplpy.engines.x86.impls._copy import make_copy_step, make_fill_step
from pplpy.runtime.step import Plan, PythonStep, ThreadPool, move_target, shared_pool

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


# -- binding workers to CPUs -----------------------------------------------------------------

ALLOWED = sorted(os.sched_getaffinity(0))


def _task_cpus():
    """tid -> the CPUs that thread may run on, for every thread of this process."""
    cpus = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            cpus[int(tid)] = os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return cpus


def _new_workers(make):
    """(what make() returned, {tid: CPU set} of the threads it started)."""
    before = set(_task_cpus())
    made = make()
    after = _task_cpus()
    return made, {tid: cpus for tid, cpus in after.items() if tid not in before}


def test_bound_workers_each_run_on_one_cpu_of_the_process_set():
    threads = min(len(ALLOWED), 4)  # on a one-CPU set, the next test's case
    if threads < 2:
        assert ThreadPool(2).worker_cpus == (None,)
        return
    pool, workers = _new_workers(lambda: ThreadPool(threads))
    assert pool.bind and len(workers) == threads - 1
    cpus = pool.worker_cpus
    assert len(cpus) == threads - 1 and len(set(cpus)) == threads - 1
    assert set(cpus) <= set(ALLOWED)
    # what the pool reports is what the kernel enforces
    assert sorted(next(iter(s)) for s in workers.values()) == sorted(cpus)
    assert all(len(s) == 1 for s in workers.values())
    # the caller is left free
    assert os.sched_getaffinity(0) == set(ALLOWED)
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    fill_and_copy(pool, src, dst, 7.0, threads).run()
    assert (dst == 7.0).all()


def test_unbound_workers_keep_the_process_set():
    pool, workers = _new_workers(lambda: ThreadPool(2, bind=False))
    assert not pool.bind and pool.worker_cpus == (None,)
    assert [s for s in workers.values()] == [set(ALLOWED)]
    assert repr(pool) == "<ThreadPool 2 threads, unbound>"


def test_a_team_larger_than_the_cpu_set_is_not_bound():
    # Binding more threads than CPUs would stack some on one CPU for good: none is bound.
    threads = len(ALLOWED) + 1
    pool, workers = _new_workers(lambda: ThreadPool(threads))
    assert pool.worker_cpus == (None,) * (threads - 1)
    assert all(s == set(ALLOWED) for s in workers.values())
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    fill_and_copy(pool, src, dst, 3.0, threads).run()
    assert (dst == 3.0).all()


def test_successive_pools_start_their_workers_on_different_cpus():
    # Several runtimes at once spread their workers instead of all taking the same CPU.
    a, b = ThreadPool(2), ThreadPool(2)
    if len(ALLOWED) >= 2:
        assert a.worker_cpus != b.worker_cpus
    else:
        assert a.worker_cpus == b.worker_cpus == (None,)


def test_load_binds_the_team_unless_told_not_to():
    model = relu_chain_model().SerializeToString()
    x = np.random.default_rng(2).standard_normal((4, 64, 64, 64)).astype(np.float32)
    bound, new = _new_workers(lambda: pplpy.load(model, num_threads=2))
    free, new_free = _new_workers(lambda: pplpy.load(model, num_threads=2, bind_threads=False))
    if len(ALLOWED) >= 2:
        (cpu,) = bound.worker_cpus
        assert cpu in ALLOWED and os.sched_getaffinity(0) == set(ALLOWED)
        assert {cpu} in new.values()
    else:
        assert bound.worker_cpus == (None,)
    assert free.worker_cpus == (None,)
    assert all(s == set(ALLOWED) for s in new_free.values())
    assert pplpy.load(model, num_threads=1).worker_cpus == ()
    np.testing.assert_array_equal(out(bound.run({"x": x})), out(free.run({"x": x})))


def test_a_worker_on_the_callers_cpu_moves_when_a_run_starts():
    # A bound worker on the CPU the caller runs on would be queued behind it for the whole run:
    # the run moves it to a CPU that neither the caller nor another worker is on.
    model = relu_chain_model().SerializeToString()
    x = np.random.default_rng(3).standard_normal((4, 64, 64, 64)).astype(np.float32)
    rt = pplpy.load(model, num_threads=2)
    expected = out(pplpy.load(model, num_threads=1).run({"x": x}))
    (cpu,) = rt.worker_cpus
    if cpu is None:  # a one-CPU set: nothing is bound, nothing can move
        assert len(ALLOWED) < 2
        return
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})  # the caller now runs on the worker's CPU
        np.testing.assert_array_equal(out(rt.run({"x": x})), expected)
        (moved,) = rt.worker_cpus
    finally:
        os.sched_setaffinity(0, mask)
    assert moved != cpu and moved in ALLOWED
    workers = [t for t, s in _task_cpus().items() if s == {moved}]
    assert workers  # the kernel agrees with what the pool reports


# -- the bind order: one CPU of every core first ------------------------------------------------


def test_a_bind_order_whose_cpus_the_process_cannot_use_leaves_the_workers_free():
    # CPUs outside the process's set are dropped from the order; too few left: nothing bound.
    pool = ThreadPool(2, order=(5000, 5001), cores=(0, 1))
    assert pool.worker_cpus == (None,)
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    fill_and_copy(pool, src, dst, 2.0, 2).run()
    assert (dst == 2.0).all()
    with pytest.raises(ValueError, match="2 CPUs in the bind order but 1 cores"):
        ThreadPool(2, order=(0, 1), cores=(0,))


def test_workers_are_bound_along_the_order_given():
    if len(ALLOWED) < 2:
        assert ThreadPool(2, order=ALLOWED, cores=ALLOWED).worker_cpus == (None,)
        return
    # with 5000 (not in the set) dropped, the order is the two allowed CPUs
    order = (ALLOWED[1], 5000, ALLOWED[0])
    pools = [ThreadPool(2, order=order, cores=(0, 1, 2)) for _ in range(2)]
    # successive pools rotate along the order: between them both CPUs are taken
    assert {p.worker_cpus[0] for p in pools} == {ALLOWED[0], ALLOWED[1]}


def test_a_worker_on_a_hyper_thread_of_the_callers_core_moves_only_to_a_free_core():
    # This machine's two CPUs are declared siblings of one core.  The worker on the caller's
    # sibling has no free core to go to and stays; on the caller's own CPU it moves.
    if len(ALLOWED) < 2:  # a one-CPU set: nothing is bound, nothing can move
        assert ThreadPool(2, order=ALLOWED, cores=(0,)).worker_cpus == (None,)
        return
    a, b = ALLOWED[:2]
    pool = ThreadPool(2, order=(a, b), cores=(0, 0))
    (cpu,) = pool.worker_cpus
    other = a if cpu == b else b
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {other})  # the caller on the worker's sibling
        fill_and_copy(pool, src, dst, 4.0, 2).run()
        assert pool.worker_cpus == (cpu,)
        os.sched_setaffinity(0, {cpu})  # the caller on the worker's CPU
        fill_and_copy(pool, src, dst, 5.0, 2).run()
        assert pool.worker_cpus == (other,)
    finally:
        os.sched_setaffinity(0, mask)
    assert (dst == 5.0).all()


def adjacent(c):  # 0 and 1 share a core
    return frozenset({c - c % 2, c - c % 2 + 1})


def halves(c):  # 0 and 8 share a core (16 CPUs)
    return frozenset({c % 8, c % 8 + 8})


def alone(c):  # every CPU a core of its own
    return frozenset({c})



@pytest.mark.parametrize("siblings", [adjacent, halves, alone], ids=["adjacent", "halves", "alone"])
def test_the_bind_order_gives_a_team_no_larger_than_the_cores_one_core_per_thread(siblings):
    order, cores = bind_order(range(16), siblings)
    assert sorted(order) == list(range(16)) and len(cores) == 16
    ncores = len(set(cores))
    assert ncores == (16 if siblings is alone else 8)
    assert len(set(cores[:ncores])) == ncores  # the first `ncores` CPUs: one per core
    for cpu, core in zip(order, cores):  # siblings and only siblings share a number
        assert {c for c, k in zip(order, cores) if k == core} == siblings(cpu)
    if siblings is adjacent:
        assert order[:8] == (0, 2, 4, 6, 8, 10, 12, 14)


def test_the_bind_order_keeps_only_the_cpus_given():
    # A process confined to CPUs 1, 2, 3, 5, 6 of a machine whose siblings are adjacent:
    # cores {1}, {2, 3}, {5}, {6}; 3 is the only second thread and comes last.
    assert bind_order([6, 1, 3, 2, 5], adjacent) == ((1, 2, 5, 6, 3), (0, 1, 2, 3, 1))
    assert bind_order([], adjacent) == ((), ())


def test_parse_cpu_list_reads_sysfs_lists():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5") == [5]


def test_physical_cores_are_the_cores_sysfs_names():
    # Oracle: the (package, core id) pairs sysfs gives the process's CPUs.
    pairs = set()
    for cpu in ALLOWED:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as f, open(f"{base}/core_id") as g:
                pairs.add((f.read().strip(), g.read().strip()))
        except OSError:
            pairs.add(("cpu", cpu))
    assert physical_cores() == len(pairs)
    order, cores = bind_order()
    assert sorted(order) == ALLOWED and len(set(cores)) == len(pairs)


@pytest.mark.parametrize("case", [
    # (order, cores, worker CPUs, moving worker, caller CPU, where it goes)
    ((0, 2, 1, 3), (0, 1, 0, 1), (1,), 0, 0, 2),           # caller's sibling -> a free core
    ((0, 2, 4, 1, 3, 5), (0, 1, 2, 0, 1, 2), (1, 2), 0, 0, 4),  # core 1 is another worker's
    ((0, 1), (0, 0), (1,), 0, 0, None),                    # no free core: a sibling stays
    ((0, 1), (0, 0), (0,), 0, 0, 1),                       # the caller's own CPU: any free CPU
    ((0, 1, 2), (0, 1, 2), (0, 1), 0, 0, 2),               # no SMT: as before, a free CPU
    ((0, 1), (0, 1), (0, 1), 0, 0, None),                  # nowhere free: it stays
], ids=["sibling", "skip-busy-core", "no-free-core", "same-cpu", "no-smt", "full"])
def test_where_a_worker_beside_the_caller_moves(case):
    cpus, cores, workers, w, caller, expected = case
    assert move_target(cpus, cores, workers, w, caller) == expected


def test_a_bind_order_naming_a_cpu_twice_binds_it_once():
    # 3000 entries of the same CPU (more than CPU_SETSIZE): one CPU, too few for a team of 2.
    pool = ThreadPool(2, order=(ALLOWED[0],) * 3000, cores=(0,) * 3000)
    assert pool.worker_cpus == (None,)


# -- profiled runs and waking the team ahead of a run -------------------------------------------


def test_a_profiled_run_times_each_share_of_each_step():
    pool = ThreadPool(2)
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    plan = fill_and_copy(pool, src, dst, 6.0, 2)
    results = plan.run_profiled()
    assert (dst == 6.0).all() and len(results) == 2
    for seconds, shares in results:
        assert len(shares) == 2 and {type(s).__name__ for s in shares} == {"Share"}
        for share in shares:
            assert 0 <= share.start <= seconds and 0 <= share.seconds <= seconds
            assert share.thread > 0 and (share.cpu in ALLOWED or share.cpu == -1)
    # one thread: every step runs on the caller, nothing to say about a team
    one = fill_and_copy(None, src, dst, 7.0, 1).run_profiled()
    assert [shares for _, shares in one] == [None, None] and (dst == 7.0).all()


def _thread_state(tid):
    """(state letter, voluntary context switches) of a thread of this process."""
    with open(f"/proc/{os.getpid()}/task/{tid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/{os.getpid()}/task/{tid}/status") as f:
        switches = next(int(line.split()[1]) for line in f
                        if line.startswith("voluntary_ctxt_switches"))
    return state, switches


def test_prewake_wakes_a_sleeping_team_and_runs_stay_right():
    pool, workers = _new_workers(lambda: ThreadPool(2))
    (tid,) = workers
    src, dst = np.zeros(N, np.float32), np.zeros(N, np.float32)
    fill_and_copy(pool, src, dst, 1.0, 2).run()
    # after a millisecond's spin the worker sleeps on a futex ('S')
    deadline = time.monotonic() + 5
    while _thread_state(tid)[0] != "S":
        assert time.monotonic() < deadline, "the idle worker never went to sleep"
        time.sleep(0.01)
    _, before = _thread_state(tid)
    assert pool.prewake()
    deadline = time.monotonic() + 5
    while _thread_state(tid)[1] == before:  # woken: it sleeps again only after its spin
        assert time.monotonic() < deadline, "prewake did not wake the worker"
        time.sleep(0.001)
    for value in (2.0, 3.0):  # runs after a prewake use the slots as before
        pool.prewake()
        fill_and_copy(pool, src, dst, value, 2).run()
        assert (dst == value).all()
    assert not ThreadPool(1).prewake()  # no workers: nothing to wake


_FORK_WHILE_RUNNING = r"""
import os, signal, sys, threading, time
import numpy as np
import pplpy
from onnx import TensorProto, helper, numpy_helper

w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(w, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
rt = pplpy.load(model, num_threads=2)
session = pplpy.InferenceSession(model)
big, one = np.ones((512, 256), np.float32), np.ones((1, 256), np.float32)
stop = threading.Event()

def busy():  # always inside a run: the runtime's lock and the session's runtime are taken
    while not stop.is_set():
        rt.run({"x": big})
        session.run(None, {"x": big})

threading.Thread(target=busy, daemon=True).start()
time.sleep(0.2)
hung = 0
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a child whose run never returns dies of SIGALRM
        ok = np.allclose(rt.run({"x": one})["y"], one @ w, rtol=1e-4, atol=1e-3)
        ok &= np.allclose(session.run(None, {"x": one})[0], one @ w, rtol=1e-4, atol=1e-3)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    hung += os.waitstatus_to_exitcode(status) != 0
stop.set()
print("failed children:", hung)
sys.exit(1 if hung else 0)
"""


def test_a_child_forked_while_a_thread_runs_can_run(tmp_path):
    """fork() while another thread is inside run(): the child inherited the runtime's lock
    held (and the session's runtime checked out) by a thread it does not have, and its own
    run waited for ever.  Locks and the session's idle list are reset in a child."""
    import subprocess
    import sys

    # cwd: not the source tree, whose pplpy (no compiled modules) -c would import first
    done = subprocess.run([sys.executable, "-c", _FORK_WHILE_RUNNING], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


_FORK_WHILE_A_BODY_BUILDS = r"""
import os, signal, sys, threading, time
import numpy as np
import pplpy
from onnx import TensorProto, helper
from pplpy.engines.x86.ops.onnx import control_body

body = helper.make_graph(
    [helper.make_node("Concat", ["v", "one"], ["vo"], axis=0),
     helper.make_node("Identity", ["c"], ["co"])], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("c", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
    [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
     helper.make_tensor_value_info("vo", TensorProto.FLOAT, None)],
    [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
graph = helper.make_graph(
    [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "g",
    [helper.make_tensor_value_info("n", TensorProto.INT64, []),
     helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
builder = pplpy.RuntimeBuilder.from_onnx(model, engines=[pplpy.X86Engine(num_threads=1)])
busy, other = builder.create_runtime(), builder.create_runtime()
x = np.zeros(1, np.float32)
other.run({"n": np.array(1), "x": x})
(bodies,) = control_body._BODIES.values()
(the_body,) = bodies.values()
threading.Thread(target=lambda: busy.run({"n": np.array(400), "x": x}), daemon=True).start()
deadline = time.time() + 20
while not the_body._lock.locked() and time.time() < deadline:
    pass  # fork while the other thread builds the body for a new length
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    y = other.run({"n": np.array(450), "x": x})["y"]  # a length not built yet
    os._exit(0 if y.shape == (451,) else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_while_a_body_builds_can_build_it(tmp_path):
    """A control-flow body builds under a lock; forked while another thread held it, the
    child's first build for a new shape waited for ever.  Every lock a run may hold (body
    builds, the override variant, shape caches, the shared pools' table) is new in a child."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FORK_WHILE_A_BODY_BUILDS],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
