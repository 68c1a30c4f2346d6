"""ScaledLeakyRelu, declared once: parser + param + op context (types, shapes, formats) and
its kernel, computed with numpy so installing the plugin needs no compiler."""

import numpy as np

from pplpy import DataFormat
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input
from pplpy_example_ops.scaled_leaky_relu_param import DOMAIN, ScaledLeakyReluParam


class ScaledLeakyReluKernel(X86Kernel):
    def do_execute(self, ctx):
        """y = scale * (x if x >= 0 else alpha * x)"""
        # Arrays come in their physical layout; element-wise work ignores it (zeros in N16CX
        # padding lanes stay zero).  Write into the output array: it is a view of the arena.
        x, y = ctx.inputs[0], ctx.outputs[0]
        alpha, scale = np.float32(self.param.alpha), np.float32(self.param.scale)
        np.multiply(np.where(x >= 0, x, alpha * x), scale, out=y)


# Opset 1 of our domain, open-ended; the generic parse fills the dataclass from the node's
# attributes by field name and rejects attributes it does not know.
@op(DOMAIN, "ScaledLeakyRelu", since=1, param=ScaledLeakyReluParam)
class ScaledLeakyReluOp(X86OptKernel):
    """y = scale * (x if x >= 0 else alpha * x), float32, in whichever format arrives."""

    # The default infer_type accepts float32 input 0 and gives every output its type.
    infer_shape = same_shape_as_input
    # Element-wise, so NDARRAY and N16CX are the same to us: no reorder around this node.
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format
    # f(0) = 0: the zero padding lanes of N16CX stay zero, so pplpy may hand us N16CX
    # (without this a plugin op always gets NDARRAY; docs/op_context_contract.md).
    keeps_padding_finite = True

    def create_kernel(self):
        return ScaledLeakyReluKernel(self)
