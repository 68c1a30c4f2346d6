"""InstanceNormalization and GroupNormalization: statistics per (image, channel) plane or
per (image, group of channels), then a per-channel (or, for GroupNormalization-18,
per-group) scale and bias.

    InstanceNormalization  y = (x - mean[n, c]) / sqrt(var[n, c] + epsilon) * scale[c] + B[c]
    GroupNormalization     y = (x - mean[n, g]) / sqrt(var[n, g] + epsilon) * scale + bias

Both also run on N16CX (16 channels' statistics at once) when scale and bias are constants,
so a CNN stays blocked: GroupNormalization is how PyTorch's GroupNorm reaches the engine once
recognize_group_norm has put its exported Reshape / InstanceNormalization / Reshape back
together (PoolFormer, diffusion U-Nets).
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import ShapeCache, X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.models.onnx.registry import attribute_values, generic_parse
from pplpy.params.onnx import GroupNormalizationParam, InstanceNormalizationParam


def parse_instance_norm_1(node_proto, opset):
    """InstanceNormalization-1 may carry the legacy ``consumed_inputs`` hint: no effect."""
    values = attribute_values(node_proto)
    return InstanceNormalizationParam(epsilon=float(values.get("epsilon", 1e-5)))


def parse_group_norm_18(node_proto, opset):
    """GroupNormalization-18 has no ``stash_type`` (statistics in the input type)."""
    return generic_parse(GroupNormalizationParam, node_proto)


class ChannelNormKernel(X86Kernel):
    """Rows of the impl's row normalisation (NDARRAY), or its three N16CX steps (moments per
    chunk of a channel block, each group's statistics, the affine map)."""

    def __init__(self, op_ctx, groups_of):
        super().__init__(op_ctx)
        self.groups_of = groups_of  # C -> number of groups (C for instance normalisation)
        self.weights = {i: np.ascontiguousarray(op_ctx.constant(i), np.float32)
                        for i in (1, 2) if op_ctx.constant(i) is not None}
        self.packed_inputs = tuple(self.weights)
        self._padded = ShapeCache()  # (channel blocks, C) -> scale, bias padded to them

    def _weight(self, io, index, keep):
        if index in self.weights:
            array = self.weights[index]
        else:
            array = io.inputs[index].array
        keep.append(array)
        return array.__array_interface__["data"][0]

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x_shape = io.inputs[0].shape
        dims = x_shape.dims
        N, C, S = dims[0], dims[1], math.prod(dims[2:])
        G = self.groups_of(C)
        impl = self.impl("layernorm_fp32")
        keep = [io.inputs[0].array, io.outputs[0].array]
        eps = float(self.param.epsilon)
        if x_shape.data_format is DataFormat.N16CX:
            blocks = x_shape.physical_dims[1]
            if (1, 2) != tuple(sorted(self.weights)):
                raise self.op.unsupported("N16CX needs constant scale and bias")
            # per channel (GroupNormalization-18's per-group values repeated), padded
            scale, bias = self._padded.get((blocks, C), lambda: tuple(
                np.pad(np.repeat(w, C // w.size), (0, blocks * 16 - C))
                for w in (self.weights[1], self.weights[2])))
            scratch = np.empty(impl.blocked_norm_scratch(N, blocks, S), np.float64)
            keep += [scale, bias, scratch]
            return impl.make_blocked_norm_steps(
                io.inputs[0].address, io.outputs[0].address,
                scale.__array_interface__["data"][0], bias.__array_interface__["data"][0],
                scratch.__array_interface__["data"][0], N, blocks, S, C, G, eps, keep)
        per_channel = io.inputs[1].shape.element_count == C if 1 not in self.weights \
            else self.weights[1].size == C
        n = C // G * S
        segs, seg = (C // G, S) if per_channel else (1, n)
        return impl.make_row_norm_step(
            io.inputs[0].address, io.outputs[0].address, 0, 0, self._weight(io, 1, keep),
            self._weight(io, 2, keep), N * G, n, G, segs, seg, eps, False, io.num_threads,
            None, keep)


class _ChannelNormOp(X86OptKernel):
    """Both ops run on N16CX (16 channels' statistics at once) when x comes blocked and scale
    and bias are constants, so a CNN's blocks stay blocked; NDARRAY otherwise."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def select_format(self, in_formats, in_shapes):
        fmt = in_formats[0]
        if fmt is not DataFormat.N16CX or in_shapes[0] is None or len(in_shapes[0]) < 3 \
                or self.constant(1) is None or self.constant(2) is None:
            fmt = DataFormat.NDARRAY
        return [fmt, DataFormat.NDARRAY, DataFormat.NDARRAY], [fmt]

    def infer_type(self, in_types):
        for index, data_type in enumerate(in_types):
            if data_type is not None and data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {index} is {data_type}; pplpy normalises "
                                       "float32 only")
        if getattr(self.param, "stash_type", 1) != 1:
            raise self.unsupported(f"stash_type={self.param.stash_type}; pplpy computes the "
                                   "statistics in float32 (stash_type=1) only")
        return [DataType.FLOAT32]

    def weights_length(self, channels, in_shapes):
        return channels

    def infer_shape(self, in_shapes, in_values):
        x = tuple(in_shapes[0])
        if len(x) < 2:
            raise self.shape_error("X must be (N, C, ...)", in_shapes)
        want = self.weights_length(x[1], in_shapes)
        for index, name in ((1, "scale"), (2, "bias")):
            if in_shapes[index] is None or tuple(in_shapes[index]) != (want,):
                raise self.shape_error(f"{name} must have shape [{want}]", in_shapes)
        return [x]


@op("", "InstanceNormalization", since=1, param=InstanceNormalizationParam,
    parse=parse_instance_norm_1)
@op("", "InstanceNormalization", since=6, param=InstanceNormalizationParam)
class InstanceNormalizationOp(_ChannelNormOp):
    """y = (x - mean) / sqrt(var + epsilon) * scale[c] + B[c], statistics per (n, c) over
    the spatial dims."""

    def create_kernel(self):
        return ChannelNormKernel(self, lambda channels: channels)


@op("", "GroupNormalization", since=18, param=GroupNormalizationParam,
    parse=parse_group_norm_18)  # scale and bias per group
@op("", "GroupNormalization", since=21, param=GroupNormalizationParam)  # per channel
class GroupNormalizationOp(_ChannelNormOp):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias, statistics per (n, group of
    C / num_groups channels); scale and bias per group before opset 21, per channel after."""

    def weights_length(self, channels, in_shapes):
        groups = self.param.num_groups
        if groups < 1 or channels % groups:
            raise self.shape_error(f"num_groups={groups} must divide the {channels} channels",
                                   in_shapes)
        return groups if self.onnx_opset < 21 else channels

    def create_kernel(self):
        return ChannelNormKernel(self, lambda channels: self.param.num_groups)
