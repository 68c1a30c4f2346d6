"""Kernels of the shape-manipulating ops: pure data movement, done by numpy into the
preallocated output arrays (which are NDARRAY, so physical layout = logical layout)."""

import numpy as np

from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.oputils.onnx.shape_functions import transpose_shape


class DataMovementKernel(X86Kernel):
    """Base of the numpy data-movement kernels; tolerates omitted optional outputs ("")."""

    def can_do_execute(self, ctx):
        return any(s is not None and s.element_count > 0 for s in ctx.output_shapes)


class CopyKernel(DataMovementKernel):
    """y = x with new dims: Reshape, Flatten, Unsqueeze, Identity (row-major order kept)."""

    def do_execute(self, ctx):
        y = ctx.outputs[0]
        np.copyto(y, ctx.inputs[0].reshape(y.shape))


class TransposeKernel(DataMovementKernel):
    """y = x.transpose(perm); perm None reverses the axes."""

    def do_execute(self, ctx):
        _, perm = transpose_shape(ctx.input_shapes[0].dims, self.param.perm)
        np.copyto(ctx.outputs[0], ctx.inputs[0].transpose(perm))


class DropoutKernel(DataMovementKernel):
    """Inference Dropout: y = x; the optional mask is all ones (nothing is dropped)."""

    def do_execute(self, ctx):
        outputs = ctx.outputs
        if outputs[0] is not None:
            np.copyto(outputs[0], ctx.inputs[0])
        if len(outputs) > 1 and outputs[1] is not None:
            outputs[1].fill(1)  # True for bool (opset 10+), one of type T before
