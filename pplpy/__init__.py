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
    ModelError,
    PplError,
    RegistryError,
    ShapeError,
    UnsupportedOpError,
)
from pplpy.runtime import Runtime, RuntimeBuilder, Tensor

__version__ = "0.1.0"

__all__ = [
    "DataFormat", "DataType", "InputError", "ModelError", "PplError", "RegistryError",
    "Runtime", "RuntimeBuilder", "ShapeError", "Tensor", "TensorShape", "UnsupportedOpError",
    "X86Engine", "load",
]


def load(path, num_threads=None, max_isa=None, in_shapes=None, pipeline=None, fusion=True,
         plan_cache_size=8):
    """Parse, optimise and build the ONNX model at ``path``; return a ready Runtime.

    ``num_threads`` is the runtime's thread team (default: the machine's physical cores);
    ``max_isa`` caps the kernels' ISA ("avx512", "fma" or "sse"); ``in_shapes`` fixes free
    input dims at load (others stay symbolic: each new input shape gets a plan, and the last
    ``plan_cache_size`` plans are kept); ``fusion=False`` keeps activations as their own
    steps; ``pipeline`` replaces the graph-rewrite passes (a list or a YAML file's entries).
    """
    engine = X86Engine(max_isa=max_isa, num_threads=num_threads, fusion=fusion)
    builder = RuntimeBuilder.from_onnx(path, engines=[engine], in_shapes=in_shapes,
                                       pipeline=pipeline, plan_cache_size=plan_cache_size)
    return builder.create_runtime()
