"""RuntimeBuilder: model file -> optimised, engine-processed plan -> Runtimes.

    from_onnx(path) --parse--> Graph --unsupported check--> PassManager (folding with the
    engine's kernels) --> engine.process (inference, formats, reorders, kernels) --> plan
    create_runtime() --> Runtime(plan)   (as many as you like; they share constant weights)
"""

import numpy as np

from pplpy.engines.x86.engine import X86Engine
from pplpy.errors import InputError, PplError, UnsupportedOpError
from pplpy.models.onnx import load_model
from pplpy.optimizer import PassManager
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE
from pplpy.plugins import load_plugins
from pplpy.runtime.runtime import DEFAULT_PLAN_CACHE_SIZE, Runtime


class RuntimeBuilder:
    """Builds once; ``create_runtime()`` makes runtimes sharing the packed weights."""

    def __init__(self, graph, unparsed=(), engines=None, in_shapes=None, pipeline=None,
                 plan_cache_size=DEFAULT_PLAN_CACHE_SIZE, on_pass=None):
        self.engines = list(engines) if engines else [X86Engine()]
        if len(self.engines) != 1 or not isinstance(self.engines[0], X86Engine):
            raise PplError("pplpy ships one engine: pass engines=[pplpy.X86Engine(...)]")
        self.engine = self.engines[0]
        self.plan_cache_size = plan_cache_size
        _check_supported(graph, unparsed, self.engine)
        dims = _build_dims(graph, in_shapes)
        self.pass_manager = PassManager(pipeline or DEFAULT_PIPELINE)
        self.result = self.engine.process(graph, dims, self.pass_manager, on_pass)
        self.graph = graph

    @classmethod
    def from_onnx(cls, path, engines=None, in_shapes=None, pipeline=None,
                  plan_cache_size=DEFAULT_PLAN_CACHE_SIZE, on_pass=None):
        """Parse and build the ONNX model at ``path``.

        ``in_shapes`` fixes free input dims at load (a dict name -> dims, or a list in input
        order); inputs left free stay symbolic and each new shape a run feeds gets its own
        cached plan.  ``on_pass(name, state)`` is called after each engine pass (used by
        ``pplnn --dump-graph``).
        """
        load_plugins()
        graph, unparsed = load_model(path)
        return cls(graph, unparsed, engines=engines, in_shapes=in_shapes, pipeline=pipeline,
                   plan_cache_size=plan_cache_size, on_pass=on_pass)

    @property
    def plan(self):
        """The engine's result (older name)."""
        return self.result

    def create_runtime(self):
        return Runtime(self.result, self.plan_cache_size)


def _check_supported(graph, unparsed, engine):
    """Raise one UnsupportedOpError listing every node nobody can parse or run."""
    unparsed_ids = {id(n) for n in unparsed}
    bad = [n for n in graph.nodes if id(n) in unparsed_ids or not engine.supports(n)]
    if bad:
        lines = [f"  {n.describe()}" for n in bad]
        raise UnsupportedOpError(
            f"{len(bad)} node(s) use ops pplpy does not support (see docs/supported_ops.md, or "
            f"add them: docs/add_op.md):\n" + "\n".join(lines),
            nodes=[(n.name, n.domain, n.op_type, n.opset) for n in bad],
        )


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
            try:
                shape = tuple(int(d) for d in given[info.name])
            except (TypeError, ValueError) as exc:
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
