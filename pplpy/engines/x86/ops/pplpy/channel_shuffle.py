"""ChannelShuffle (pplpy domain): ShuffleNet's Reshape(N, g, C/g, ...) -> Transpose(0, 2, 1,
...) -> Reshape(N, C, ...) as one node, which the graph optimiser's recognize_channel_shuffle
pass writes.  As one node it keeps N16CX: output channel c is input channel
(c % g) * (C / g) + c // g, a channel map the N16CX copy step runs without leaving the
blocked layout, so a ShuffleNet needs no reorder between its convolutions.
"""

import math

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import n16cx_channel_step
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.x86 import ChannelShuffleParam


def shuffle_sources(channels, group):
    """The input channel each output channel copies."""
    per = channels // group
    return [(c % group) * per + c // group for c in range(channels)]


class ChannelShuffleKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = x.shape.dims
        n, c, pixels = dims[0], dims[1], math.prod(dims[2:])
        g, es = self.op.param.group, x.shape.data_type.itemsize
        if x.shape.data_format is DataFormat.N16CX:
            return n16cx_channel_step(self, y, x, shuffle_sources(c, g))
        # NDARRAY: (N, g, C/g, S) read as (N, C/g, g, S)
        out_dims, strides = _copy.transpose_strides([n, g, c // g, pixels], [0, 2, 1, 3], es)
        step = _copy.make_strided_copy_step(y.address, x.address, es, out_dims, strides)
        step.keep = (step.keep, x.array, y.array)
        return step


@op("pplpy", "ChannelShuffle", since=1, param=ChannelShuffleParam)
class ChannelShuffleOp(X86OptKernel):
    """y = x with its channels as (group, C/group) transposed; NDARRAY or N16CX."""

    supported_types = (DataType.FLOAT32,)
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def infer_shape(self, in_shapes, in_values):
        dims = in_shapes[0]
        g = self.param.group
        if len(dims) < 3:
            raise self.shape_error(f"needs an (N, C, ...) input of rank >= 3, got rank "
                                   f"{len(dims)}", in_shapes)
        if g < 1 or (isinstance(dims[1], int) and dims[1] % g):
            raise self.shape_error(f"group {g} must be >= 1 and divide the channels "
                                   f"{dims[1]}", in_shapes)
        return [tuple(dims)]

    def select_format(self, in_formats, in_shapes):
        fmt = DataFormat.N16CX if in_formats[0] is DataFormat.N16CX else DataFormat.NDARRAY
        return [fmt], [fmt]

    def create_kernel(self):
        return ChannelShuffleKernel(self)
