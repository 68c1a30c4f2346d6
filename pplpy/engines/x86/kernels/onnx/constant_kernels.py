"""Kernels of Constant and ConstantOfShape: fill the output from the node's param."""

import numpy as np

from pplpy.engines.x86.kernels.onnx.shape_kernels import DataMovementKernel


class ConstantKernel(DataMovementKernel):
    """y = the param's value."""

    def do_execute(self, ctx):
        np.copyto(ctx.outputs[0], self.param.value.array)


class ConstantOfShapeKernel(DataMovementKernel):
    """y = full(shape, value); value defaults to a float32 zero."""

    def do_execute(self, ctx):
        value = self.param.value if self.param is not None else None
        fill = np.float32(0) if value is None else value.array.reshape(-1)[0]
        ctx.outputs[0].fill(fill)
