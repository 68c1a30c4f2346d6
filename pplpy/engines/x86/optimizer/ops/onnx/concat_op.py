"""Concat's op context: any element type in NDARRAY; float32 channel concatenation stays
in N16CX when every input arrives in N16CX, so a Conv -> Concat -> Conv chain needs no
reorders."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.onnx.concat_kernel import ConcatKernel
from pplpy.engines.x86.optimizer.canned import ANY_TYPE
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import concat_shape, normalize_axis


@register_op("", "Concat", versions=(4, 28))
class ConcatOp(X86OptKernel):
    """y = concatenate(inputs, axis); inputs share their type and all dims but ``axis``."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    supported_types = ANY_TYPE

    def infer_type(self, in_types):
        (data_type,) = super().infer_type(in_types)
        others = [(i, t) for i, t in enumerate(in_types) if t is not data_type]
        if others:
            got = ", ".join(f"input {i} is {t}" for i, t in others)
            raise ShapeError(f"{self.node.describe()}: all inputs must have input 0's type "
                             f"{data_type}; {got}")
        return [data_type]

    def infer_shape(self, in_shapes, in_values):
        if any(s is None for s in in_shapes):
            raise self.shape_error("every input must be given (no empty names)", in_shapes)
        try:
            out, _ = concat_shape(in_shapes, self.param.axis)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [out]

    def select_format(self, in_formats, in_shapes):
        """N16CX when every input is N16CX, rank >= 3 and the axis is the channel axis."""
        n = len(in_formats)
        if all(f is DataFormat.N16CX for f in in_formats) and self._is_channel_concat(in_shapes):
            return [DataFormat.N16CX] * n, [DataFormat.N16CX]
        return [DataFormat.NDARRAY] * n, [DataFormat.NDARRAY]

    def _is_channel_concat(self, in_shapes):
        first = in_shapes[0] if in_shapes else None
        if first is None or len(first) < 3:
            return False
        try:
            return normalize_axis(self.param.axis, len(first)) == 1
        except ValueError:
            return False

    def create_kernel(self):
        return ConcatKernel(self)
