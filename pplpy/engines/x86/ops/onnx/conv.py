"""Conv's op context: 1-D and 2-D convolution in N16CX on the brgemm-based conv impl.

Conv always asks for its input in N16CX, so a CNN stays blocked from its first Conv on; the
engine inserts a Reorder in front when the producer is NDARRAY.  A constant weight is packed
once, when the kernel is made (every runtime shares it, the raw weight is dropped); a weight
computed at run time is packed inside the step, each panel by the work item that uses it.
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
    """Direct N16CX convolution: one compiled step per input-shape signature."""

    def __init__(self, op):
        super().__init__(op)
        w = op.constant(1)
        self.packed_w = self.pack(w) if w is not None else None
        # The packed array itself, where Runtime.memory() counts kernels' weights.
        self.packed_data = self.packed_w["data"] if self.packed_w is not None else None
        b = op.constant(2) if op.input_present(2) else None
        self.bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None else None
        # The packed weight and the bias copy replace the raw constants.
        self.packed_inputs = tuple(i for i, v in ((1, self.packed_w), (2, self.bias))
                                   if v is not None)
        post_ops = getattr(op, "post_ops", ())  # set by the fusion pass
        self.post_op, self.p0, self.p1 = post_ops[0] if post_ops else (PostOp.NONE, 0.0, 0.0)

    def pack(self, w):
        w = np.ascontiguousarray(w, np.float32)
        if w.ndim == 3:
            w = w[:, :, None, :]
        return self.impl("conv_fp32").conv_pack_weight(w, int(self.param.group))

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, w, y = io.inputs[0], io.inputs[1], io.outputs[0]
        b = io.inputs[2] if len(io.inputs) > 2 else None
        dims, w_dims, y_dims = x.shape.dims, w.shape.dims, y.shape.dims
        p = self.param
        _, begin, _ = self.op.geometry(dims, w_dims)
        rank = len(dims) - 2
        strides = _as_2d(dims, p.strides or (1,) * rank, 1)
        dilations = _as_2d(dims, p.dilations or (1,) * rank, 1)
        pads = _as_2d(dims, begin, 0)
        kernel = _as_2d(dims, w_dims[2:], 1)
        in_hw = _as_2d(dims, dims[2:], 1)
        out_hw = _as_2d(dims, y_dims[2:], 1)
        keep = [x.array, y.array]
        kwargs = {}
        if self.packed_w is not None:
            kwargs["packed_w"] = self.packed_w
        else:  # a weight computed at run time: the step packs it (1-D: (OC, IC/g, 1, KW))
            kwargs["w"] = w.address
            keep.append(w.array)
        if self.bias is not None:
            kwargs["bias"] = self.bias
        elif b is not None:
            kwargs["b"] = b.address
            keep.append(b.array)
        return self.impl("conv_fp32").make_conv2d_n16cx_step(
            x.address, y.address, dims[0], dims[1], w_dims[0], int(p.group), in_hw[0],
            in_hw[1], out_hw[0], out_hw[1], kernel[0], kernel[1], strides[0], strides[1],
            pads[0], pads[1], dilations[0], dilations[1], int(self.post_op), self.p0, self.p1,
            io.num_threads, keep=tuple(keep), **kwargs)


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
