"""DeformConv's op context (opsets 19 and 22): a convolution whose kernel taps move.

Tap k of output point o reads X at its usual position o * stride - pad + k * dilation moved
by offset[n, (g, k, :), o] (g the offset group of the input channel), interpolated
(multilinear, zeros outside X) and scaled by mask[n, (g, k), o] when a mask is given; then
the taps are multiplied by W as in a grouped Conv, plus B.  22 only adds bfloat16.

Compiled steps, a barrier between them: sampling every (channel, tap, output point) into a
column buffer (``impls/_spatial_fp32.pxi``), then W times the columns of each (batch entry,
group) as one batched GEMM (the GEMM family), then B added per output channel (the norm
family's channel affine).  1 to 3 spatial dims, float32, NDARRAY.
"""

import numpy as np

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import prod
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.onnx.spatial_common import SPATIAL_FAMILY, check_float32, window
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import DeformConvParam

_INPUTS = {0: "X", 1: "W", 2: "offset", 3: "B", 4: "mask"}
_MAX_SPATIAL = 3


def _optional(io, index):
    return io.inputs[index] if index < len(io.inputs) else None


class DeformConvKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, w, offset, y = io.inputs[0], io.inputs[1], io.inputs[2], io.outputs[0]
        bias, mask = _optional(io, 3), _optional(io, 4)
        geometry = self.op.geometry([s.shape.dims if s is not None else None
                                     for s in io.inputs])
        n, c = x.shape.dims[:2]
        oc, group = w.shape.dims[0], self.param.group
        kernel, points = prod(geometry.kernel), prod(geometry.out)
        cols = np.empty(n * c * kernel * points, np.float32)
        keep = (cols, keep_arrays(io))
        steps = [self.impl(SPATIAL_FAMILY).make_deform_sample_step(
            x.address, offset.address, mask.address if mask is not None else 0,
            cols.ctypes.data, tuple(x.shape.dims), geometry.kernel, geometry.out,
            geometry.strides, geometry.dilations, geometry.pads_begin,
            self.param.offset_group, keep=keep)]
        # Entry (b, g) of a batched GEMM: y[b, rows of group g] = W[rows of g] @ cols[b, g],
        # (oc / group) x depth times depth x points.
        rows, depth = oc // group, c // group * kernel
        entry = np.arange(n * group)
        steps.append(self.impl("gemm_fp32").make_gemm_step(
            w.address, cols.ctypes.data, y.address, rows, depth, points, io.num_threads,
            batch=n * group, a_offsets=entry % group * rows * depth,
            b_offsets=entry * depth * points, b_packed=False, keep=keep))
        if bias is not None:
            ones = np.ones(oc, np.float32)
            steps.append(self.impl("norm_fp32").make_channel_affine_ndarray_step(
                y.address, ones.ctypes.data, bias.address, y.address, n, oc, points,
                keep=(ones, keep)))
        return steps


@op("", "DeformConv", since=19, param=DeformConvParam)
@op("", "DeformConv", since=22, param=DeformConvParam)  # adds bfloat16 (not a pplpy type)
class DeformConvOp(X86OptKernel):
    """y = conv(X sampled at offset taps * mask, W, group) + B."""

    def infer_type(self, in_types):
        check_float32(self, in_types, _INPUTS)
        return super().infer_type(in_types)

    def geometry(self, in_shapes):
        """The PoolWindow of W's kernel over X's spatial dims."""
        x, w = in_shapes[:2]
        rank = len(x) - 2
        if rank < 1:
            raise self.shape_error("X must be (N, C, D1, ..., Dr) with r >= 1 spatial dims",
                                   in_shapes)
        if rank > _MAX_SPATIAL:
            raise self.unsupported(f"{rank} spatial dims: pplpy runs 1 to {_MAX_SPATIAL}")
        if len(w) != len(x):
            raise self.shape_error(f"W must have X's rank {len(x)}: (oc, C / group, "
                                   f"*kernel)", in_shapes)
        kernel = self.param.kernel_shape
        if kernel is not None and tuple(kernel) != tuple(w[2:]):
            raise self.shape_error(f"kernel_shape {list(kernel)} differs from W's "
                                   f"{list(w[2:])}", in_shapes)
        return window(self, in_shapes, x[2:], w[2:], self.param)

    def infer_shape(self, in_shapes, in_values):
        x, w, offset = in_shapes[:3]
        geometry = self.geometry(in_shapes)
        group, groups = self.param.group, self.param.offset_group
        n, c, oc = x[0], x[1], w[0]
        if group < 1 or c != w[1] * group or oc % group:
            raise self.shape_error(f"channels do not match: X has {c}, W expects {w[1]} x "
                                   f"group {group}, and W's {oc} outputs must divide by "
                                   f"group", in_shapes)
        if groups < 1 or c % groups:
            raise self.shape_error(f"X's {c} channels must divide by offset_group {groups}",
                                   in_shapes)
        kernel, rank, out = prod(geometry.kernel), len(x) - 2, tuple(geometry.out)
        want = (n, groups * kernel * rank) + out
        if tuple(offset) != want:
            raise self.shape_error(f"offset must have shape {list(want)} (N, offset_group * "
                                   f"kernel taps * {rank} coordinates, *output dims)",
                                   in_shapes)
        if len(in_shapes) > 3 and in_shapes[3] is not None and tuple(in_shapes[3]) != (oc,):
            raise self.shape_error(f"B must have shape [{oc}]", in_shapes)
        want = (n, groups * kernel) + out
        if len(in_shapes) > 4 and in_shapes[4] is not None and tuple(in_shapes[4]) != want:
            raise self.shape_error(f"mask must have shape {list(want)} (N, offset_group * "
                                   f"kernel taps, *output dims)", in_shapes)
        return [(n, oc) + out]

    def create_kernel(self):
        return DeformConvKernel(self)
