"""ScaledLeakyRelu's kernel, computed with numpy: installing the plugin needs no compiler."""

import numpy as np

from pplpy.engines.x86 import X86Kernel


class ScaledLeakyReluKernel(X86Kernel):
    def do_execute(self, ctx):
        """y = scale * (x if x >= 0 else alpha * x)"""
        # Arrays come in their physical layout; element-wise work ignores it (zeros in N16CX
        # padding lanes stay zero).  Write into the output array: it is a view of the arena.
        x, y = ctx.inputs[0], ctx.outputs[0]
        alpha, scale = np.float32(self.param.alpha), np.float32(self.param.scale)
        np.multiply(np.where(x >= 0, x, alpha * x), scale, out=y)
