"""Compress's op context: the slices of the input along ``axis`` (or the elements of the
flattened input, without ``axis``) whose entry in the bool ``condition`` is true.

The output's length is the number of true entries, so the condition must be known when the
plan is made (a constant, a fed input, or a value computed on the host), as NonZero's input;
otherwise the plan fails with an UnsupportedOpError that says so.  With the condition known,
Compress is a Gather with constant indices: the step is Gather's row copy, fed the positions
of the true entries.  A condition shorter than the axis drops the rest (numpy.compress); a
true entry past the end of the axis is a ShapeError.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, prod, value_of
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import CompressParam


class CompressKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, condition, y = io.inputs[0], io.inputs[1], io.outputs[0]
        dims = x.shape.dims
        axis, picked = self.op.selection([dims, condition.shape.dims],
                                         [None, condition.array])
        outer, length, inner = self.op.view(dims, axis)
        step = _copy.make_gather_step(y.address, x.address, picked.ctypes.data, 8, outer,
                                      length, picked.size, inner * x.shape.data_type.itemsize)
        step.keep = (picked, keep_arrays(io))
        return step


@op("", "Compress", since=9, param=CompressParam)
@op("", "Compress", since=11, param=CompressParam)  # negative axis
class CompressOp(X86OptKernel):
    """y = numpy.compress(condition, x, axis), any element type."""

    supported_types = ANY_TYPE
    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "condition", (DataType.BOOL,))
        return super().infer_type(in_types)[:1]

    def selection(self, in_shapes, in_values):
        """(axis or None, int64 positions of the true entries) for these inputs."""
        dims = in_shapes[0]
        condition = np.asarray(value_of(self, in_values, 1, "condition (its true entries "
                                        "decide the output shape)"))
        if condition.ndim != 1:
            raise self.shape_error(f"condition must be 1-D, got shape "
                                   f"{list(condition.shape)}", in_shapes)
        axis = self.param.axis
        if axis is not None:
            if axis < 0 and self.node.opset < 11:
                raise self.shape_error(f"axis {axis}: a negative axis needs opset 11",
                                       in_shapes)
            try:
                axis = normalize_axis(axis, len(dims))
            except ValueError as exc:
                raise self.shape_error(str(exc), in_shapes) from exc
        length = self.view(dims, axis)[1]
        picked = np.flatnonzero(condition).astype(np.int64)
        if picked.size and picked[-1] >= length:
            where = "the flattened input" if axis is None else f"axis {axis}"
            raise self.shape_error(f"condition is true at entry {int(picked[-1])}, past the "
                                   f"end of {where} (length {length})", in_shapes)
        return axis, picked

    @staticmethod
    def view(dims, axis):
        """(outer, length, inner) of the input around ``axis`` (None: flattened)."""
        if axis is None:
            return 1, prod(dims), 1
        return prod(dims[:axis]), dims[axis], prod(dims[axis + 1:])

    def infer_shape(self, in_shapes, in_values):
        axis, picked = self.selection(in_shapes, in_values)
        if axis is None:
            return [(picked.size,)]
        dims = tuple(in_shapes[0])
        return [dims[:axis] + (picked.size,) + dims[axis + 1:]]

    def create_kernel(self):
        return CompressKernel(self)
