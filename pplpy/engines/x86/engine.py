"""X86Engine: turns an optimised Graph into kernels for this CPU.

    Graph --op contexts (registry)--> types --> shapes --> formats + Reorder nodes
          --> kernels (weights packed once) --> EnginePlan (what a Runtime executes)

Options: ``max_isa`` caps the ISA tier (else ``PPLPY_MAX_ISA``, else the best the CPU
has); ``num_threads`` is the OpenMP thread count each kernel may use.
"""

from dataclasses import dataclass

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.common.isa import best_isa
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86 import ops as _ops  # noqa: F401  (fills the registry)
from pplpy.engines.x86.ops.declare import find_op
from pplpy.engines.x86.ops.kernel import KernelContext
from pplpy.engines.x86.passes.inference import infer_shapes, infer_types
from pplpy.engines.x86.passes.reorder_insertion import select_formats_and_insert_reorders
from pplpy.errors import PplError


@dataclass(frozen=True)
class EngineOptions:
    isa: str
    num_threads: int


@dataclass
class EnginePlan:
    """The engine's result: nodes in run order with their op contexts and kernels, and each
    tensor's element type and format.  Shared by every Runtime of a builder."""

    graph: object
    ops: dict  # id(node) -> op context
    kernels: dict  # id(node) -> kernel
    types: dict  # tensor -> DataType
    formats: dict  # tensor -> DataFormat
    build_shapes: dict  # tensor -> dims at build time
    options: EngineOptions


class X86Engine:
    """The x86-64 CPU engine (sse4.1, AVX2+FMA and AVX-512 kernels)."""

    name = "x86"

    def __init__(self, max_isa=None, num_threads=1):
        if int(num_threads) < 1:
            raise PplError(f"num_threads must be >= 1, got {num_threads}")
        self.options = EngineOptions(isa=best_isa(max_isa), num_threads=int(num_threads))

    def __repr__(self):
        return f"X86Engine(isa={self.options.isa!r}, num_threads={self.options.num_threads})"

    # -- support -------------------------------------------------------------------------

    def supports(self, node):
        return find_op(node.domain, node.op_type, node.opset) is not None

    def create_op(self, node, constants):
        cls = find_op(node.domain, node.op_type, node.opset)
        op = cls(node, self.options)
        op.constants = {
            i: constants[name] for i, name in enumerate(node.inputs) if name in constants
        }
        return op

    # -- build ---------------------------------------------------------------------------

    def process(self, graph, input_dims):
        """Infer, choose formats, insert reorders and create kernels for ``graph``."""
        constants = graph.constants
        ops = {id(node): self.create_op(node, constants) for node in graph.nodes}
        known_types = {name: DataType.from_numpy(v.dtype) for name, v in constants.items()}
        known_types.update({v.name: v.data_type for v in graph.inputs})
        infer_types(graph.nodes, ops, dict(known_types))
        shapes = {name: tuple(v.shape) for name, v in constants.items()}
        shapes.update(input_dims)
        infer_shapes(graph.nodes, ops, shapes, constants, partial=True)
        formats = select_formats_and_insert_reorders(
            graph, ops, shapes, lambda node: self.create_op(node, constants)
        )
        # Again over the final graph: Reorders were added and output names may have moved.
        types = infer_types(graph.nodes, ops, dict(known_types))
        for name, fmt in formats.items():
            if fmt is DataFormat.N16CX and types.get(name) is not DataType.FLOAT32:
                raise PplError(f'tensor "{name}": N16CX needs float32, got {types.get(name)}')
        kernels = {id(node): ops[id(node)].create_kernel() for node in graph.nodes}
        return EnginePlan(graph, ops, kernels, types, formats, shapes, self.options)

    # -- constant folding ----------------------------------------------------------------

    def evaluate(self, node, inputs):
        """Run one node on constant numpy inputs (NDARRAY) and return its outputs.

        Used by constant folding, so build-time computation uses pplpy's own kernels.
        """
        constants = {name: value for name, value in zip(node.inputs, inputs) if name}
        op = self.create_op(node, constants)
        in_types = [DataType.from_numpy(v.dtype) if v is not None else None for v in inputs]
        out_types = op.infer_type(in_types)
        in_shapes = [tuple(v.shape) if v is not None else None for v in inputs]
        known = dict(zip(node.inputs, in_shapes))
        infer_shapes([node], {id(node): op}, known, constants)
        out_shapes = [TensorShape(known[name], t) for name, t in zip(node.outputs, out_types)]
        in_tshapes = [
            TensorShape(v.shape, DataType.from_numpy(v.dtype)) if v is not None else None
            for v in inputs
        ]
        outputs = [np.empty(s.dims, s.data_type.numpy) for s in out_shapes]
        arrays = [np.ascontiguousarray(v) if v is not None else None for v in inputs]
        ctx = KernelContext(arrays, in_tshapes, outputs, out_shapes, self.options.num_threads)
        op.create_kernel().execute(ctx)
        return outputs
