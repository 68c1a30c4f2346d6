"""InferenceSession: pplpy behind ONNX Runtime's Python API, so code written for ONNX
Runtime's CPU provider runs by changing its import.

    import pplpy as ort                       # instead of: import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession("model.onnx", sess_options=opts)
    [i.name for i in sess.get_inputs()], sess.get_inputs()[0].shape   # ['x'], ['N', 3, 8, 8]
    (y,) = sess.run(None, {"x": x})           # a list, in output order

    path or bytes --RuntimeBuilder (parse, optimise, kernels; once)--> pool of Runtimes
    run(names, feed) --take an idle Runtime (made on demand, at most max_concurrency)-->
                     Runtime.run --> outputs in the order of ``output_names``

``run`` may be called from many threads at once, as ONNX Runtime's: each concurrent call gets
its own Runtime from the builder (they share the packed weights), up to
``SessionOptions.max_concurrency`` (default: the machine's CPUs); more calls wait.

Differences from ONNX Runtime: errors are pplpy's (``PplError`` subclasses, with the node and
what to fix) instead of ``onnxruntime`` exceptions; ``providers`` accepts only the CPU
provider; inputs are not cast (a float64 feed to a float32 input is an InputError).
"""

import enum
import json
import logging
import os
import threading
import time
import warnings

from pplpy.common.data_type import DataType
from pplpy.engines.x86.engine import X86Engine
from pplpy.errors import PplError
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE
from pplpy.plugins import PluginWarning
from pplpy.runtime.builder import RuntimeBuilder
from pplpy.runtime.fork import reset_after_fork

__all__ = ["ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "NodeArg",
           "SessionOptions", "get_available_providers"]

PROVIDERS = ("CPUExecutionProvider",)

LOGGER = logging.getLogger("pplpy")

_TYPE_STRINGS = {
    DataType.FLOAT32: "tensor(float)",
    DataType.FLOAT16: "tensor(float16)",
    DataType.FLOAT64: "tensor(double)",
    DataType.INT8: "tensor(int8)",
    DataType.UINT8: "tensor(uint8)",
    DataType.INT16: "tensor(int16)",
    DataType.UINT16: "tensor(uint16)",
    DataType.INT32: "tensor(int32)",
    DataType.UINT32: "tensor(uint32)",
    DataType.INT64: "tensor(int64)",
    DataType.UINT64: "tensor(uint64)",
    DataType.BOOL: "tensor(bool)",
}

# ONNX Runtime's log severities (0 verbose ... 4 fatal) as Python logging levels.
_LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR,
               4: logging.CRITICAL}


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels, as pplpy applies them: DISABLE_ALL runs no graph rewrites and
    no fusion; BASIC runs the rewrites (folding, DCE, ...) without post-op fusion; EXTENDED
    and ALL run everything (the default)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Accepted for compatibility; pplpy always runs a plan's steps in order."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """The options of ONNX Runtime's SessionOptions that pplpy honours.

    - ``intra_op_num_threads``: thread team of each runtime (0: the physical cores);
    - ``inter_op_num_threads``, ``execution_mode``: accepted, without effect;
    - ``graph_optimization_level``: see GraphOptimizationLevel;
    - ``enable_profiling``, ``profile_file_prefix``: time every step; ``end_profiling()``
      writes a Chrome trace ``<prefix>_<date>.json`` and returns its path;
    - ``log_severity_level``: 0 verbose ... 4 fatal (-1: default, warnings), the level of the
      "pplpy" logger; at 3 and above plugin-import warnings are silenced;
    - ``max_concurrency`` (pplpy's own): how many runs may proceed at once (runtimes made).
    """

    # A misspelt option (intra_op_num_thread) is an AttributeError, as in ONNX Runtime,
    # rather than a new attribute that silently does nothing.
    __slots__ = ("intra_op_num_threads", "inter_op_num_threads", "execution_mode",
                 "graph_optimization_level", "enable_profiling", "profile_file_prefix",
                 "log_severity_level", "log_verbosity_level", "max_concurrency",
                 "cast_to_float32")

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.enable_profiling = False
        self.profile_file_prefix = "pplpy_profile"
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.max_concurrency = os.cpu_count() or 1
        self.cast_to_float32 = False  # pplpy's own: see pplpy.load


class NodeArg:
    """A model input or output as ONNX Runtime describes it: ``name``, ``shape`` (ints, the
    dim's name where it is symbolic, None where unknown) and ``type`` ('tensor(float)')."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name, shape, type):  # noqa: A002 - ONNX Runtime's attribute name
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _node_arg(name, data_type, dims):
    shape = None if dims is None else [
        d if isinstance(d, str) else (int(d) if isinstance(d, int) else None) for d in dims]
    return NodeArg(name, shape, _TYPE_STRINGS.get(data_type, f"tensor({data_type})"))


def get_available_providers():
    """As onnxruntime.get_available_providers(): pplpy runs on the CPU."""
    return list(PROVIDERS)


def _check_providers(providers):
    if isinstance(providers, str):  # one name, not its letters
        providers = [providers]
    for provider in providers or ():
        name = provider[0] if isinstance(provider, (tuple, list)) else provider
        if name not in PROVIDERS:
            raise PplError(f"provider {name!r} is not available in pplpy; it runs on the CPU "
                           f"(providers={list(PROVIDERS)})")


class InferenceSession:
    """ONNX Runtime's InferenceSession on pplpy's x86 engine (see the module doc)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None,
                 provider_options=None, **kwargs):
        _check_providers(providers)
        self._options = sess_options or SessionOptions()
        options = self._options
        level = options.log_severity_level
        if level is not None and level >= 0:
            LOGGER.setLevel(_LOG_LEVELS.get(int(level), logging.CRITICAL))
        threads = int(options.intra_op_num_threads or 0) or None
        opt_level = int(options.graph_optimization_level)
        engine = X86Engine(num_threads=threads,
                           fusion=opt_level >= GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
        pipeline = () if opt_level == GraphOptimizationLevel.ORT_DISABLE_ALL else DEFAULT_PIPELINE
        with warnings.catch_warnings():
            if level is not None and level >= 3:
                warnings.simplefilter("ignore", PluginWarning)
            self._builder = RuntimeBuilder.from_onnx(
                path_or_bytes, engines=[engine], passes=pipeline,
                cast_to_float32=bool(getattr(options, "cast_to_float32", False)))
        self._model_path = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) \
            else None
        self._max = max(1, int(getattr(options, "max_concurrency", 1) or 1))
        self._idle = [self._new_runtime()]
        self._all = list(self._idle)
        self._cond = threading.Condition()
        reset_after_fork(self)
        self._profiling = bool(options.enable_profiling)
        self._profile_start = time.time()

    def _after_fork_in_child(self):
        # Only this thread exists here: a runtime another thread had checked out is idle.
        self._cond = threading.Condition()
        self._idle = list(self._all)

    def _new_runtime(self):
        rt = self._builder.create_runtime()
        rt.profiler.enabled = bool(self._options.enable_profiling)
        return rt

    # -- ONNX Runtime's introspection ----------------------------------------------------

    def get_inputs(self):
        return [_node_arg(t.name, t.data_type, t.dims) for t in self._all[0].inputs]

    def get_outputs(self):
        rt = self._all[0]
        declared = {v.name: v for v in rt.graph.outputs}
        args = []
        for t in rt.outputs:
            info = declared.get(t.name)
            dims = info.dims if info is not None and info.dims is not None else t.dims
            args.append(_node_arg(t.name, t.data_type, dims))
        return args

    def get_overridable_initializers(self):
        return []

    def get_providers(self):
        return list(PROVIDERS)

    def get_provider_options(self):
        return {name: {} for name in PROVIDERS}

    def get_session_options(self):
        return self._options

    def set_providers(self, providers=None, provider_options=None):
        _check_providers(providers)

    @property
    def runtime(self):
        """The first pplpy Runtime of this session (for pplpy's own introspection)."""
        return self._all[0]

    # -- running -------------------------------------------------------------------------

    def run(self, output_names, input_feed, run_options=None):
        """Run the model: returns the outputs named by ``output_names`` (all when None or
        empty), in that order, as a list of numpy arrays."""
        if isinstance(output_names, str):  # one name, as Runtime.run takes it
            output_names = [output_names]
        names = list(output_names) if output_names else None
        rt = self._acquire()
        try:
            # Runtime.run returns a dict: ask for each name once, then answer every name
            # asked for, repeats included, in order (as ONNX Runtime does).
            outputs = rt.run(input_feed, list(dict.fromkeys(names)) if names else None)
        finally:
            self._release(rt)
        if names is None:
            return list(outputs.values())
        return [outputs[name] for name in names]

    def _acquire(self):
        with self._cond:
            while True:
                if self._idle:
                    return self._idle.pop()
                if len(self._all) < self._max:
                    rt = self._new_runtime()
                    self._all.append(rt)
                    return rt
                self._cond.wait()

    def _release(self, rt):
        with self._cond:
            self._idle.append(rt)
            self._cond.notify()

    # -- profiling -----------------------------------------------------------------------

    def end_profiling(self):
        """Write the Chrome trace of the profiled runs to ``<profile_file_prefix>_<date>.json``
        and return its path ("" when profiling is off), as ONNX Runtime does."""
        if not self._profiling:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self._profile_start))
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with self._cond:
            events = [e for rt in self._all for e in rt.profiler.trace_events]
            for rt in self._all:
                rt.profiler.enabled = False
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        self._profiling = False
        return path
