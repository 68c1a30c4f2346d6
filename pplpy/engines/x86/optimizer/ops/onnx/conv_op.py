"""Conv's op context: 1-D and 2-D convolution in N16CX on the brgemm-based conv impl.

Conv always asks for its input in N16CX, so a CNN stays blocked from its first Conv on; the
engine inserts a Reorder in front when the producer is NDARRAY.  The weight is packed once
when constant (every runtime shares it) and on each run otherwise.
"""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.onnx.conv_kernel import ConvKernel
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.oputils.onnx.pool_geometry import resolve_pads


@register_op("", "Conv", versions=(1, 28))
class ConvOp(X86OptKernel):
    """y = conv(x, W, group) + B."""

    formats = (DataFormat.N16CX,)

    def geometry(self, x_shape, w_shape):
        """(out_spatial, pads_begin, pads_end) for these input and weight shapes."""
        p = self.param
        kernel = p.kernel_shape if p.kernel_shape is not None else w_shape[2:]
        return resolve_pads(x_shape[2:], kernel, p.strides, p.dilations, p.pads, p.auto_pad)

    def infer_shape(self, in_shapes, in_values):
        x, w = in_shapes[0], in_shapes[1]
        group = self.param.group
        if len(x) not in (3, 4):
            raise self.unsupported(f"{len(x) - 2}-D convolution is not supported (1-D, 2-D)")
        if len(w) != len(x):
            raise self.shape_error("W must have the rank of X", in_shapes)
        if group < 1 or x[1] != w[1] * group or w[0] % group:
            raise self.shape_error(
                f"channels do not match: X has {x[1]}, W expects {w[1]} x group {group} and "
                f"{w[0]} outputs must divide by group", in_shapes)
        if self.param.kernel_shape is not None and tuple(self.param.kernel_shape) != tuple(w[2:]):
            raise self.shape_error(f"kernel_shape {list(self.param.kernel_shape)} differs from "
                                   f"W's {list(w[2:])}", in_shapes)
        if len(in_shapes) > 2 and in_shapes[2] is not None and tuple(in_shapes[2]) != (w[0],):
            raise self.shape_error(f"B must have shape [{w[0]}]", in_shapes)
        out_spatial, _, _ = self.geometry(x, w)
        return [(x[0], w[0]) + tuple(out_spatial)]

    def select_format(self, in_formats, in_shapes):
        wanted = [DataFormat.N16CX] + [DataFormat.NDARRAY] * (len(in_formats) - 1)
        return wanted, [DataFormat.N16CX]

    def create_kernel(self):
        return ConvKernel(self)
