"""Kernels of BatchNormalization, LRN and Softmax over the norm impls."""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.engines.x86.kernels.layout import as_blocked_3d, as_ndarray_3d


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
