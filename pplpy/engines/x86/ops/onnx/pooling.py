"""Op contexts of MaxPool, AveragePool and GlobalAveragePool.

Window geometry (auto_pad, ceil_mode, dilations) follows ``oputils.onnx.pool_geometry``,
shared with Conv.  2-D pools keep N16CX when their input arrives blocked; 1-D and 3-D pools
and MaxPool with an Indices output run in NDARRAY.
"""

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.canned import follow_input_format
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import AveragePoolParam, MaxPoolParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_blocked_3d
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.pool_geometry import resolve_pads


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


class WindowPoolOp(X86OptKernel):
    """Shared shape inference of the windowed pools."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def geometry(self, in_shape):
        """(out_spatial, pads_begin, pads_end) for an input shape."""
        p = self.param
        return resolve_pads(in_shape[2:], p.kernel_shape, p.strides, p.dilations, p.pads,
                            p.auto_pad, bool(p.ceil_mode))

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        if len(shape) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if self.param.kernel_shape is not None and len(self.param.kernel_shape) != len(shape) - 2:
            raise self.shape_error(
                f"kernel_shape {list(self.param.kernel_shape)} does not match "
                f"{len(shape) - 2} spatial dims", in_shapes)
        if len(shape) > 5:
            raise self.unsupported(f"{len(shape) - 2}-D pooling is not supported (1-D to 3-D)")
        out_spatial, _, _ = self.geometry(shape)
        out = tuple(shape[:2]) + tuple(out_spatial)
        return [out] * len([o for o in self.node.outputs if o])

    def select_format(self, in_formats, in_shapes):
        two_d = in_shapes[0] is not None and len(in_shapes[0]) == 4
        with_indices = len(self.node.outputs) > 1 and bool(self.node.outputs[1])
        if two_d and not with_indices:
            return follow_input_format(self, in_formats, in_shapes)
        return [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY] * len(
            self.node.outputs)


@op("", "MaxPool", since=1, param=MaxPoolParam)
class MaxPoolOp(WindowPoolOp):
    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        return [out[0], DataType.INT64][: len(self.node.outputs)]

    def create_kernel(self):
        return MaxPoolKernel(self)


@op("", "AveragePool", since=7, param=AveragePoolParam)
class AveragePoolOp(WindowPoolOp):
    def create_kernel(self):
        return AveragePoolKernel(self)


@op("", "GlobalAveragePool", since=1)
class GlobalAveragePoolOp(X86OptKernel):
    """y[n, c] = mean of x[n, c, ...], keeping size-1 spatial dims."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        if len(shape) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        return [tuple(shape[:2]) + (1,) * (len(shape) - 2)]

    def create_kernel(self):
        return GlobalAveragePoolKernel(self)
