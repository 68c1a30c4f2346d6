"""Concat's kernel: numpy concatenation in NDARRAY; channel concatenation in N16CX.

In N16CX, logical channel c of (N, C, *S) lives at [n, c // 16, s, c % 16] of the blocked
(N, ceil(C/16), S, 16) array.  That map is not affine in c when S > 1, so no strided view
presents the channels as one axis; instead each input's channel range is copied with at
most four block-aligned slice assignments (see ``copy_channels_n16cx``).
"""

import numpy as np

from pplpy.common.data_format import N16CX_BLOCK, DataFormat
from pplpy.engines.x86.kernels.layout import as_blocked_3d
from pplpy.engines.x86.kernels.onnx.shape_kernels import DataMovementKernel
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
