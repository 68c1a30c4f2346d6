"""LogSoftmax and Hardmax along one axis; before opset 13 along the rows of the input
coerced to 2-D at ``axis`` (as Softmax).

    LogSoftmax  y = x - max(x) - log(sum(exp(x - max(x))))
    Hardmax     y = 1 at the first maximum of x, 0 elsewhere
"""

import math

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import CoercedAxisParam, HardmaxParam, LogSoftmaxParam


def axis_view(dims, axis, coerced):
    """(outer, n, inner) of ``dims`` around ``axis``; coerced: [prod(:axis), prod(axis:)]."""
    dims = tuple(dims) or (1,)
    axis = normalize_axis(axis, len(dims))
    if coerced:
        return math.prod(dims[:axis]), math.prod(dims[axis:]), 1
    return math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:])


class AxisKernel(X86Kernel):
    """Runs ``kind`` (an impl axis op) along the op's axis."""

    def __init__(self, op_ctx, kind, coerced):
        super().__init__(op_ctx)
        self.kind = kind
        self.coerced = coerced

    def make_step(self, io):
        if not self.has_work(io):
            return None
        outer, n, inner = axis_view(io.inputs[0].shape.dims, self.param.axis, self.coerced)
        return self.impl("layernorm_fp32").make_axis_step(
            io.inputs[0].address, io.outputs[0].address, outer, n, inner, self.kind,
            (io.inputs[0].array, io.outputs[0].array))


class AxisOp(X86OptKernel):
    """An op along ``param.axis``; ``kind`` names the impl's code for it."""

    kind = None

    def infer_shape(self, in_shapes, in_values):
        shape = tuple(in_shapes[0])
        try:
            normalize_axis(self.param.axis, max(len(shape), 1))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [shape]

    def create_kernel(self):
        return AxisKernel(self, self.kind, self.node.opset < 13)


@op("", "LogSoftmax", since=1, param=CoercedAxisParam)  # flattens to 2-D at axis
@op("", "LogSoftmax", since=13, param=LogSoftmaxParam)  # one axis
class LogSoftmaxOp(AxisOp):
    """y = x - max - log(sum(exp(x - max))) along axis (the 2-D coercion before 13)."""

    kind = "log_softmax"


@op("", "Hardmax", since=1, param=CoercedAxisParam)  # flattens to 2-D at axis
@op("", "Hardmax", since=13, param=HardmaxParam)  # one axis
class HardmaxOp(AxisOp):
    """y = one-hot of the first maximum along axis (the 2-D coercion before 13)."""

    kind = "hardmax"
