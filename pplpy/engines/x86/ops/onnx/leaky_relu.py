"""LeakyRelu's op context: the tutorial op (docs/add_op.md walks through this file)."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import LeakyReluParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_flat
from pplpy.engines.x86.ops.op_context import X86OptKernel


class LeakyReluKernel(X86Kernel):
    def do_execute(self, ctx):
        # Element-wise, so the layout does not matter: N16CX padding lanes stay finite.
        impl = self.impl("eltwise_fp32")
        impl.leaky_relu_fp32(as_flat(ctx.inputs[0]), as_flat(ctx.outputs[0]),
                             self.param.alpha, ctx.num_threads)


@op("", "LeakyRelu", since=6, param=LeakyReluParam)
class LeakyReluOp(X86OptKernel):
    """y = x if x >= 0 else alpha * x, in NDARRAY or N16CX, whichever arrives."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input  # the default infer_type checks input 0 is float32
    select_format = follow_input_format

    def create_kernel(self):
        return LeakyReluKernel(self)
