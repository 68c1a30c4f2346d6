"""Op contexts of the parameter-free and Clip activations: element-wise, any format."""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import ClipParam
from pplpy.models.onnx.parsers.encodings import parse_clip_attributes
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_flat
from pplpy.engines.x86.ops.op_context import X86OptKernel


_F32 = np.finfo(np.float32)


class UnaryKernel(X86Kernel):
    def __init__(self, op, function):
        super().__init__(op)
        self.function = function

    def do_execute(self, ctx):
        fn = getattr(self.impl("eltwise_fp32"), self.function)
        fn(as_flat(ctx.inputs[0]), as_flat(ctx.outputs[0]), ctx.num_threads)


class ClipKernel(X86Kernel):
    def do_execute(self, ctx):
        if self.param is not None:  # opset 6-10: attributes
            lo, hi = self.param.min, self.param.max
        else:
            lo = _scalar(ctx.inputs, 1, -np.inf)
            hi = _scalar(ctx.inputs, 2, np.inf)
        self.impl("eltwise_fp32").clip_fp32(
            as_flat(ctx.inputs[0]), as_flat(ctx.outputs[0]), lo, hi, ctx.num_threads
        )


def _scalar(inputs, index, default):
    if index < len(inputs) and inputs[index] is not None:
        return float(np.asarray(inputs[index]).reshape(-1)[0])
    return default


class UnaryOp(X86OptKernel):
    """An element-wise float32 op; ``impl_function`` names its eltwise impl."""

    impl_function = None
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input
    select_format = follow_input_format

    def create_kernel(self):
        return UnaryKernel(self, self.impl_function)


@op("", "Relu", since=6)
class ReluOp(UnaryOp):
    impl_function = "relu_fp32"


@op("", "Sigmoid", since=6)
class SigmoidOp(UnaryOp):
    impl_function = "sigmoid_fp32"


@op("", "Clip", since=6, param=ClipParam, parse=parse_clip_attributes)  # min/max attributes
@op("", "Clip", since=11)  # min and max became optional inputs
class ClipOp(X86OptKernel):
    """y = min(max(x, min), max); min/max are attributes before opset 11, inputs after."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    infer_shape = same_shape_as_input

    def select_format(self, in_formats, in_shapes):
        wanted, outs = follow_input_format(self, in_formats, in_shapes)
        return wanted, outs

    def infer_shape(self, in_shapes, in_values):
        for index in (1, 2):
            shape = in_shapes[index] if index < len(in_shapes) else None
            if shape is not None and int(np.prod(shape)) != 1:
                raise self.shape_error(f"input {index} (min/max) must be a scalar", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return ClipKernel(self)
