"""Op contexts of Add, Mul and Sum: numpy broadcasting, float32 / int32 / int64.

Formats: NDARRAY always works.  N16CX is kept when the big operands arrive blocked and
have the output's shape, and any other operand is a per-channel vector ([C], [C,1,1],
[1,C,1,1] ...): the common cases of a residual Sum or a bias/scale after a Conv.
"""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.onnx.arithmetic_kernels import BinaryKernel, SumKernel
from pplpy.engines.x86.optimizer.canned import NUMERIC_TYPES, broadcast_inputs_shape
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op


def is_channel_vector(shape, out_shape):
    """True if ``shape`` broadcast to ``out_shape`` varies only along axis 1 (channels)."""
    if len(shape) > len(out_shape) or len(out_shape) < 2:
        return False
    offset = len(out_shape) - len(shape)
    for axis, dim in enumerate(shape, start=offset):
        if axis != 1 and dim != 1:
            return False
    return True


class ElementwiseOp(X86OptKernel):
    """Shared type checks and format choice of the broadcasting arithmetic ops."""

    supported_types = NUMERIC_TYPES
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = broadcast_inputs_shape

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        present = [t for t in in_types if t is not None]
        if any(t is not present[0] for t in present):
            names = ", ".join(str(t) for t in present)
            raise self.unsupported(f"inputs must share one element type, got {names}")
        return out

    def select_format(self, in_formats, in_shapes):
        ndarray = [DataFormat.NDARRAY] * len(in_formats)
        if any(s is None for s in in_shapes):
            return ndarray, [DataFormat.NDARRAY]
        out_shape = broadcast_inputs_shape(self, in_shapes, None)[0]
        blocked = [f is DataFormat.N16CX for f in in_formats]
        if not any(blocked) or len(out_shape) < 3:
            return ndarray, [DataFormat.NDARRAY]
        wanted = []
        for shape, is_blocked in zip(in_shapes, blocked):
            if is_blocked and tuple(shape) == tuple(out_shape):
                wanted.append(DataFormat.N16CX)
            elif is_channel_vector(shape, out_shape):
                wanted.append(DataFormat.NDARRAY)
            else:
                return ndarray, [DataFormat.NDARRAY]
        if DataFormat.N16CX not in wanted:
            return ndarray, [DataFormat.NDARRAY]
        return wanted, [DataFormat.N16CX]


@register_op("", "Add", versions=(7, 28))
class AddOp(ElementwiseOp):
    def create_kernel(self):
        return BinaryKernel(self, "ADD")


@register_op("", "Mul", versions=(7, 28))
class MulOp(ElementwiseOp):
    def create_kernel(self):
        return BinaryKernel(self, "MUL")


@register_op("", "Sum", versions=(8, 28))
class SumOp(ElementwiseOp):
    """Sum of one or more inputs, accumulated pairwise into the output."""

    def create_kernel(self):
        return SumKernel(self)
