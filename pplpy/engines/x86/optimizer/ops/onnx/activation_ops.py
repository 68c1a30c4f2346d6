"""Op contexts of the parameter-free and Clip activations: element-wise, any format."""

import numpy as np

from pplpy.common.data_format import DataFormat

from pplpy.engines.x86.kernels.onnx.activation_kernels import ClipKernel, UnaryKernel
from pplpy.engines.x86.optimizer.canned import follow_input_format, same_shape_as_input
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op


class UnaryOp(X86OptKernel):
    """An element-wise float32 op; ``impl_function`` names its eltwise impl."""

    impl_function = None
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input
    select_format = follow_input_format

    def create_kernel(self):
        return UnaryKernel(self, self.impl_function)


@register_op("", "Relu", versions=(6, 28))
class ReluOp(UnaryOp):
    impl_function = "relu_fp32"


@register_op("", "Sigmoid", versions=(6, 28))
class SigmoidOp(UnaryOp):
    impl_function = "sigmoid_fp32"


@register_op("", "Clip", versions=(6, 28))
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
