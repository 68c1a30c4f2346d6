"""Op contexts of BatchNormalization (inference), LRN and Softmax."""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.canned import follow_input_format
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import BatchNormalizationParam, LRNParam, SoftmaxParam
from pplpy.models.onnx.parsers.encodings import parse_softmax, parse_softmax_coerced
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_blocked_3d, as_ndarray_3d
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis


class BatchNormalizationKernel(X86Kernel):
    def do_execute(self, ctx):
        # Fold the four per-channel vectors into one affine map (C values: numpy glue).
        scale, bias, mean, var = (np.asarray(a, np.float32) for a in ctx.inputs[1:5])
        a = (scale / np.sqrt(var + np.float32(self.param.epsilon))).astype(np.float32)
        b = (bias - mean * a).astype(np.float32)
        impl = self.impl("norm_fp32")
        shape = ctx.input_shapes[0]
        if shape.data_format is DataFormat.N16CX:
            pad = shape.padded_channels - shape.dims[1]
            a = np.pad(a, (0, pad))
            b = np.pad(b, (0, pad))
            impl.channel_affine_n16cx_fp32(as_blocked_3d(ctx.inputs[0], shape), a, b,
                                           as_blocked_3d(ctx.outputs[0], shape), ctx.num_threads)
        else:
            impl.channel_affine_ndarray_fp32(_as_nc_s(ctx.inputs[0], shape), a, b,
                                             _as_nc_s(ctx.outputs[0], shape), ctx.num_threads)


def _as_nc_s(array, shape):
    if len(shape.dims) == 2:
        return array.reshape(shape.dims[0], shape.dims[1], 1)
    return as_ndarray_3d(array, shape)


class LRNKernel(X86Kernel):
    def do_execute(self, ctx):
        p = self.param
        shape = ctx.input_shapes[0]
        self.impl("norm_fp32").lrn_fp32(
            as_ndarray_3d(ctx.inputs[0], shape), as_ndarray_3d(ctx.outputs[0], shape),
            int(p.size), float(p.alpha), float(p.beta), float(p.bias), ctx.num_threads)


class SoftmaxKernel(X86Kernel):
    def do_execute(self, ctx):
        dims = ctx.input_shapes[0].dims or (1,)
        axis = self.param.axis % len(dims)
        if self.node.opset < 13:
            # Coerced to 2-D: [prod(dims[:axis]), prod(dims[axis:])], softmax over rows.
            view = (math.prod(dims[:axis]), math.prod(dims[axis:]), 1)
        else:
            view = (math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:]))
        self.impl("norm_fp32").softmax_fp32(ctx.inputs[0].reshape(view),
                                           ctx.outputs[0].reshape(view), ctx.num_threads)


@op("", "BatchNormalization", since=7, param=BatchNormalizationParam)
class BatchNormalizationOp(X86OptKernel):
    """y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]; any format."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format

    def infer_type(self, in_types):
        if self.param.training_mode:
            raise self.unsupported("training_mode=1 (batch statistics) is not supported; "
                                   "pplpy runs inference")
        if not self.param.spatial:
            raise self.unsupported("spatial=0 (per-activation statistics) is not supported")
        if len([o for o in self.node.outputs if o]) > 1:
            raise self.unsupported("running mean/var outputs exist only in training mode")
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        x = in_shapes[0]
        if len(x) < 2:
            raise self.shape_error("input must be (N, C, ...)", in_shapes)
        for index, name in enumerate(("scale", "B", "mean", "var"), start=1):
            if in_shapes[index] is None or tuple(in_shapes[index]) != (x[1],):
                raise self.shape_error(f"{name} must have shape [{x[1]}] (one per channel)",
                                       in_shapes)
        return [x]

    def create_kernel(self):
        return BatchNormalizationKernel(self)


@op("", "LRN", since=1, param=LRNParam)
class LRNOp(X86OptKernel):
    """Local response normalisation across channels (NDARRAY: it reads neighbour channels)."""

    def infer_shape(self, in_shapes, in_values):
        if len(in_shapes[0]) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if self.param.size < 1:
            raise self.shape_error(f"size must be >= 1, got {self.param.size}", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return LRNKernel(self)


@op("", "Softmax", since=1, param=SoftmaxParam, parse=parse_softmax_coerced)  # flattens to 2-D
@op("", "Softmax", since=13, param=SoftmaxParam, parse=parse_softmax)  # one axis
class SoftmaxOp(X86OptKernel):
    """Before opset 13, softmax over the 2-D coercion at ``axis``; from 13, along ``axis``."""

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        rank = max(len(shape), 1)
        normalize_axis(self.param.axis, rank)
        return [shape]

    def create_kernel(self):
        return SoftmaxKernel(self)
