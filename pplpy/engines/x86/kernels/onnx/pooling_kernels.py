"""Kernels of the pools: reshape to the impls' canonical views and call them.

NDARRAY impls take (N, C, D, H, W); 1-D and 2-D inputs get leading size-1 spatial dims.
N16CX impls take (N, C/16, H, W, 16).
"""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.engines.x86.kernels.layout import as_blocked_3d


def _as_5d(array, dims):
    n, c, *spatial = dims
    spatial = [1] * (3 - len(spatial)) + list(spatial)
    return array.reshape(n, c, *spatial)


def _pad3(values, fill):
    values = list(values)
    return tuple([fill] * (3 - len(values)) + values)


class WindowPoolKernel(X86Kernel):
    def window(self, ctx):
        """kernel, strides, pads_begin, pads_end, dilations for this run's input shape."""
        p = self.param
        dims = ctx.input_shapes[0].dims
        rank = len(dims) - 2
        _, begin, end = self.op.geometry(dims)
        strides = p.strides or (1,) * rank
        dilations = p.dilations or (1,) * rank
        return tuple(p.kernel_shape), tuple(strides), tuple(begin), tuple(end), tuple(dilations)


class MaxPoolKernel(WindowPoolKernel):
    def do_execute(self, ctx):
        impl = self.impl("pool_fp32")
        kernel, strides, begin, _, dilations = self.window(ctx)
        x, y = ctx.inputs[0], ctx.outputs[0]
        if ctx.output_shapes[0].data_format is DataFormat.N16CX:
            impl.maxpool_n16cx_fp32(x, y, kernel, strides, begin, dilations, ctx.num_threads)
            return
        indices = None
        if len(ctx.outputs) > 1 and ctx.outputs[1] is not None:
            indices = _as_5d(ctx.outputs[1], ctx.output_shapes[1].dims)
        storage_order = getattr(self.param, "storage_order", 0)
        impl.maxpool_ndarray_fp32(
            _as_5d(x, ctx.input_shapes[0].dims), _as_5d(y, ctx.output_shapes[0].dims), indices,
            _pad3(kernel, 1), _pad3(strides, 1), _pad3(begin, 0), _pad3(dilations, 1),
            storage_order, ctx.num_threads)


class AveragePoolKernel(WindowPoolKernel):
    def do_execute(self, ctx):
        impl = self.impl("pool_fp32")
        kernel, strides, begin, end, dilations = self.window(ctx)
        include_pad = bool(self.param.count_include_pad)
        x, y = ctx.inputs[0], ctx.outputs[0]
        if ctx.output_shapes[0].data_format is DataFormat.N16CX:
            impl.avgpool_n16cx_fp32(x, y, kernel, strides, begin, end, dilations, include_pad,
                                    ctx.num_threads)
            return
        impl.avgpool_ndarray_fp32(
            _as_5d(x, ctx.input_shapes[0].dims), _as_5d(y, ctx.output_shapes[0].dims),
            _pad3(kernel, 1), _pad3(strides, 1), _pad3(begin, 0), _pad3(end, 0),
            _pad3(dilations, 1), include_pad, ctx.num_threads)


class GlobalAveragePoolKernel(X86Kernel):
    def do_execute(self, ctx):
        impl = self.impl("pool_fp32")
        shape = ctx.input_shapes[0]
        x, y = ctx.inputs[0], ctx.outputs[0]
        if shape.data_format is DataFormat.N16CX:
            blocked = as_blocked_3d(x, shape)
            impl.global_avgpool_n16cx_fp32(blocked, y.reshape(blocked.shape[0], blocked.shape[1],
                                                              blocked.shape[3]),
                                           ctx.num_threads)
            return
        n, c = shape.dims[:2]
        impl.global_avgpool_ndarray_fp32(x.reshape(n * c, -1), y.reshape(n * c),
                                         ctx.num_threads)
