"""ScaledLeakyRelu's op context: types, shapes, formats, and which kernel runs it."""

from pplpy import DataFormat
from pplpy.engines.x86 import X86OptKernel, register_op
from pplpy.engines.x86.optimizer.canned import follow_input_format, same_shape_as_input
from pplpy_example_ops.scaled_leaky_relu_kernel import ScaledLeakyReluKernel
from pplpy_example_ops.scaled_leaky_relu_param import DOMAIN


@register_op(DOMAIN, "ScaledLeakyRelu", versions=(1, 1))
class ScaledLeakyReluOp(X86OptKernel):
    """y = scale * (x if x >= 0 else alpha * x), float32, in whichever format arrives."""

    # The default infer_type accepts float32 input 0 and gives every output its type.
    infer_shape = same_shape_as_input
    # Element-wise, so NDARRAY and N16CX are the same to us: no reorder around this node.
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format

    def create_kernel(self):
        return ScaledLeakyReluKernel(self)
