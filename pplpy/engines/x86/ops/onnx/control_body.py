"""The bodies of the control-flow ops (If, Loop, Scan): a subgraph built into pplpy runtimes.

    GraphProto --model parser--> ir.Graph (captured outer names as extra inputs)
               --Body.builder(types, ranks)--> RuntimeBuilder, same engine options
               --Body.runtime(...)--> a Runtime per outer plan, run by the op's Python step

- Parsing (``pplpy/models/onnx/model_parser.py``): each GRAPH attribute becomes a Graph in
  the param; the outer values a body reads are appended to the node's inputs and to the
  body's inputs (``Graph.captured``), so ordering, DCE, constant folding and the memory
  planner of the outer graph see every value the node depends on.
- Types: ``Body.output_types`` runs type inference over the parsed body for the types the
  op feeds (bodies often declare none); nested control flow recurses.
- Building: once per (input types, input shapes) the body is copied and built by the
  RuntimeBuilder with the outer engine's options (the last MAX_BUILDS are kept; a loop
  whose carried values keep their shapes needs one).  Static shapes let the body's own
  passes fold, choose formats and pack weights as in any model.  Runtimes made from a build
  share its kernels.
- Shapes: pplpy plans memory before a run, so the op context asks ``Body.infer`` for the
  body's output shapes for given input shapes; it runs the body's shape inference and host
  arithmetic exactly as a body plan would.  Body inputs whose values can decide a shape
  (``shape_deciding_values``: a counter that becomes a Slice start) are fed by value: they
  join the body's plan signature, and the outer op lists the outer values behind them in
  its ``value_inputs``.  A value the plan cannot know is a ``ValueRequired``, which the
  runtime reports as an UnsupportedOpError naming the node.
- Running: the control-flow kernels are Python steps (they drive nested runtimes); the
  body's own steps are compiled.  The body's runtimes run on the process-wide pool of the
  engine's thread count: a body plan runs on the calling thread and those workers while the
  outer plan's workers wait (a body nested in a body, or two outer runtimes in a body at
  once, find that pool busy and run on the calling thread alone).  An outer plan keeps the
  runtimes of the last MAX_BUILDS body input shapes.
"""

import contextlib
import copy
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import find_op
from pplpy.engines.x86.ops.op_context import ValueRequired
from pplpy.engines.x86.passes.inference import infer_types, shape_deciding_values
from pplpy.errors import (InputError, InternalError, ModelError, ShapeError,
                          UnsupportedOpError)
from pplpy.runtime.fork import new_lock_after_fork, reset_after_fork


# Builds a Body keeps (per input types and shapes), least recently used first out.
MAX_BUILDS = 16


@contextlib.contextmanager
def naming(where):
    """Prefix pplpy errors raised inside a body with the node and attribute holding it."""
    try:
        yield
    except ValueRequired as exc:
        raise ValueRequired(f"{where}: {exc}") from exc
    except UnsupportedOpError as exc:
        if isinstance(exc.__cause__, ValueRequired):  # a shape the plan cannot know yet
            raise ValueRequired(f"{where}: {exc}") from exc
        raise UnsupportedOpError(f"{where}: {exc}", nodes=exc.nodes) from exc
    except (ModelError, ShapeError, InputError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


@dataclass(frozen=True)
class _Built:
    builder: object  # RuntimeBuilder
    value_feeds: tuple  # body input names fed by value

    @property
    def result(self):
        return self.builder.result


_BODIES = weakref.WeakKeyDictionary()  # Graph -> {EngineOptions: Body}
_BODIES_LOCK = threading.Lock()
new_lock_after_fork(sys.modules[__name__], "_BODIES_LOCK")


def body_of(op, field):
    """The Body of param field ``field`` of ``op``'s node, shared by every op context made
    for that node (constant folding and host evaluation make their own), so a body is built
    once per engine options.  ModelError when the graph attribute is missing."""
    graph = getattr(op.param, field, None) if op.param is not None else None
    if graph is None:
        raise ModelError(f"{op.node.describe()}: graph attribute {field!r} is missing")
    with _BODIES_LOCK:
        per_options = _BODIES.setdefault(graph, {})
        body = per_options.get(op.options)
        if body is None:
            body = per_options[op.options] = Body(graph, op.options,
                                                  f"{op.node.describe()}, {field}")
    return body


class Body:
    """One subgraph of a control-flow node.  Shared by every runtime of the outer model
    (like a kernel): builds are cached and made under a lock; it holds no per-run state."""

    def __init__(self, graph, options, where):
        # As parsed; never modified (each build works on a copy).  Held weakly: _BODIES maps
        # the graph to its Bodies weakly, and a strong reference back from the value kept
        # every If / Loop / Scan graph, and all it built, alive after its model was dropped.
        self._graph = weakref.ref(graph)
        self.options = options  # the outer engine's EngineOptions
        self.where = where  # 'node "x" (ai.onnx::If, opset 13), then_branch'
        self._typed = {}  # in types -> (out types, indices of shape-deciding inputs)
        self._builds = OrderedDict()  # (in types, in shapes) -> _Built, least recent first
        self._lock = threading.Lock()  # held while a build is made (see runtime/fork.py)
        reset_after_fork(self)

    def _after_fork_in_child(self):
        self._lock = threading.Lock()

    @property
    def graph(self):
        graph = self._graph()
        if graph is None:  # the node holding the body went first: a bug in pplpy
            raise InternalError(f"{self.where}: the body's graph is gone")
        return graph

    @property
    def input_names(self):
        return self.graph.input_names

    @property
    def output_names(self):
        return self.graph.output_names

    # -- types ---------------------------------------------------------------------------

    def output_types(self, in_types):
        """Element type of each body output when its inputs have ``in_types``."""
        return self._types(in_types)[0]

    def deciding_inputs(self, in_types):
        """Indices of the body inputs whose values can decide a shape."""
        return self._types(in_types)[1]

    def _types(self, in_types):
        key = tuple(in_types)
        with self._lock:
            found = self._typed.get(key)
            if found is None:
                found = self._typed[key] = self._infer_types(key)
        return found

    def _infer_types(self, in_types):
        graph = self.graph
        if len(in_types) != len(graph.inputs):
            raise ModelError(f"{self.where}: the body takes {len(graph.inputs)} inputs, "
                             f"the node gives {len(in_types)}")
        for info, given in zip(graph.inputs, in_types):
            if given is None:
                raise ModelError(f'{self.where}: body input "{info.name}" is fed an absent '
                                 f"value")
            if info.data_type is not None and info.data_type is not given:
                raise ModelError(f'{self.where}: body input "{info.name}" is declared '
                                 f"{info.data_type} but is fed {given}")
        ops = {}
        for node in graph.nodes:
            cls = find_op(node.domain, node.op_type, node.opset)
            if cls is None:  # reported at load with the model's other unsupported nodes
                raise UnsupportedOpError(f"{self.where}: {node.describe()}: op not supported",
                                         nodes=[(node.name, node.domain, node.op_type,
                                                 node.opset)])
            op = cls(node, self.options)
            op.constants = {i: graph.constants[name] for i, name in enumerate(node.inputs)
                            if name in graph.constants}
            ops[node] = op
        known = {name: DataType.from_numpy(value.dtype)
                 for name, value in graph.constants.items()}
        known.update({info.name: t for info, t in zip(graph.inputs, in_types)})
        with naming(self.where):
            infer_types(graph.nodes, ops, known)
        out_types = []
        for info in graph.outputs:
            computed = known.get(info.name)
            if computed is None:
                raise ModelError(f'{self.where}: body output "{info.name}" has no type')
            if info.data_type is not None and info.data_type is not computed:
                raise ModelError(f'{self.where}: body output "{info.name}" is declared '
                                 f"{info.data_type} but computes {computed}")
            out_types.append(computed)
        deciding = shape_deciding_values(graph.nodes, ops, known)
        return out_types, tuple(i for i, info in enumerate(graph.inputs)
                                if info.name in deciding)

    # -- builds, shapes, runtimes --------------------------------------------------------

    def _build_for(self, in_types, in_shapes):
        key = (tuple(in_types), tuple(tuple(int(d) for d in s) for s in in_shapes))
        with self._lock:
            built = self._builds.get(key)
            if built is None:
                built = self._builds[key] = self._build(*key)
                while len(self._builds) > MAX_BUILDS:
                    self._builds.popitem(last=False)
            else:
                self._builds.move_to_end(key)
        return built

    def _build(self, in_types, in_shapes):
        # Imported here: the runtime imports the engine, which imports every op module.
        from pplpy.engines.x86.engine import X86Engine
        from pplpy.runtime.builder import RuntimeBuilder

        graph = copy.deepcopy(self.graph)
        for info, data_type, dims in zip(graph.inputs, in_types, in_shapes):
            info.data_type, info.dims = data_type, dims
            record = graph.value(info.name)
            record.dtype, record.dims = data_type, info.dims
        o = self.options
        engine = X86Engine(max_isa=o.isa, num_threads=o.num_threads, fusion=o.fusion,
                           mm_policy=o.mm_policy)
        with naming(self.where):
            builder = RuntimeBuilder(graph, engines=[engine])
        result = builder.result
        types = {name: record.dtype for name, record in result.graph.values.items()}
        deciding = shape_deciding_values(result.graph.nodes, result.ops, types)
        return _Built(builder, tuple(n for n in result.graph.input_names if n in deciding))

    def infer(self, in_types, in_shapes, in_values):
        """The body's output shapes for inputs of ``in_shapes``.  ``in_values`` holds each
        input's value where the outer plan knows it (None otherwise); a shape-deciding input
        whose value is unknown is a ValueRequired naming ``self.where``."""
        from pplpy.runtime.plan import infer_plan_shapes

        built = self._build_for(in_types, in_shapes)
        names = built.result.graph.input_names
        feed_values = {}
        for name, value in zip(names, in_values):
            if name in built.value_feeds:
                if value is None:
                    raise ValueRequired(
                        f'{self.where}: the body\'s shapes depend on the value of its input '
                        f'"{name}", which is computed at run time; pplpy plans memory before '
                        f"a run and needs it as a constant, a host-computable value or a "
                        f"model input")
                feed_values[name] = np.asarray(value)
        with naming(self.where):
            shapes, _, _ = infer_plan_shapes(built.result, dict(zip(names, in_shapes)),
                                             feed_values)
        return [shapes[name] for name in self.output_names]

    def runtime(self, in_types, in_shapes):
        """A new Runtime of the body for inputs of these types and shapes (one per outer
        plan: runtimes of one build share its kernels, and run in parallel).  Its plans run
        on the process-wide pool of the engine's thread count, not a pool of its own: a
        Loop whose carried value grows makes a runtime per length, and each had started
        its own workers (2,000 threads for 300 iterations)."""
        from pplpy.runtime.runtime import Runtime
        from pplpy.runtime.step import shared_pool

        built = self._build_for(in_types, in_shapes)
        o = self.options
        pool = shared_pool(o.num_threads, o.bind_threads) if o.num_threads > 1 else None
        return Runtime(built.result, value_feeds=built.value_feeds, pool=pool)


class BodyRunner:
    """The body runtimes of one outer plan, made on first use per (types, shapes), and a
    run in output order."""

    def __init__(self, body, where):
        self.body = body
        self.where = where
        self._runtimes = OrderedDict()  # the last MAX_BUILDS, least recently used first
        # Held while _runtimes changes or is copied: memory() may be called from another
        # thread than the run's (and its keys' DataType hashing lets threads switch mid-copy).
        self._lock = threading.Lock()
        reset_after_fork(self)

    def _after_fork_in_child(self):
        self._lock = threading.Lock()

    def memory(self):
        """Arena and plan bytes, and plans, of the body runtimes made so far (their own bodies'
        included): what Runtime.memory() adds for the control-flow node."""
        totals = {"arena": 0, "plan": 0, "cached_plans": 0}
        with self._lock:
            runtimes = list(self._runtimes.values())
        for runtime in runtimes:
            held = runtime.memory()
            for key in totals:
                totals[key] += held[key]
        return totals

    def run(self, arrays):
        """The body's outputs (fresh arrays, in output order) for inputs ``arrays``."""
        types = [DataType.from_numpy(a.dtype) for a in arrays]
        key = (tuple(types), tuple(a.shape for a in arrays))
        with self._lock:
            runtime = self._runtimes.get(key)
            if runtime is not None:
                self._runtimes.move_to_end(key)
        if runtime is None:  # built outside the lock (a build may take long)
            runtime = self.body.runtime(types, [a.shape for a in arrays])
            with self._lock:
                self._runtimes[key] = runtime
                while len(self._runtimes) > MAX_BUILDS:
                    self._runtimes.popitem(last=False)
        with naming(self.where):
            outputs = runtime.run(dict(zip(self.body.input_names, arrays)))
        return [outputs[name] for name in self.body.output_names]


def check_count(op, what, have, want):
    """ModelError naming the node when a body has the wrong number of inputs or outputs."""
    if have != want:
        raise ModelError(f"{op.node.describe()}: {what} has {have}, the op needs {want}")


def write_outputs(op, slots, arrays):
    """Copy a body's results into the node's output slots; a result whose shape is not the
    one planned is a ShapeError naming the node (never a wrong answer)."""
    for index, (slot, array) in enumerate(zip(slots, arrays)):
        if slot is None:
            continue
        if tuple(array.shape) != tuple(slot.shape.dims):
            raise ShapeError(f"{op.node.describe()}: output {index} has shape "
                             f"{list(array.shape)} at run time, but the plan made for these "
                             f"inputs expected {list(slot.shape.dims)}")
        np.copyto(slot.array, array)


def python_step(kernel, io, run, runners=()):
    """The PythonStep of a control-flow kernel: ``run(inputs, output slots)`` once per run.
    Control flow is a Python step by design: it drives nested runtimes (see module doc), the
    ones ``runners`` make (the plan's memory counts theirs)."""
    from pplpy.runtime.step import PythonStep

    inputs = [s.array if s is not None else None for s in io.inputs]
    outputs = list(io.outputs)
    return PythonStep(lambda: run(inputs, outputs), label=kernel.node.name, nested=runners)


def scalar(op, value, what, dtype):
    """The one element of a control input (If's cond, Loop's trip count)."""
    array = np.asarray(value)
    if array.size != 1:
        raise ShapeError(f"{op.node.describe()}: {what} must hold one element, got shape "
                         f"{list(array.shape)}")
    return dtype(array.reshape(-1)[0])
