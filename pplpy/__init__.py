"""pplpy: a plugin-based ONNX inference engine with Cython x86 kernels, after PPL.NN.

    import pplpy
    rt = pplpy.load("model.onnx", num_threads=2)
    outputs = rt.run({"input": x})          # dict name -> numpy array

    model.onnx -> models/onnx (params) -> optimizer (passes) -> engines/x86 (formats,
    reorders, kernels) -> runtime (memory plan, run)
"""

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86.engine import X86Engine
from pplpy.errors import (
    InputError,
    InternalError,
    ModelError,
    PluginError,
    PplError,
    RegistryError,
    ShapeError,
    UnsupportedOpError,
)
from pplpy.runtime import Runtime, RuntimeBuilder, Tensor
from pplpy.session import (
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    NodeArg,
    SessionOptions,
    get_available_providers,
)

__version__ = "0.1.0"

__all__ = [
    "DataFormat", "DataType", "ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "InputError", "InternalError", "ModelError",
    "NodeArg", "PluginError", "PplError", "RegistryError", "Runtime", "RuntimeBuilder",
    "SessionOptions", "ShapeError", "Tensor", "TensorShape", "UnsupportedOpError", "X86Engine",
    "get_available_providers", "load", "save_optimized_model",
]


def load(path, num_threads=None, max_isa=None, in_shapes=None, passes=None, fusion=True,
         plan_cache_size=8, cast_to_float32=False, mm_policy="mem", bind_threads=True):
    """Parse, optimise and build the ONNX model at ``path``; return a ready Runtime.

    ``num_threads`` is the runtime's thread team (default: the machine's physical cores);
    ``max_isa`` caps the kernels' ISA ("avx512", "fma" or "sse"); ``in_shapes`` fixes free
    input dims at load (others stay symbolic: each new input shape gets a plan, and the last
    ``plan_cache_size`` plans are kept); ``fusion=False`` keeps activations as their own
    steps; ``passes`` replaces the graph optimiser's pipeline (a YAML file's path or a list of
    entries, see ``pplpy.optimizer.pass_manager``; ``pplpy.optimizer.DEFAULT_PIPELINE`` is
    the default);
    ``cast_to_float32=True`` casts float64 / float16 inputs and weights to float32 at load
    (without it math on them is an UnsupportedOpError: pplpy computes in float32 and never
    casts silently); ``mm_policy`` is "mem" (values share one arena by lifetime) or "perf"
    (every value its own memory); ``bind_threads`` (default True) keeps each worker thread of
    the team on one CPU, so a worker is never queued behind the calling thread (the calling
    thread itself stays free); pass False where several processes or runtimes share the
    cores at once.
    ``path`` may also be the model's bytes.  Raises only PplError subclasses.
    """
    engine = X86Engine(max_isa=max_isa, num_threads=num_threads, fusion=fusion,
                       mm_policy=mm_policy, bind_threads=bind_threads)
    builder = RuntimeBuilder.from_onnx(path, engines=[engine], in_shapes=in_shapes,
                                       passes=passes, plan_cache_size=plan_cache_size,
                                       cast_to_float32=cast_to_float32)
    return builder.create_runtime()


def save_optimized_model(path, out_path, max_isa=None, in_shapes=None, passes=None,
                         fusion=True, cast_to_float32=False):
    """Optimise the ONNX model at ``path`` as ``load`` would (same options) and write the
    graph as the engine has it after graph rewrites and post-op fusion to ``out_path``;
    return the written ModelProto.

    Folded constants, recognised patterns (LayerNormalization, Gelu, MatMulBias, ...) and
    fused activations are kept, so loading the file needs no second optimisation; fused
    nodes and ops newer than the model's opset are written in the ``pplpy`` domain, which
    only pplpy reads (see ``pplpy/engines/x86/save_model.py``).  The engine's format
    reorders are left out: formats are chosen again on load.  Raises only PplError
    subclasses (one naming the node if a node cannot be written faithfully).
    """
    from pplpy.engines.x86.save_model import capture, write_model

    on_pass, holder = capture()
    engine = X86Engine(max_isa=max_isa, num_threads=1, fusion=fusion)
    RuntimeBuilder.from_onnx(path, engines=[engine], in_shapes=in_shapes, passes=passes,
                             cast_to_float32=cast_to_float32, on_pass=on_pass)
    write_model(holder["model"], out_path)
    return holder["model"]
