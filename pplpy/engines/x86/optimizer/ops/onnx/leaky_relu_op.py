"""LeakyRelu's op context: the tutorial op (docs/add_op.md walks through this file)."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.onnx.leaky_relu_kernel import LeakyReluKernel
from pplpy.engines.x86.optimizer.canned import follow_input_format, same_shape_as_input
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op


@register_op("", "LeakyRelu", versions=(6, 28))
class LeakyReluOp(X86OptKernel):
    """y = x if x >= 0 else alpha * x, in NDARRAY or N16CX, whichever arrives."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input  # the default infer_type checks input 0 is float32
    select_format = follow_input_format

    def create_kernel(self):
        return LeakyReluKernel(self)
