"""LeakyRelu's kernel: unpack the tensors, call the impl of the engine's ISA."""

from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.engines.x86.kernels.layout import as_flat


class LeakyReluKernel(X86Kernel):
    def do_execute(self, ctx):
        # Element-wise, so the layout does not matter: N16CX padding lanes stay finite.
        impl = self.impl("eltwise_fp32")
        impl.leaky_relu_fp32(as_flat(ctx.inputs[0]), as_flat(ctx.outputs[0]),
                             self.param.alpha, ctx.num_threads)
