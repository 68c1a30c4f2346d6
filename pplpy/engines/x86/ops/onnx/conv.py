"""Conv's op context: 1-D and 2-D convolution in N16CX on the brgemm-based conv impl.

Conv always asks for its input in N16CX, so a CNN stays blocked from its first Conv on; the
engine inserts a Reorder in front when the producer is NDARRAY.  The weight is packed once
when constant (every runtime shares it) and on each run otherwise.
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import ConvParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.pool_geometry import resolve_pads


def _as_2d(shape_dims, values, fill):
    """Spatial attribute values of a 1-D or 2-D conv as (h, w)."""
    values = tuple(values)
    return values if len(shape_dims) == 4 else (fill,) + values


class ConvKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        w = op.constant(1)
        self.packed_w = self.pack(w) if w is not None else None
        b = op.constant(2) if op.input_present(2) else None
        self.bias = np.ascontiguousarray(b, np.float32) if b is not None else None
        post_ops = getattr(op, "post_ops", ())  # set by the fusion pass
        self.post_op, self.p0, self.p1 = post_ops[0] if post_ops else (PostOp.NONE, 0.0, 0.0)

    def pack(self, w):
        w = np.ascontiguousarray(w, np.float32)
        if w.ndim == 3:
            w = w[:, :, None, :]
        return self.impl("conv_fp32").conv_pack_weight(w, int(self.param.group))

    def do_execute(self, ctx):
        x_shape, w_shape = ctx.input_shapes[0], ctx.input_shapes[1]
        dims = x_shape.dims
        p = self.param
        _, begin, _ = self.op.geometry(dims, w_shape.dims)
        rank = len(dims) - 2
        strides = _as_2d(dims, p.strides or (1,) * rank, 1)
        dilations = _as_2d(dims, p.dilations or (1,) * rank, 1)
        pads = _as_2d(dims, begin, 0)
        kernel = _as_2d(dims, w_shape.dims[2:], 1)
        packed = self.packed_w if self.packed_w is not None else self.pack(ctx.inputs[1])
        bias = self.bias
        if bias is None and len(ctx.inputs) > 2 and ctx.inputs[2] is not None:
            bias = np.ascontiguousarray(ctx.inputs[2], np.float32)
        x, y = ctx.inputs[0], ctx.outputs[0]
        if rank == 1:
            x = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2], x.shape[3])
            y = y.reshape(y.shape[0], y.shape[1], 1, y.shape[2], y.shape[3])
        self.impl("conv_fp32").conv2d_n16cx_fp32(
            x, packed, bias, y, dims[1], w_shape.dims[0], int(p.group), kernel[0], kernel[1],
            strides[0], strides[1], pads[0], pads[1], dilations[0], dilations[1],
            int(self.post_op), self.p0, self.p1, ctx.num_threads)


@op("", "Conv", since=1, param=ConvParam)
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
