"""Concat's op context: any element type in NDARRAY; float32 channel concatenation stays
in N16CX when every input arrives in N16CX, so a Conv -> Concat -> Conv chain needs no
reorders."""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_format import N16CX_BLOCK, DataFormat
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import ConcatParam
from pplpy.engines.x86.ops.layout import as_blocked_3d
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import concat_shape, normalize_axis
from pplpy.oputils.onnx.shape_functions import normalize_axis


B = N16CX_BLOCK


def copy_channels_n16cx(x, channels, y, offset):
    """Copy the ``channels`` logical channels of blocked ``x`` (N, Kx, S, 16) into blocked
    ``y`` (N, Ky, S, 16) at logical channels [offset, offset + channels).

    Input channel j = 16k + l goes to output channel offset + j: with o = offset % 16 and
    b = offset // 16, lanes l < 16 - o land in block b + k at lane o + l, the rest in block
    b + k + 1 at lane l - (16 - o).  Full input blocks move in two slices, the partial last
    block in two more.
    """
    b, o = divmod(offset, B)
    full, rest = divmod(channels, B)
    head = B - o  # lanes of an input block that fit in the output block they start in
    if full:
        y[:, b:b + full, :, o:] = x[:, :full, :, :head]
        if o:
            y[:, b + 1:b + 1 + full, :, :o] = x[:, :full, :, head:]
    if rest:
        first = min(rest, head)
        y[:, b + full, :, o:o + first] = x[:, full, :, :first]
        if rest > head:
            y[:, b + full + 1, :, :rest - head] = x[:, full, :, head:rest]


def concat_channels_n16cx(inputs, input_shapes, output, output_shape):
    """Channel concatenation of N16CX tensors into the N16CX ``output``; the output's
    padding lanes are zeroed so they stay finite."""
    y = as_blocked_3d(output, output_shape)
    offset = 0
    for x, shape in zip(inputs, input_shapes):
        channels = shape.dims[1]
        copy_channels_n16cx(as_blocked_3d(x, shape), channels, y, offset)
        offset += channels
    tail = offset % B
    if tail:
        y[:, -1, :, tail:] = 0


class ConcatKernel(DataMovementKernel):
    def do_execute(self, ctx):
        out_shape = ctx.output_shapes[0]
        if out_shape.data_format is DataFormat.N16CX:
            concat_channels_n16cx(ctx.inputs, ctx.input_shapes, ctx.outputs[0], out_shape)
            return
        axis = normalize_axis(self.param.axis, out_shape.rank)
        np.concatenate(ctx.inputs, axis=axis, out=ctx.outputs[0])


@op("", "Concat", since=4, param=ConcatParam)  # axis is required from 4
class ConcatOp(X86OptKernel):
    """y = concatenate(inputs, axis); inputs share their type and all dims but ``axis``."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    supported_types = ANY_TYPE

    def infer_type(self, in_types):
        (data_type,) = super().infer_type(in_types)
        others = [(i, t) for i, t in enumerate(in_types) if t is not data_type]
        if others:
            got = ", ".join(f"input {i} is {t}" for i, t in others)
            raise ShapeError(f"{self.node.describe()}: all inputs must have input 0's type "
                             f"{data_type}; {got}")
        return [data_type]

    def infer_shape(self, in_shapes, in_values):
        if any(s is None for s in in_shapes):
            raise self.shape_error("every input must be given (no empty names)", in_shapes)
        try:
            out, _ = concat_shape(in_shapes, self.param.axis)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [out]

    def select_format(self, in_formats, in_shapes):
        """N16CX when every input is N16CX, rank >= 3 and the axis is the channel axis."""
        n = len(in_formats)
        if all(f is DataFormat.N16CX for f in in_formats) and self._is_channel_concat(in_shapes):
            return [DataFormat.N16CX] * n, [DataFormat.N16CX]
        return [DataFormat.NDARRAY] * n, [DataFormat.NDARRAY]

    def _is_channel_concat(self, in_shapes):
        first = in_shapes[0] if in_shapes else None
        if first is None or len(first) < 3:
            return False
        try:
            return normalize_axis(self.param.axis, len(first)) == 1
        except ValueError:
            return False

    def create_kernel(self):
        return ConcatKernel(self)
