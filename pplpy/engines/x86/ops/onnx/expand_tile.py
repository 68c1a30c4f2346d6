"""Expand and Tile: outputs that repeat the input, any element type, as strided copies.

Expand broadcasts x to ``shape`` (numpy rules both ways: a 1 in ``shape`` keeps x's dim): a
broadcast dim reads with source stride 0.  Tile repeats x ``repeats[k]`` times along each dim
k: the output, viewed with each dim split into (repeat, dim), reads x with stride 0 on the
repeat part.  Tile-1 repeats one ``axis`` ``tiles`` times.  ``shape``, ``repeats``, ``tiles``
and ``axis`` decide the output shape and must be known when the plan is made.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import (
    check_index_type,
    contiguous_strides,
    ints_of,
    scalar_of,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import broadcast_shapes, normalize_axis


class RepeatKernel(DataMovementKernel):
    """A strided copy whose view of x the op context describes (``copy_view``)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        values = [s.array if s is not None else None for s in io.inputs]
        es = x.shape.data_type.itemsize
        dims, strides = self.op.copy_view([s.shape.dims if s else None for s in io.inputs],
                                          values, contiguous_strides(x.shape.dims, es))
        step = _copy.make_strided_copy_step(y.address, x.address, es, dims, strides)
        step.keep = keep_arrays(io)
        return step


@op("", "Expand", since=8)
class ExpandOp(X86OptKernel):
    """y = x broadcast with ``shape``."""

    supported_types = ANY_TYPE
    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "shape", (DataType.INT64,))
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        shape = ints_of(self, in_shapes, in_values, 1, "shape")
        try:
            return [broadcast_shapes(tuple(in_shapes[0]), tuple(shape))]
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def copy_view(self, in_shapes, in_values, x_strides):
        (out,) = self.infer_shape(in_shapes, in_values)
        dims = in_shapes[0]
        lead = len(out) - len(dims)
        strides = [0] * lead + [0 if d == 1 else s for d, s in zip(dims, x_strides)]
        return list(out), strides

    def create_kernel(self):
        return RepeatKernel(self)


@op("", "Tile", since=1)  # inputs tiles (a count) and axis
@op("", "Tile", since=6)  # input repeats, one count per dim
class TileOp(X86OptKernel):
    """y = numpy.tile(x, repeats)."""

    supported_types = ANY_TYPE
    value_inputs = (1, 2)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "repeats" if self.node.opset >= 6 else "tiles",
                         (DataType.INT64,) if self.node.opset >= 6 else
                         (DataType.INT64, DataType.INT32))
        return super().infer_type(in_types)[:1]

    def repeats(self, in_shapes, in_values):
        rank = len(in_shapes[0])
        if self.node.opset >= 6:
            reps = ints_of(self, in_shapes, in_values, 1, "repeats")
        else:
            tiles = int(scalar_of(self, in_shapes, in_values, 1, "tiles"))
            axis = int(scalar_of(self, in_shapes, in_values, 2, "axis"))
            try:
                axis = normalize_axis(axis, rank)
            except ValueError as exc:
                raise self.shape_error(str(exc), in_shapes) from exc
            reps = [1] * rank
            reps[axis] = tiles
        if len(reps) != rank or min(reps, default=0) < 0:
            raise self.shape_error(f"repeats {reps} must hold one non-negative count per dim "
                                   f"({rank})", in_shapes)
        return reps

    def infer_shape(self, in_shapes, in_values):
        reps = self.repeats(in_shapes, in_values)
        return [tuple(d * r for d, r in zip(in_shapes[0], reps))]

    def copy_view(self, in_shapes, in_values, x_strides):
        reps = self.repeats(in_shapes, in_values)
        dims, strides = [], []
        for d, r, s in zip(in_shapes[0], reps, x_strides):
            dims += [r, d]
            strides += [0, s]
        return dims, strides

    def create_kernel(self):
        return RepeatKernel(self)
