"""Op contexts of GlobalMaxPool, LpPool and MaxUnpool.

GlobalMaxPool runs on pool_fp32's global max steps and LpPool on pool2_fp32's window step,
both in NDARRAY and N16CX (LpPool keeps N16CX for 2-D inputs that arrive blocked, as the other
windowed pools do).  LpPool's window geometry is MaxPool's (``pool_window``: auto_pad,
ceil_mode and dilations from opset 18).  MaxUnpool scatters x into zeros at the flat indices
MaxPool produced, in NDARRAY, one serial step; its optional output_shape input decides the
output shape, so its value must be known when a plan is made.
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.pooling import GlobalPoolOp, WindowPoolOp, _physical
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.params.onnx import LpPoolParam, MaxUnpoolParam


@op("", "GlobalMaxPool", since=1)
class GlobalMaxPoolOp(GlobalPoolOp):
    """y[n, c] = max of x[n, c, ...], keeping size-1 spatial dims."""

    reduction = "max"


class LpPoolKernel(X86Kernel):
    """y = (sum of |x|^p over the window's in-bounds taps)^(1/p)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        w = self.op.geometry(x.shape.dims)
        n16cx = x.shape.data_format is DataFormat.N16CX
        px = _physical(x)
        planes = px[0] * px[1]
        spatial = px[2:-1] if n16cx else px[2:]
        return self.impl("pool2_fp32").make_lppool_step(
            x.address, y.address, planes, 16 if n16cx else 1, spatial, w.out, w.kernel,
            w.strides, w.pads_begin, w.dilations, float(self.param.p))


@op("", "LpPool", since=1, param=LpPoolParam)
class LpPoolOp(WindowPoolOp):
    """y = (sum over each window of |x|^p)^(1/p); padding cells count as 0."""

    def infer_shape(self, in_shapes, in_values):
        p = self.param.p
        if p is None or not float(p) > 0:
            raise self.unsupported(f"p = {p}: LpPool needs p > 0")
        if self.param.kernel_shape is None:
            raise self.shape_error("kernel_shape is required", in_shapes)
        try:
            return super().infer_shape(in_shapes, in_values)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def create_kernel(self):
        return LpPoolKernel(self)


class MaxUnpoolKernel(X86Kernel):
    """y = 0; y.flat[I] = x.flat, I indexing the unpooled shape (in y's leading corner)."""

    def make_step(self, io):
        x, i, y = io.inputs[0], io.inputs[1], io.outputs[0]
        if y.shape.bytes == 0:
            return None
        src = (tuple(x.shape.dims[:2]) + self.op.unpooled(x.shape.dims))
        count = math.prod(x.shape.dims)
        return self.impl("pool2_fp32").make_maxunpool_step(
            x.address if count else 0, i.address if count else 0, y.address, count, src,
            y.shape.dims)


@op("", "MaxUnpool", since=9, param=MaxUnpoolParam)
class MaxUnpoolOp(X86OptKernel):
    """y = zeros(output_shape); y.flat[I] = x.flat (MaxPool's indices)."""

    value_inputs = (2,)

    def infer_type(self, in_types):
        if len(in_types) < 2 or in_types[1] is not DataType.INT64:
            got = in_types[1] if len(in_types) > 1 else None
            raise ShapeError(f"{self.node.describe()}: I (input 1) must be int64, got {got}")
        if len(in_types) > 2 and in_types[2] is not None and in_types[2] is not DataType.INT64:
            raise ShapeError(f"{self.node.describe()}: output_shape (input 2) must be int64, "
                             f"got {in_types[2]}")
        return super().infer_type(in_types)[:1]

    def unpooled(self, x_shape):
        """The spatial shape MaxPool's input had: (in - 1) * stride - pads + kernel."""
        p = self.param
        rank = len(x_shape) - 2
        kernel = tuple(int(k) for k in p.kernel_shape)
        strides = tuple(int(s) for s in p.strides) if p.strides is not None else (1,) * rank
        pads = tuple(int(v) for v in p.pads) if p.pads is not None else (0,) * (2 * rank)
        return tuple((n - 1) * s - pads[a] - pads[a + rank] + k
                     for a, (n, s, k) in enumerate(zip(x_shape[2:], strides, kernel)))

    def infer_shape(self, in_shapes, in_values):
        x, ind = in_shapes[0], in_shapes[1]
        p = self.param
        if len(x) < 3 or len(x) > 5:
            raise self.shape_error("X must be (N, C, spatial...) with 1 to 3 spatial axes",
                                   in_shapes)
        rank = len(x) - 2
        if p.kernel_shape is None or len(p.kernel_shape) != rank:
            raise self.shape_error(f"kernel_shape must give {rank} values", in_shapes)
        for name, values, size in (("strides", p.strides, rank), ("pads", p.pads, 2 * rank)):
            if values is not None and len(values) != size:
                raise self.shape_error(f"{name} {list(values)} needs {size} values", in_shapes)
        if tuple(ind) != tuple(x):
            raise self.shape_error("I must have the shape of X", in_shapes)
        inferred = tuple(x[:2]) + self.unpooled(x)
        if any(d < 0 for d in inferred):
            raise self.shape_error(f"the unpooled shape {list(inferred)} is negative",
                                   in_shapes)
        if not self.input_present(2):
            return [inferred]
        value = in_values[2] if len(in_values) > 2 else None
        if value is None:
            raise self.value_required(2, "output_shape")
        out = tuple(int(v) for v in np.asarray(value).reshape(-1))
        if len(out) != len(x) or tuple(out[:2]) != tuple(x[:2]):
            raise self.shape_error(f"output_shape {list(out)} must be (N, C, spatial...) of "
                                   f"X's rank, N and C", in_shapes)
        if any(o < i for o, i in zip(out, inferred)):
            raise self.shape_error(f"output_shape {list(out)} is smaller than the unpooled "
                                   f"shape {list(inferred)}", in_shapes)
        return [out]

    def create_kernel(self):
        return MaxUnpoolKernel(self)
