"""Slice's op context: y = x[start:end:step] along chosen axes, any element type.

Opset 1-9 take starts, ends and axes as attributes; from 10 they are inputs, with steps.
Starts and ends are clamped to the dim (negative ones count from the back), steps may be
negative.  Their values decide the output shape, so they must be known when the plan is made
(``value_inputs``: constants, fed inputs or host-computed values).  The kernel is a strided
copy step: the source strides are the input's strides times the steps.  A slice of only the
channel axis of an N16CX float32 tensor (ShuffleNet's chunk) stays blocked as a channel map,
and a slice of batch and spatial axes as a strided copy of whole channel blocks, so the
convolutions around either need no reorder.
"""

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import n16cx_channel_step
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, constant_vector, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import PplError, ShapeError
from pplpy.oputils.onnx.shape_functions import slice_geometry
from pplpy.params.onnx import SliceParam

INDEX_TYPES = (DataType.INT32, DataType.INT64)
NAMES = {1: "starts", 2: "ends", 3: "axes", 4: "steps"}


class SliceKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = x.shape.dims
        # starts/ends/axes/steps are constants, host values or value-deciding feeds: all hold
        # their values when the step is made.
        values = [s.array if s is not None else None for s in io.inputs]
        out_dims, firsts, steps = self.op.geometry(
            [s.shape.dims if s is not None else None for s in io.inputs], values)
        blocked = x.shape.data_format is DataFormat.N16CX
        if blocked and (firsts[1], steps[1], out_dims[1]) != (0, 1, dims[1]):
            # The channel axis alone is sliced (see select_format): a channel map.
            return n16cx_channel_step(self, y, x, [firsts[1] + k * steps[1]
                                                   for k in range(out_dims[1])])
        if blocked:  # batch or spatial axes of (N, C/16, *S, 16): whole blocks, all lanes
            dims, out = x.shape.physical_dims, y.shape.physical_dims
            firsts = [firsts[0], 0, *firsts[2:], 0]
            steps = [steps[0], 1, *steps[2:], 1]
        else:
            out = y.shape.dims
        es = x.shape.data_type.itemsize
        strides, s = [0] * len(dims), es
        for k in range(len(dims) - 1, -1, -1):
            strides[k] = s
            s *= dims[k]
        base = x.address + sum(f * st for f, st in zip(firsts, strides))
        step = _copy.make_strided_copy_step(y.address, base, es, list(out),
                                            [st * k for st, k in zip(strides, steps)])
        step.keep = keep_arrays(io)
        return step


@op("", "Slice", since=1, param=SliceParam)  # starts, ends, axes attributes
@op("", "Slice", since=10)  # starts, ends, axes, steps inputs
class SliceOp(X86OptKernel):
    """y = x[starts[i]:ends[i]:steps[i] on axes[i]]."""

    supported_types = ANY_TYPE
    value_inputs = (1, 2, 3, 4)
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def infer_type(self, in_types):
        if self.node.opset >= 10:
            for index, what in NAMES.items():
                if self.input_present(index) and in_types[index] not in INDEX_TYPES:
                    raise ShapeError(f"{self.node.describe()}: input {index} ({what}) must be "
                                     f"int32 or int64, got {in_types[index]}")
        return super().infer_type(in_types)[:1]

    def geometry(self, in_shapes, in_values):
        """(output dims, first index per dim, step per dim)."""
        if self.node.opset >= 10:
            args = [constant_vector(self, in_shapes, in_values, i, NAMES[i])
                    if self.input_present(i) else None for i in (1, 2, 3, 4)]
        else:
            param = self.param
            if param is None or param.starts is None or param.ends is None:
                raise self.shape_error('attributes "starts" and "ends" are required',
                                       in_shapes)
            args = [param.starts, param.ends, param.axes, None]
        try:
            return slice_geometry(in_shapes[0], *args)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def infer_shape(self, in_shapes, in_values):
        return [self.geometry(in_shapes, in_values)[0]]

    def select_format(self, in_formats, in_shapes):
        """N16CX for a blocked input sliced on its channel axis only (bounds known now: a
        channel map) or on batch and spatial axes only (a strided copy of whole blocks);
        NDARRAY otherwise."""
        plain = [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY]
        dims = in_shapes[0]
        if in_formats[0] is not DataFormat.N16CX or dims is None or len(dims) < 3:
            return plain
        if self.node.opset >= 10:
            starts, axes = self.constant(1), self.constant(3)
            if self.input_present(3) and axes is None:
                return plain
            if axes is None:
                if starts is None:
                    return plain
                axes = range(starts.size)
            axes = axes.reshape(-1).tolist() if hasattr(axes, "reshape") else list(axes)
        else:
            p = self.param
            if p is None or p.starts is None:
                return plain
            axes = p.axes if p.axes is not None else range(len(p.starts))
        axes = {a + len(dims) if a < 0 else a for a in axes}
        blocked = [DataFormat.N16CX] + plain[0][1:], [DataFormat.N16CX]
        if 1 not in axes:
            return blocked
        if axes != {1}:
            return plain
        values = [self.constant(i) for i in range(len(in_formats))]
        try:
            self.geometry(in_shapes, values)
        except (PplError, ValueError, TypeError):  # channel bounds unknown until a plan
            return plain
        return blocked

    def create_kernel(self):
        return SliceKernel(self)
