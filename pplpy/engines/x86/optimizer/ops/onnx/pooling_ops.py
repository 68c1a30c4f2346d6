"""Op contexts of MaxPool, AveragePool and GlobalAveragePool.

Window geometry (auto_pad, ceil_mode, dilations) follows ``oputils.onnx.pool_geometry``,
shared with Conv.  2-D pools keep N16CX when their input arrives blocked; 1-D and 3-D pools
and MaxPool with an Indices output run in NDARRAY.
"""

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.kernels.onnx.pooling_kernels import (
    AveragePoolKernel,
    GlobalAveragePoolKernel,
    MaxPoolKernel,
)
from pplpy.engines.x86.optimizer.canned import follow_input_format
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.oputils.onnx.pool_geometry import resolve_pads


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


@register_op("", "MaxPool", versions=(1, 28))
class MaxPoolOp(WindowPoolOp):
    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        return [out[0], DataType.INT64][: len(self.node.outputs)]

    def create_kernel(self):
        return MaxPoolKernel(self)


@register_op("", "AveragePool", versions=(7, 28))
class AveragePoolOp(WindowPoolOp):
    def create_kernel(self):
        return AveragePoolKernel(self)


@register_op("", "GlobalAveragePool", versions=(1, 28))
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
