"""Runtime: runs a built model on numpy inputs.

    run(feeds) --check feeds--> signature (input shapes + values of value-deciding feeds)
               --plan cache (LRU)--> ExecutionPlan (made on a miss: shapes, arena, steps),
                 or a StagedPlan where a value the run computes decides a shape
               --> copy feeds in, one nogil call over the compiled steps, copy outputs out

Calls on one Runtime are serialised by a lock: a plan owns one arena, so two calls at once
would share it.  For parallel serving make one Runtime per thread with
``RuntimeBuilder.create_runtime()``: they share the packed weights and run in parallel.
Outputs are fresh arrays the caller owns; the next run does not touch them.

Every failure is a PplError: bad feeds are an InputError naming the input, what was
expected and what was given; an exception from a plugin's kernel is a PluginError naming the
node and the package.  A failed run leaves the runtime as it was: the next good run is
correct.
"""

import threading
from collections.abc import Mapping

import numpy as np

from pplpy.errors import InputError, PplError, guard
from pplpy.runtime import step as _step
from pplpy.runtime.fork import new_lock_after_fork, reset_after_fork
from pplpy.runtime.memory_limit import describe_limit, usable_memory_bytes
from pplpy.runtime.plan import value_digest
from pplpy.runtime.plan_cache import PlanCache
from pplpy.runtime.staged_plan import held_plans, make_plan
from pplpy.runtime.step import ThreadPool
from pplpy.runtime.profiler import Profiler
from pplpy.runtime.tensor import Tensor

DEFAULT_PLAN_CACHE_SIZE = 8

new_lock_after_fork(_step, "_shared_pools_lock")  # held while a shared pool starts


class Runtime:
    def __init__(self, result, plan_cache_size=DEFAULT_PLAN_CACHE_SIZE, override=None,
                 value_feeds=None, pool=None):
        try:
            plan_cache_size = int(plan_cache_size)
        except (TypeError, ValueError):
            raise PplError(f"plan_cache_size must be a whole number >= 1, got "
                           f"{plan_cache_size!r}") from None
        if plan_cache_size < 1:
            raise PplError(f"plan_cache_size must be >= 1, got {plan_cache_size}")
        self._result = result
        self._graph = result.graph
        self._input_infos = list(self._graph.inputs)
        self.num_threads = result.options.num_threads
        # the workers every plan of this runtime runs on (see step.ThreadPool): its own, or
        # the one given (a control-flow body's runtimes share the process-wide pool)
        self._pool = pool if pool is not None or self.num_threads <= 1 else ThreadPool(
            self.num_threads, result.options.bind_threads)
        self.profiler = Profiler()
        self.plan_cache_size = int(plan_cache_size)
        self._plans = PlanCache(self.plan_cache_size)  # signature -> ExecutionPlan/StagedPlan
        self._rest_plans = PlanCache(self.plan_cache_size)  # the StagedPlans' rests
        self._last = None
        self._lock = threading.Lock()
        reset_after_fork(self)
        self._shared_dims = _shared_dim_names(self._input_infos)
        # Initializers the model also lists as inputs: a feed may override them, in a
        # runtime of the builder's override variant (made on first use).
        self._overridable = dict(result.graph.overridable) if override is not None else {}
        self._override_builder = override
        self._override_runtime = None
        self.plan_misses = 0
        # Feeds whose values decide shapes (a Reshape's shape given as a model input): their
        # values join the signature, so a new value makes a new plan.  A control-flow body
        # names its own (``value_feeds``): inputs whose values reach a shape through host
        # arithmetic (see pplpy/engines/x86/ops/onnx/control_body.py).
        feeds = set(self.input_names)
        self._value_feeds = sorted(value_feeds) if value_feeds is not None else sorted({
            node.inputs[i]
            for node, op in result.ops.items()
            for i in op.value_inputs
            if i < len(node.inputs) and node.inputs[i] in feeds
        })

    # -- introspection -------------------------------------------------------------------

    @property
    def input_names(self):
        return [v.name for v in self._input_infos]

    @property
    def output_names(self):
        return self._graph.output_names

    @property
    def input_shapes(self):
        """Declared dims of each input (str or None where the model leaves a dim free)."""
        return {v.name: v.dims for v in self._input_infos}

    @property
    def inputs(self):
        return [Tensor(v.name, v.data_type, v.dims) for v in self._input_infos]

    @property
    def outputs(self):
        values = self._graph.values
        return [Tensor(v.name, values[v.name].dtype or v.data_type,
                       values[v.name].dims if values[v.name].dims is not None else v.dims)
                for v in self._graph.outputs]

    @property
    def graph(self):
        """The graph the engine built (with reorders and fused nodes), for inspection."""
        return self._graph

    @property
    def formats(self):
        """Value name -> DataFormat the engine chose."""
        return {name: record.format for name, record in self._graph.values.items()}

    @property
    def result(self):
        return self._result

    @property
    def worker_cpus(self):
        """The CPU each worker thread of the team is bound to (None: unbound); empty with
        one thread.  See ``bind_threads`` in ``pplpy.load``."""
        return self._pool.worker_cpus if self._pool is not None else ()

    @property
    def pass_log(self):
        """What each graph-optimiser pass did, one line per pass run (see
        ``pplpy.optimizer.PassRecord``)."""
        return [record.describe() for record in self._result.pass_log]

    @property
    def memory_bytes(self):
        """Arena bytes of the plan of the last run that succeeded (0 before the first)."""
        return self._last.arena_bytes if self._last is not None else 0

    def memory(self):
        """Bytes held: ``weights`` (constants and packed weights, shared with the builder's
        other runtimes), ``arena`` (every cached plan's), ``plan`` (compiled steps), with the
        arenas, steps and plans of the If / Loop / Scan body runtimes those plans made (a
        body's own constants are not counted).  ``cached_plans`` counts each stage of a
        staged plan and each cached rest plan (staged_plan.py) as a plan."""
        plans = list({id(held): held for p in [*self._plans.plans(), *self._rest_plans.plans()]
                      for held in held_plans(p)}.values())
        held = {
            "weights": self._result.weight_bytes,
            "arena": sum(p.arena_bytes for p in plans),
            "plan": sum(p.plan_bytes for p in plans),
            "cached_plans": len(plans),
        }
        for runner in (r for p in plans for r in p.nested):
            for key, value in runner.memory().items():
                held[key] += value
        return held

    def tensor_shapes(self):
        """TensorShape of every arena value for the last successful run's input shapes."""
        return dict(self._last.tensor_shapes) if self._last is not None else {}

    # -- running -------------------------------------------------------------------------

    def _after_fork_in_child(self):
        # A run another thread was in when the process forked holds no lock here.
        self._lock = threading.Lock()

    def run(self, feeds, output_names=None, _defaults=()):
        """Run the model.  ``feeds`` maps input name -> numpy array; returns name -> array
        (only ``output_names``, in that order, when given).  Initializers the model also
        lists as inputs may be fed too, overriding their values.  (``_defaults``: the names
        in ``feeds`` that are the model's own initializer values, which the override variant
        is fed; their declared dim names are not held against them.)"""
        if self._pool is not None:
            self._pool.prewake()  # workers asleep since the last run wake while we check feeds
        if isinstance(feeds, Mapping) and any(name in self._overridable for name in feeds):
            return self._run_overriding(feeds, output_names)
        arrays = self._check_feeds(feeds, _defaults)
        wanted = self._check_output_names(output_names)
        with self._lock, guard("running the model", memory_error=InputError):
            signature = tuple(a.shape for a in arrays.values()) + tuple(
                value_digest(arrays[name]) for name in self._value_feeds)
            plan = self._plans.get(signature)
            cached = plan is not None
            if not cached:
                plan = make_plan(self._result, arrays, self._value_feeds, self.num_threads,
                                 self._pool, self._rest_plans)
                self.plan_misses += 1
            mark = None
            if self.profiler.enabled:
                mark = self.profiler.mark()
                self.profiler.begin_run(plan, self._result.kernels)
            try:
                outputs = plan.run(arrays, self.profiler)
            except BaseException:
                if mark is not None:  # a failed run leaves no times behind
                    self.profiler.rollback(mark)
                raise
            if mark is not None:
                self.profiler.runs += 1
            # A new plan is cached once it has run: one whose first run failed (out of memory
            # copying the outputs, say) neither holds its arena nor evicts a good plan.
            if not cached:
                self._plans.put(signature, plan)
            self._last = plan
        if wanted is not None:
            return {name: outputs[name] for name in wanted}
        return outputs

    def _run_overriding(self, feeds, output_names):
        with self._lock:
            if self._override_runtime is None:
                self._override_runtime = self._override_builder().create_runtime()
        runtime = self._override_runtime
        full = dict(runtime._result.graph.defaults)
        full.update(feeds)
        return runtime.run(full, output_names, _defaults=set(full) - set(feeds))

    def _check_output_names(self, output_names):
        if output_names is None:
            return None
        if isinstance(output_names, str):
            output_names = [output_names]
        try:
            names = list(output_names)
        except TypeError:
            raise InputError(f"output_names must be a list of output names, got "
                             f"{type(output_names).__name__}; the model's outputs are "
                             f"{self.output_names}") from None
        unknown = [n for n in names if n not in self.output_names]
        if unknown:
            raise InputError(f"unknown output(s) {unknown}; the model's outputs are "
                             f"{self.output_names}")
        return names

    def _check_feeds(self, feeds, defaults=()):
        if not isinstance(feeds, Mapping):
            raise InputError(f"run() takes a dict of input name -> numpy array, got "
                             f"{type(feeds).__name__}")
        expected = self.input_names
        unknown = [name for name in feeds if name not in expected
                   and name not in self._overridable]
        missing = [name for name in expected if name not in feeds]
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"unknown input(s) {unknown}")
            if missing:
                parts.append(f"missing input(s) {missing}")
            raise InputError(f"{' and '.join(parts)}; the model's inputs are {expected}")
        arrays = {}
        for info in self._input_infos:
            value = feeds[info.name]
            try:
                array = np.asarray(value)
            except Exception as exc:  # noqa: BLE001 - any conversion failure is bad input
                raise InputError(f'input "{info.name}": cannot convert {type(value).__name__} '
                                 f"to an array: {exc}") from exc
            want = info.data_type.numpy
            declared = _describe_dims(info.dims)
            if array.dtype != want:
                given = "" if isinstance(value, np.ndarray) else (
                    f" (a {type(value).__name__}, which numpy made {array.dtype}; pass "
                    f"np.asarray(value, np.{want.name}))")
                raise InputError(f'input "{info.name}": expected {info.data_type} {declared}, '
                                 f"got {array.dtype} {list(array.shape)}{given}")
            if info.dims is not None:
                if array.ndim != len(info.dims):
                    raise InputError(f'input "{info.name}": expected rank {len(info.dims)} '
                                     f"shape {declared}, got rank {array.ndim} shape "
                                     f"{list(array.shape)}")
                if any(isinstance(d, int) and d > 0 and d != a
                       for d, a in zip(info.dims, array.shape)):
                    raise InputError(f'input "{info.name}": expected shape {declared}, got '
                                     f"{list(array.shape)}")
            # np.ascontiguousarray would make a rank-0 feed (1,): rank-0 in, rank-0 out.
            if not array.flags.c_contiguous:
                array = _c_order_copy(info.name, array)
            arrays[info.name] = array
        _check_named_dims(self._shared_dims, arrays, defaults)
        return arrays


def _c_order_copy(name, array):
    """A non-contiguous feed copied to C order; out of memory is the feed's InputError.  A
    copy larger than the machine's memory is not tried (see memory_limit: on a host that
    overcommits it would succeed and the process be killed while copying)."""
    what = (f'input "{name}": out of memory copying the non-contiguous {array.dtype} '
            f"{list(array.shape)} feed to C order")
    if array.nbytes > usable_memory_bytes():
        raise InputError(f"{what} ({array.nbytes} bytes, more than {describe_limit()}); "
                         f"check its shape")
    try:
        return array.copy(order="C")
    except MemoryError as exc:
        raise InputError(f"{what}; check its shape") from exc


def _shared_dim_names(infos):
    """Dim name -> [(input, axis), ...] for the names the inputs declare at more than one
    place (worked out once; a run checks only these)."""
    places = {}
    for info in infos:
        for axis, name in enumerate(info.dims or ()):
            if isinstance(name, str):
                places.setdefault(name, []).append((info.name, axis))
    return {name: at for name, at in places.items() if len(at) > 1}


def _check_named_dims(shared, arrays, defaults=()):
    """Feeds must agree on every dim name the model declares: the build took dims of one
    name for one size (a mask [B, 1, s, s] beside q [B, H, s, D] fused into an attention
    whose mask then had to hold s keys), so a feed that binds a name to two sizes is refused
    rather than computed with that assumption broken.  ``shared``: _shared_dim_names;
    ``defaults``: inputs given the model's own initializer values, not held to the names."""
    for name, places in shared.items():
        first = None
        for input_name, axis in places:
            if input_name in defaults or input_name not in arrays:
                continue
            size = arrays[input_name].shape[axis]
            if first is None:
                first = (size, input_name, axis)
            elif size != first[0]:
                raise InputError(
                    f'dim "{name}" is {first[0]} in input "{first[1]}" (axis {first[2]}) but '
                    f'{size} in input "{input_name}" (axis {axis}); the model declares them '
                    f"one size: feed inputs that agree, or give the dims different names")


def _describe_dims(dims):
    if dims is None:
        return "[any shape]"
    return "[" + ",".join(str(d) if isinstance(d, int) and d > 0 else
                          (d if isinstance(d, str) else "?") for d in dims) + "]"
