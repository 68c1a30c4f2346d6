"""Conv's kernel: N16CX in and out; 1-D convs run as 2-D with a height of 1."""

import numpy as np

from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.kernels.kernel import X86Kernel


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
        self.post_op, self.p0, self.p1 = PostOp.NONE, 0.0, 0.0

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
