"""RuntimeBuilder: model file -> optimised, engine-processed plan -> Runtimes.

    from_onnx(path) --parse--> Graph --unsupported check--> PassManager (folding with the
    engine's kernels) --> engine.process (inference, formats, reorders, kernels) --> plan
    create_runtime() --> Runtime(plan)   (as many as you like; they share constant weights)

Every failure is a PplError: a Python exception from inside (a plugin's shape function, a
MemoryError while folding constants) is wrapped by ``pplpy.errors.guard``.
"""

import math
import operator
import threading

import numpy as np

from pplpy.engines.x86.engine import X86Engine
from pplpy.engines.x86.ops.declare import registered_ops
from pplpy.errors import InputError, ModelError, PplError, UnsupportedOpError, guard
from pplpy.ir import all_nodes
from pplpy.models.onnx.model_parser import MAX_TENSOR_BYTES, file_identity, read_model
from pplpy.models.onnx.registry import parser_entries
from pplpy.runtime.fork import reset_after_fork
from pplpy.optimizer import PassManager
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE
from pplpy.plugins import failed_plugins, load_plugins
from pplpy.runtime.runtime import DEFAULT_PLAN_CACHE_SIZE, Runtime

# How many node names an UnsupportedOpError shows per op before "and N more".
SHOWN_NODES = 3

# What an out-of-memory error at load suggests (a run's says to check the shapes).
READ_MEMORY_HINT = "the model's weights must fit in memory, with room to pack them"
BUILD_MEMORY_HINT = ("building packs the weights and, with in_shapes, plans memory for those "
                     "shapes: free memory, or give smaller in_shapes")


class RuntimeBuilder:
    """Builds once; ``create_runtime()`` makes runtimes sharing the packed weights."""

    def __init__(self, graph, unparsed=(), engines=None, in_shapes=None, passes=None,
                 plan_cache_size=DEFAULT_PLAN_CACHE_SIZE, on_pass=None):
        self.engines = list(engines) if engines else [X86Engine()]
        if len(self.engines) != 1 or not isinstance(self.engines[0], X86Engine):
            raise PplError("pplpy ships one engine: pass engines=[pplpy.X86Engine(...)]")
        self.engine = self.engines[0]
        self.plan_cache_size = plan_cache_size
        with guard("building the model", memory_error=ModelError,
                   memory_hint=BUILD_MEMORY_HINT):
            _check_supported(graph, unparsed, self.engine)
            dims = _build_dims(graph, in_shapes)
            self.pass_manager = PassManager(DEFAULT_PIPELINE if passes is None else passes)
            self.result = self.engine.process(graph, dims, self.pass_manager, on_pass)
        self.graph = graph
        self._rebuild = None  # from_onnx: builds the variant with overridable initializers
        self._override = None
        self._override_lock = threading.Lock()  # held while the variant is built
        reset_after_fork(self)

    def _after_fork_in_child(self):
        self._override_lock = threading.Lock()

    @classmethod
    def from_onnx(cls, path, engines=None, in_shapes=None, passes=None,
                  plan_cache_size=DEFAULT_PLAN_CACHE_SIZE, on_pass=None, cast_to_float32=False):
        """Parse and build the ONNX model at ``path`` (a file path, or the model's bytes).

        ``in_shapes`` fixes free input dims at load (a dict name -> dims, or a list in input
        order); inputs left free stay symbolic and each new shape a run feeds gets its own
        cached plan.  ``on_pass(name, state)`` is called after each engine pass (used by
        ``pplnn --dump-graph``).  ``cast_to_float32=True`` casts float64 / float16 inputs and
        weights to float32 at load (inputs are then fed as float32); otherwise math on them
        is an UnsupportedOpError.  Initializers the model also lists as inputs are defaults
        that a feed may override (see ``override_builder``).
        """
        load_plugins()
        if isinstance(path, (bytearray, memoryview)):
            path = bytes(path)  # the caller may change them; the override variant reads them
        identity, files = file_identity(path), []  # taken before the file is read
        with guard("reading the model", memory_error=ModelError,
                   memory_hint=READ_MEMORY_HINT):
            graph, unparsed = read_model(path, files, cast_to_float32)
        builder = cls(graph, unparsed, engines=engines, in_shapes=in_shapes, passes=passes,
                      plan_cache_size=plan_cache_size, on_pass=on_pass)
        if graph.overridable:
            # The variant is parsed again from the file when a run first feeds an
            # overridable initializer (holding a second copy of the weights until then would
            # double the model's memory); a file changed since makes that run an error, not
            # a build of another model.  The external data files count too.
            identity = (identity, tuple(ident for _, ident in files))

            def rebuild():
                now = (file_identity(path), tuple(file_identity(name) for name, _ in files))
                if now != identity:
                    raise ModelError(
                        f"model file {path!r} or its external data was changed or removed "
                        f"since it was loaded; a run that feeds an initializer the model "
                        f"lists as an input reads the file again: load the model again")
                with guard("reading the model", memory_error=ModelError,
                           memory_hint=READ_MEMORY_HINT):
                    variant, skipped = read_model(path, None, cast_to_float32,
                                                  override_initializers=True)
                return cls(variant, skipped, engines=engines, in_shapes=in_shapes,
                           passes=passes, plan_cache_size=plan_cache_size)

            builder._rebuild = rebuild
        return builder

    def override_builder(self):
        """The builder of this model with its overridable initializers (initializers that are
        also graph inputs) built as inputs, made on first use: a run that feeds one of them
        runs there, without the folding and packing those values allow as constants."""
        if self._rebuild is None:
            return None
        with self._override_lock:
            if self._override is None:
                self._override = self._rebuild()
            return self._override

    @property
    def plan(self):
        """The engine's result (older name)."""
        return self.result

    def create_runtime(self):
        override = self.override_builder if self._rebuild is not None else None
        return Runtime(self.result, self.plan_cache_size, override)


def _check_supported(graph, unparsed, engine):
    """Raise one UnsupportedOpError listing every node nobody can parse or run, those inside
    control-flow bodies included."""
    unparsed_ids = {id(n) for n in unparsed}
    bad = [n for n in all_nodes(graph) if id(n) in unparsed_ids or not engine.supports(n)]
    if bad:
        raise UnsupportedOpError(unsupported_message(bad),
                                 nodes=[(n.name, n.domain, n.op_type, n.opset) for n in bad])


def _missing(domain, op_type, opset):
    """What is missing for (domain, op_type) at ``opset``: the op, that opset, or a kernel."""
    parsed = parser_entries(domain, op_type)
    kernels = [(d, t, f, last) for d, t, f, last, _ in registered_ops()
               if d == domain and t == op_type]
    if not parsed and not kernels:
        return "op not supported"
    ranges = sorted({(e.first, e.last) for e in parsed} | {(f, last) for *_, f, last in kernels})
    covered = ", ".join(f"{f}-{last}" if f != last else str(f) for f, last in ranges)
    if any(e.first <= opset <= e.last for e in parsed):
        return f"parsed, but no x86 kernel for opset {opset} (kernels: {covered or 'none'})"
    return f"opset {opset} not supported (supported opsets: {covered})"


def unsupported_message(nodes):
    """The UnsupportedOpError text, built once: nodes grouped by (domain, op, opset), each
    group with its count, its first node names and what is missing (op, opset or kernel);
    plugins that failed to import are named, since they may have provided the op."""
    groups = {}
    for node in nodes:
        groups.setdefault((node.domain, node.op_type, node.opset), []).append(node.name)
    lines = [f"{len(nodes)} node(s) use ops pplpy does not support (see "
             f"docs/supported_ops.md, pplnn --list-ops, or add them: docs/add_op.md):"]
    for (domain, op_type, opset), names in groups.items():
        shown = ", ".join(f'"{n}"' for n in names[:SHOWN_NODES])
        more = f" and {len(names) - SHOWN_NODES} more" if len(names) > SHOWN_NODES else ""
        why = _missing(domain, op_type, opset)
        lines.append(f"  {domain or 'ai.onnx'}::{op_type} opset {opset}: {len(names)} node(s) "
                     f"({shown}{more}): {why}")
    failed = failed_plugins()
    if failed:
        lines.append("  plugins that failed to import (they may provide these ops): "
                     + "; ".join(f"{name}: {why}" for name, why in failed.items()))
    return "\n".join(lines)


def _build_dims(graph, in_shapes):
    """Dims of each input: the declared ones, with free dims fixed by ``in_shapes`` (which
    then also become the declared dims a feed is checked against); other free dims stay
    symbolic (their name, or None)."""
    names = graph.input_names
    given = {}
    if in_shapes is not None:
        if isinstance(in_shapes, dict):
            given = dict(in_shapes)
        else:
            in_shapes = list(in_shapes)
            if len(in_shapes) > len(names):
                raise InputError(f"{len(in_shapes)} input shapes given for {len(names)} "
                                 f"inputs {names}")
            given = dict(zip(names, in_shapes))
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise InputError(f"in_shapes names unknown input(s) {unknown}; inputs are {names}")
    dims = {}
    for info in graph.inputs:
        if info.name in given:
            try:  # operator.index: 1.5 is refused, not truncated to 1
                shape = tuple(operator.index(d) for d in given[info.name])
            except TypeError as exc:
                raise InputError(f'input "{info.name}": in_shapes must be integers, got '
                                 f"{given[info.name]!r}") from exc
            if info.dims is not None and (
                len(shape) != len(info.dims)
                or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(info.dims, shape))
            ):
                raise InputError(f'input "{info.name}": shape {list(shape)} does not fit the '
                                 f"declared {list(info.dims)}")
            if any(s < 0 for s in shape):
                raise InputError(f'input "{info.name}": negative dim in {list(shape)}')
            if info.data_type is not None and (
                    info.data_type.itemsize * math.prod(shape) > MAX_TENSOR_BYTES):
                raise InputError(f'input "{info.name}": in_shapes {list(shape)} need more than '
                                 f"{MAX_TENSOR_BYTES} bytes, pplpy's limit for one tensor")
            dims[info.name] = shape
            info.dims = shape
            graph.value(info.name).dims = shape
        elif info.dims is None:
            raise InputError(f'input "{info.name}" has no declared shape; give one with '
                             f"in_shapes (pplnn --in-shapes)")
        else:
            dims[info.name] = tuple(d if isinstance(d, int) and d > 0 else
                                    (d if isinstance(d, str) else None) for d in info.dims)
    return dims


def random_inputs(runtime, seed=0):
    """Inputs for a runtime from its declared shapes (free dims = 1): handy for demos."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for tensor in runtime.inputs:
        shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in (tensor.dims or ()))
        feeds[tensor.name] = rng.random(shape).astype(tensor.dtype)
    return feeds
