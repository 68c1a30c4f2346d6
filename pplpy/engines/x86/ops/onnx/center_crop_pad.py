"""CenterCropPad's op context (opset 18): crop or zero-pad the chosen axes to ``shape``,
centred, for any element type.

A crop starts at (dim - target) // 2 (the window sits half a pixel left of centre when the
difference is odd); a pad puts (target - dim) // 2 zeros before and the rest, the odd one
included, after.  ``shape`` decides the output shape and must be known when the plan is
made.  Cropping and padding are Pad's constant mode with negative (crop) or positive pads,
so the step is Pad's table copy (``impls/_copy.pyx``).  NDARRAY.
"""

import numpy as np

from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, ints_of
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import CenterCropPadParam


class CenterCropPadKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        pads = self.op.pads([s.shape.dims for s in io.inputs], [s.array for s in io.inputs])
        dims = x.shape.dims
        zero = np.zeros(1, x.shape.data_type.numpy)
        tables = [_copy.pad_table(d, b, e, "constant") for d, (b, e) in zip(dims, pads)]
        step = _copy.make_pad_step(y.address, x.address, zero.ctypes.data,
                                   x.shape.data_type.itemsize, dims, tables)
        step.keep = (step.keep, zero, keep_arrays(io))
        return step


@op("", "CenterCropPad", since=18, param=CenterCropPadParam)
class CenterCropPadOp(X86OptKernel):
    """y = input cropped or zero-padded, centred, to ``shape`` along ``axes``."""

    supported_types = ANY_TYPE
    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "shape")
        return super().infer_type(in_types)

    def pads(self, in_shapes, in_values):
        """(begin, end) per dim of the input: negative crops, positive pads with zeros."""
        dims = in_shapes[0]
        rank = len(dims)
        shape = ints_of(self, in_shapes, in_values, 1, "shape (the target dims, which decide "
                        "the output shape)")
        axes = self.param.axes if self.param.axes is not None else range(rank)
        try:
            axes = [normalize_axis(a, rank) for a in axes]
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"axes {list(self.param.axes)} repeat an axis", in_shapes)
        if len(shape) != len(axes):
            raise self.shape_error(f"shape {shape} must hold one dim per axis ({len(axes)} "
                                   f"axes)", in_shapes)
        if any(s < 0 for s in shape):
            raise self.shape_error(f"shape {shape} must be non-negative", in_shapes)
        pads = [(0, 0)] * rank
        for axis, target in zip(axes, shape):
            diff = target - dims[axis]
            if diff >= 0:
                pads[axis] = (diff // 2, diff - diff // 2)
            else:
                cut = -diff
                pads[axis] = (-(cut // 2), -(cut - cut // 2))
        return pads

    def infer_shape(self, in_shapes, in_values):
        pads = self.pads(in_shapes, in_values)
        return [tuple(d + b + e for d, (b, e) in zip(in_shapes[0], pads))]

    def create_kernel(self):
        return CenterCropPadKernel(self)
