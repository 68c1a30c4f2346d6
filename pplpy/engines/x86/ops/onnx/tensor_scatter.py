"""TensorScatter (opset 24): the functional KV-cache update of decoder models.

    present = past;  present[..., write_indices[b] + s, ...] = update[..., s, ...]

along the sequence ``axis`` (not the batch axis 0), modulo max_sequence_length in
``circular`` mode.  Pure data movement, so every element type pplpy holds is accepted.
Shapes are checked when the plan is made; the write indices are data, read when the step
runs (an index that falls outside the cache skips its row, see ``_tensor_scatter.pyx``).
"""

import math

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _tensor_scatter
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import TensorScatterParam

_MODES = ("linear", "circular")


class TensorScatterKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        past, update = io.inputs[0], io.inputs[1]
        indices = io.inputs[2] if len(io.inputs) > 2 else None
        present = io.outputs[0]
        dims = tuple(past.shape.dims)
        axis = self.op.axis(len(dims))
        step = _tensor_scatter.make_tensor_scatter_step(
            past.address, update.address if update.array.size else 0,
            indices.address if indices is not None else 0, present.address, dims[0],
            math.prod(dims[:axis]), dims[axis], update.shape.dims[axis],
            math.prod(dims[axis + 1:]) * past.shape.data_type.itemsize,
            self.param.mode == "circular", keep_arrays(io))
        step.label = self.node.name
        return step


@op("", "TensorScatter", since=24, param=TensorScatterParam)
class TensorScatterOp(X86OptKernel):
    """present_cache = past_cache with ``update`` written at each batch entry's write index."""

    supported_types = ANY_TYPE

    def axis(self, rank):
        """The sequence axis, in [1, rank)."""
        axis = self.param.axis
        if not -rank <= axis < rank or axis % rank == 0:
            raise ValueError(f"axis {axis} must name a dim of rank {rank} other than the batch "
                             "axis 0")
        return axis % rank

    def infer_type(self, in_types):
        if self.param.mode not in _MODES:
            raise self.unsupported(f"mode {self.param.mode!r}: expected 'linear' or 'circular'")
        out = super().infer_type(in_types)
        if in_types[1] is not in_types[0]:
            raise self.unsupported(f"update is {in_types[1]} but past_cache is {in_types[0]}; "
                                   "they must have one element type")
        if self.input_present(2) and in_types[2] is not DataType.INT64:
            raise self.unsupported(f"write_indices is {in_types[2]}; it must be int64")
        return out

    def infer_shape(self, in_shapes, in_values):
        past, update = tuple(in_shapes[0]), tuple(in_shapes[1])
        if len(past) < 2 or len(update) != len(past):
            raise self.shape_error("past_cache and update must have one rank, at least 2",
                                   in_shapes)
        try:
            axis = self.axis(len(past))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from None
        for i, (p, u) in enumerate(zip(past, update)):
            if i != axis and p != u:
                raise self.shape_error(f"update's dim {i} is {u}, past_cache's is {p}: they "
                                       f"may differ only along the sequence axis {axis}",
                                       in_shapes)
        if update[axis] > past[axis]:
            raise self.shape_error(f"update has {update[axis]} rows along axis {axis}, more "
                                   f"than the cache's {past[axis]}", in_shapes)
        indices = in_shapes[2] if len(in_shapes) > 2 else None
        if indices is not None and tuple(indices) != (past[0],):
            raise self.shape_error(f"write_indices must have shape [{past[0]}] (one index per "
                                   f"batch entry), got {list(indices)}", in_shapes)
        return [past]

    def create_kernel(self):
        return TensorScatterKernel(self)
