"""Gather's op context: y = take(data, indices, axis) for any element type, int32 or int64
indices, negative indices counting from the end (opset 11 allowed them; pplpy accepts them
at every opset, as onnx's reference does).

Out-of-range indices are an error: a ShapeError when the indices are known when the plan
is made (constants, host-computed values); for indices computed at run time the step
zero-fills the row, never reads outside ``data``, and records the index, and the run raises
an InputError naming it (a ``ppl_fault``; see pplpy_step.h), as ONNX Runtime refuses them.
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import gather_shape, normalize_axis
from pplpy.params.onnx import GatherParam

INDEX_TYPES = (DataType.INT32, DataType.INT64)


def check_indices(op, indices, dim, in_shapes):
    """Raise a ShapeError naming the first index outside [-dim, dim)."""
    flat = np.asarray(indices).reshape(-1)
    bad = flat[(flat < -dim) | (flat >= dim)]
    if bad.size:
        raise op.shape_error(f"index {int(bad[0])} is out of range for axis "
                             f"{op.axis_of(in_shapes)} of size {dim} (valid: -{dim} to "
                             f"{dim - 1})", in_shapes)


class GatherKernel(DataMovementKernel):
    """Rows of data (the dims after ``axis``) as block copies, one per (outer, index)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        data, indices, y = io.inputs[0], io.inputs[1], io.outputs[0]
        dims = data.shape.dims
        axis = normalize_axis(self.param.axis if self.param else 0, len(dims))
        known = self.op.constant(1)
        if known is not None:
            check_indices(self.op, known, dims[axis], io.input_shapes)
        es = data.shape.data_type.itemsize
        step = _copy.make_gather_step(
            y.address, data.address, indices.address, indices.shape.data_type.itemsize,
            math.prod(dims[:axis]), dims[axis], indices.shape.element_count,
            math.prod(dims[axis + 1:]) * es)
        step.keep = keep_arrays(io)
        return step


@op("", "Gather", since=1, param=GatherParam)  # 11: negative indices; 13: bfloat16
class GatherOp(X86OptKernel):
    """y[i_0..i_{a-1}, j..., k...] = data[i_0..i_{a-1}, indices[j...], k...]."""

    supported_types = ANY_TYPE

    def axis_of(self, in_shapes):
        return normalize_axis(self.param.axis if self.param else 0, len(in_shapes[0]))

    def infer_type(self, in_types):
        if len(in_types) < 2 or in_types[1] not in INDEX_TYPES:
            got = in_types[1] if len(in_types) > 1 else None
            raise ShapeError(f"{self.node.describe()}: indices (input 1) must be int32 or "
                             f"int64, got {got}")
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        data, indices = in_shapes[0], in_shapes[1]
        try:
            out, axis = gather_shape(data, indices, self.param.axis if self.param else 0)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        if len(in_values) > 1 and in_values[1] is not None:
            check_indices(self, in_values[1], data[axis], in_shapes)
        return [out]

    def create_kernel(self):
        return GatherKernel(self)
