"""Steps and plans: the compiled form of a runtime.

A ``Step`` is one C function with its pre-bound arguments (see ``pplpy_step.h``); a
``Plan`` is an array of steps run in one ``nogil`` call by the calling thread and the
workers of a ``ThreadPool`` (see ``pplpy_pool.h``).  A kernel written in Python becomes a
``PythonStep``, which takes the GIL for its own call only.

    kernels --make_step(io)--> [Step, Step, PythonStep, ...] --Plan(steps, threads, pool)--> run()
"""

from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc

import threading
import time
from collections import namedtuple

from pplpy.common.cpu_topology import bind_order
from pplpy.errors import InputError


# One share of a parallel step's work in a profiled run (Plan.run_profiled): ``start`` after
# the step began and ``seconds`` it took, the ``cpu`` and Linux ``thread`` id that ran it.
Share = namedtuple("Share", "start seconds cpu thread")


cdef extern from "pplpy_pool.h" nogil:
    ctypedef struct ppl_pool:
        int nworkers
        int *cpu
    ppl_pool *ppl_pool_create(int nthreads, int bind, const int *order, const int *order_core,
                              int norder)
    int ppl_pool_move_target(const int *cpus, const int *core_of, int ncpus, const int *wcpu,
                             int nworkers, int w, int here)
    enum: CPU_SETSIZE
    void ppl_pool_destroy(ppl_pool *pool)
    int ppl_pool_prewake(ppl_pool *pool)
    int ppl_pool_run(ppl_pool *pool, uint64_t plan_id, const ppl_plan_step *steps,
                     Py_ssize_t n, int nthreads, volatile int *error, long long *trace)
    long long ppl_now_ns()
    enum: PPL_TRACE_FIELDS


cdef class Step:
    """One compiled step.  Made by an impl module's ``make_*_step`` function."""

    def __cinit__(self):
        self.fault_offset = -1

    def __dealloc__(self):
        if self.owns_args:
            free(self.args)
        self.args = NULL

    def __repr__(self):
        kind = "parallel" if self.parallel else "serial"
        return f"<Step {self.label or '?'} ({kind})>"


cdef Step new_step(ppl_step_fn fn, size_t args_size, bint parallel, object keep=None):
    """A step calling ``fn`` on a zeroed block of ``args_size`` bytes the caller fills in."""
    cdef Step step = Step.__new__(Step)
    step.fn = fn
    step.args = calloc(1, args_size if args_size > 0 else 1)
    if step.args == NULL:
        raise MemoryError("cannot allocate a step's arguments")
    step.owns_args = True
    step.parallel = parallel
    step.keep = keep
    step.label = ""
    return step


cdef int set_fault(Step step, ppl_fault *fault, str message) except -1:
    """Register ``fault`` (a ppl_fault inside the step's args) and the InputError text a
    run raises when the step records bad data there ("{value}": the value it recorded)."""
    cdef Py_ssize_t offset = <char *>fault - <char *>step.args
    if step.args == NULL or offset < 0:
        raise ValueError("a step's fault record must lie in its arguments")
    step.fault_offset = offset
    step.fault_message = message
    return 0


cdef class PythonStep(Step):
    """A step that calls ``function()`` holding the GIL, on thread 0 of the team.

    An exception it raises is kept and stops every thread after this step; ``Plan.run``
    re-raises it."""

    cdef object function
    cdef volatile int *error
    cdef public object exception
    cdef public tuple nested  # what the step runs runtimes in (a control-flow node's
                              # BodyRunners): Runtime.memory() counts their plans too

    def __init__(self, function, label="", nested=()):
        self.function = function
        self.nested = tuple(nested)
        self.fn = _python_step
        self.args = <void *>self      # borrowed: the plan holds the step
        self.parallel = False
        self.label = label
        self.exception = None
        self.error = NULL

    def __call__(self):
        self.function()


cdef void _python_step(const void *args, int tid, int nthreads) noexcept nogil:
    with gil:
        step = <PythonStep>args
        try:
            step.function()
        except BaseException as exc:  # noqa: B036 - carried across the nogil region
            step.exception = exc
            step.error[0] = 1


cdef class ThreadPool:
    """``num_threads - 1`` worker threads that run plans with the calling thread.

    A Runtime owns one, shared by its plans (one per input-shape signature), as an ONNX
    Runtime session owns its intra-op pool.  The workers spin for a millisecond after a run
    and then sleep, so an idle runtime leaves its cores idle.  A plan started while the pool
    is busy with another runs on its caller's thread alone.

    ``bind``: each worker runs on one CPU of the process's CPU set (see ``pplpy_pool.h``
    for why); not done when the team is larger than that set.  The workers are bound along
    ``order`` (CPUs), whose physical cores are ``cores`` (default: ``bind_order()`` in
    ``pplpy.common.cpu_topology``, one CPU of every core before any core's second
    hyper-thread)."""

    cdef ppl_pool *pool
    cdef readonly int num_threads
    cdef readonly bint bind

    def __cinit__(self, int num_threads, bint bind=True, order=None, cores=None):
        cdef int *c_order = NULL
        cdef int *c_cores = NULL
        cdef Py_ssize_t i, n = 0
        self.num_threads = max(1, num_threads)
        self.bind = bind
        self.pool = NULL
        if self.num_threads == 1:
            return
        if bind:
            if order is None:
                order, cores = bind_order()
            order = tuple(int(c) for c in order)
            cores = tuple(int(c) for c in (order if cores is None else cores))
            if len(cores) != len(order):
                raise ValueError(f"{len(order)} CPUs in the bind order but {len(cores)} cores")
            n = len(order)
        try:
            if n:
                c_order = <int *>malloc(n * sizeof(int))
                c_cores = <int *>malloc(n * sizeof(int))
                if c_order == NULL or c_cores == NULL:
                    raise MemoryError("cannot allocate a thread pool's CPU list")
                for i in range(n):
                    c_order[i] = order[i]
                    c_cores[i] = cores[i]
            self.pool = ppl_pool_create(self.num_threads, bind, c_order, c_cores, <int>n)
            if self.pool == NULL:
                raise MemoryError("cannot allocate a thread pool")
        finally:
            free(c_order)
            free(c_cores)

    def __dealloc__(self):
        with nogil:
            ppl_pool_destroy(self.pool)
        self.pool = NULL

    @property
    def workers(self):
        """How many worker threads were started (num_threads - 1 unless the system refused
        some, in which case plans still run, on fewer threads)."""
        return self.pool.nworkers if self.pool != NULL else 0

    def prewake(self):
        """Wake workers that sleep after an idle spell, so that they are up when the run
        that follows starts (``ppl_pool_prewake``); nothing when they are awake or a plan
        runs on the pool.  Returns whether it woke them."""
        cdef int woke
        with nogil:
            woke = ppl_pool_prewake(self.pool)
        return bool(woke)

    @property
    def worker_cpus(self):
        """The CPU each worker is bound to (None: unbound), in worker order."""
        if self.pool == NULL:
            return ()
        return tuple(self.pool.cpu[i] if self.pool.cpu[i] >= 0 else None
                     for i in range(self.pool.nworkers))

    def __repr__(self):
        return f"<ThreadPool {self.num_threads} threads{'' if self.bind else ', unbound'}>"


def move_target(cpus, cores, worker_cpus, int worker, int caller_cpu):
    """Where the pool moves worker ``worker`` when the caller runs on ``caller_cpu``, given
    the bind order ``cpus`` with their physical ``cores`` and each worker's CPU (None:
    unbound): a CPU, or None to stay (``ppl_pool_move_target``; for tests of the choice on
    topologies this machine does not have)."""
    cdef int core_of[CPU_SETSIZE]
    cdef int c_cpus[CPU_SETSIZE]
    cdef int wcpu[CPU_SETSIZE]
    cdef Py_ssize_t i
    if len(cpus) != len(cores) or len(cpus) > CPU_SETSIZE or len(worker_cpus) > CPU_SETSIZE:
        raise ValueError("cpus and cores must be lists of one length, at most CPU_SETSIZE")
    if not 0 <= worker < len(worker_cpus):
        raise ValueError(f"worker {worker} of {len(worker_cpus)}")
    for i in range(CPU_SETSIZE):
        core_of[i] = -1
    for i, (c, k) in enumerate(zip(cpus, cores)):
        if not 0 <= c < CPU_SETSIZE:
            raise ValueError(f"CPU {c} is outside 0..{CPU_SETSIZE - 1}")
        c_cpus[i] = c
        core_of[c] = k
    for i, c in enumerate(worker_cpus):
        if c is not None and not 0 <= c < CPU_SETSIZE:
            raise ValueError(f"CPU {c} is outside 0..{CPU_SETSIZE - 1}")
        wcpu[i] = -1 if c is None else c
    c = ppl_pool_move_target(c_cpus, core_of, <int>len(cpus), wcpu, <int>len(worker_cpus),
                             worker, caller_cpu)
    return None if c < 0 else c


_shared_pools = {}
_shared_pools_lock = threading.Lock()


ctypedef struct _ClaimProbe:
    Py_ssize_t n
    Py_ssize_t chunk
    int *runs              # per item: how many times a share ran it
    int *share             # per item: the share that ran it last
    long long slow_ns      # share 1 takes this long over each item it runs
    ppl_item_queue queue


cdef void _claim_probe_step(const void *args, int tid, int nthreads) noexcept nogil:
    cdef _ClaimProbe *p = <_ClaimProbe *>args
    cdef Py_ssize_t begin, end, i
    cdef int calls = 0
    cdef long long until
    while ppl_next_items(&p.queue, p.n, p.chunk, tid, nthreads, &calls, &begin, &end):
        for i in range(begin, end):
            p.runs[i] += 1
            p.share[i] = tid
            if tid == 1 and p.slow_ns > 0:
                until = ppl_now_ns() + p.slow_ns
                while ppl_now_ns() < until:
                    pass


def claim_probe(Py_ssize_t n, Py_ssize_t chunk, double slow_us=0.0):
    """``(step, runs, share)``: a parallel step of ``n`` items handed out ``chunk`` at a time
    (``ppl_next_items``; 0: fixed shares) that counts in ``runs[i]`` how often item i ran and
    records in ``share[i]`` which share ran it; share 1 spends ``slow_us`` on each item it
    runs.  For tests of the claiming itself, on any team and over many runs."""
    import numpy
    if n < 0:
        raise ValueError(f"claim_probe: n must be >= 0, got {n}")
    runs = numpy.zeros(max(n, 1), dtype=numpy.intc)
    share = numpy.full(max(n, 1), -1, dtype=numpy.intc)
    cdef int[::1] runs_v = runs
    cdef int[::1] share_v = share
    cdef Step step = new_step(_claim_probe_step, sizeof(_ClaimProbe), True, (runs, share))
    cdef _ClaimProbe *p = <_ClaimProbe *>step.args
    p.n, p.chunk = n, chunk
    p.runs, p.share = &runs_v[0], &share_v[0]
    p.slow_ns = <long long>(slow_us * 1000.0)
    step.label = "claim_probe"
    return step, runs[:n], share[:n]


def claim_sizes(Py_ssize_t n, Py_ssize_t chunk, int nthreads):
    """The sizes of the claims one share would make alone over ``n`` items with claims of
    ``chunk`` at most on a team of ``nthreads`` (``ppl_claim_now``; for tests of the rule)."""
    sizes = []
    cdef Py_ssize_t left = n, take
    while left > 0:
        take = min(left, ppl_claim_now(left, chunk, nthreads))
        sizes.append(take)
        left -= take
    return sizes


def shared_pool(int num_threads, bint bind=True):
    """The process-wide pool of ``num_threads`` threads, for plans made without one
    (``run_steps``: build-time constant folding and the kernel test wrappers)."""
    with _shared_pools_lock:
        pool = _shared_pools.get((num_threads, bind))
        if pool is None:
            pool = _shared_pools[(num_threads, bind)] = ThreadPool(num_threads, bind)
        return pool


cdef uint64_t _next_plan_id = 0


cdef class Plan:
    """An array of steps run in one nogil call on ``num_threads`` threads: the caller and
    the workers of ``pool`` (by default the process-wide pool of that many threads)."""

    cdef ppl_plan_step *c_steps
    cdef Py_ssize_t n
    cdef volatile int error
    cdef uint64_t plan_id
    cdef readonly int num_threads
    cdef readonly tuple steps
    cdef readonly tuple fallible  # the steps that may record bad data (set_fault)
    cdef readonly ThreadPool pool

    def __cinit__(self, steps, int num_threads=1, ThreadPool pool=None):
        global _next_plan_id
        cdef Step step
        cdef Py_ssize_t i
        self.steps = tuple(steps)
        self.n = len(self.steps)
        self.num_threads = max(1, num_threads)
        if pool is None and self.num_threads > 1:
            pool = shared_pool(self.num_threads)
        self.pool = pool
        _next_plan_id += 1
        self.plan_id = _next_plan_id
        self.c_steps = <ppl_plan_step *>malloc(max(1, self.n) * sizeof(ppl_plan_step))
        if self.c_steps == NULL:
            raise MemoryError("cannot allocate the run plan")
        for i in range(self.n):
            step = self.steps[i]
            if not isinstance(step, Step):
                raise TypeError(f"plan step {i} is {type(step).__name__}, not a Step")
            if isinstance(step, PythonStep):
                (<PythonStep>step).error = &self.error
            self.c_steps[i].fn = step.fn
            self.c_steps[i].args = step.args
            self.c_steps[i].parallel = step.parallel
        self.fallible = tuple(s for s in self.steps if (<Step>s).fault_offset >= 0)

    def __dealloc__(self):
        free(self.c_steps)

    def __len__(self):
        return self.n

    def run(self):
        """Run every step, in order, without the GIL (Python steps take it for themselves)."""
        cdef int rc
        cdef ppl_pool *pool = self._c_pool()
        with nogil:
            rc = ppl_pool_run(pool, self.plan_id, self.c_steps, self.n,
                              self.num_threads, &self.error, NULL)
        if rc or self.fallible:
            self._raise(rc)

    cdef ppl_pool *_c_pool(self):
        return self.pool.pool if self.pool is not None else NULL

    def run_profiled(self):
        """Run the steps one at a time, each on the whole team (a barrier after every step,
        so times do not overlap), and return per step ``(seconds, shares)``: ``shares`` is
        None for a step run on the caller alone, else one ``Share`` per share of the step's
        work (when it started after the step did and how long it took, in seconds, and the
        CPU and thread that ran it)."""
        cdef int rc
        cdef Py_ssize_t i, k
        cdef int nt = self.num_threads
        cdef ppl_pool *pool = self._c_pool()
        cdef long long t0, t1
        cdef long long *trace = <long long *>malloc(nt * PPL_TRACE_FIELDS * sizeof(long long))
        if trace == NULL:
            raise MemoryError("cannot allocate a profiled run's share records")
        results = []
        try:
            for i in range(self.n):
                for k in range(nt * PPL_TRACE_FIELDS):
                    trace[k] = -1
                with nogil:
                    t0 = ppl_now_ns()
                    # plan id 0: the pool copies the one step each time
                    rc = ppl_pool_run(pool, 0, &self.c_steps[i], 1, nt, &self.error, trace)
                    t1 = ppl_now_ns()
                if rc or self.fallible:
                    self._raise(rc)
                shares = None
                if trace[0] >= 0:
                    shares = tuple(
                        Share((trace[k * PPL_TRACE_FIELDS] - t0) * 1e-9,
                              (trace[k * PPL_TRACE_FIELDS + 1]
                               - trace[k * PPL_TRACE_FIELDS]) * 1e-9,
                              trace[k * PPL_TRACE_FIELDS + 2], trace[k * PPL_TRACE_FIELDS + 3])
                        for k in range(nt))
                results.append(((t1 - t0) * 1e-9, shares))
        finally:
            free(trace)
        return results

    def _raise(self, int rc):
        """After a run: raise what went wrong, if anything, and leave no record of it for
        the next run.  A bad value a step recorded (a ppl_fault) comes first: it was met
        before any Python step failed (no step runs after a failed one), and the zero rows
        it left may be what that step failed on."""
        cdef Step step
        cdef ppl_fault *fault
        exception = None
        if rc:
            for s in self.steps:
                if isinstance(s, PythonStep) and s.exception is not None:
                    exception, s.exception = s.exception, None
        first = None
        for s in self.fallible:
            step = <Step>s
            fault = <ppl_fault *>(<char *>step.args + step.fault_offset)
            if fault.hit:
                if first is None:
                    first = step.fault_message.format(value=fault.value)
                fault.hit = 0
        if first is not None:
            raise InputError(first)
        if rc:
            raise exception or RuntimeError("a plan step failed without an exception")


def run_steps(steps, int num_threads=1, bint bind=True):
    """Run ``steps`` once as a plan (on the shared pool of that size and binding): the path
    build-time evaluation and the impl test wrappers take."""
    pool = shared_pool(num_threads, bind) if num_threads > 1 else None
    Plan(steps, num_threads, pool).run()
