"""Kernels of the element-wise activations (layout-agnostic: they see flat arrays)."""

import numpy as np

from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.engines.x86.kernels.layout import as_flat

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
