"""BitCast (opset 26): y = the bytes of x read as another element type of the same width.

A reinterpretation moves no bits, so the step is a copy (Reshape's).  One exception keeps
pplpy's bool invariant: pplpy's bool tensors hold 0 or 1 and its kernels rely on it (Not is
x ^ 1), so a byte reinterpreted as bool becomes its truth value, x != 0 (a Cast step), which
is what the reinterpreted byte means to numpy and to the reference.  Types pplpy has no
tensors of (bfloat16, float8, float4, int4, int2, complex, string) are an
UnsupportedOpError at load.
"""

from onnx import TensorProto

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _cast
from pplpy.engines.x86.ops.canned import ANY_TYPE, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import CopyKernel, DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import BitCastParam

_UNSIGNED = {1: DataType.UINT8, 2: DataType.UINT16, 4: DataType.UINT32, 8: DataType.UINT64}


class BitCastToBoolKernel(DataMovementKernel):
    """y = (x != 0) over x's bytes read as unsigned words."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        word = _UNSIGNED[x.shape.data_type.itemsize]
        step = _cast.make_cast_step(y.address, x.address, y.shape.element_count, word.value,
                                    DataType.BOOL.value)
        step.keep = keep_arrays(io)
        return step


@op("", "BitCast", since=26, param=BitCastParam)
class BitCastOp(X86OptKernel):
    """y = x's bit pattern as type ``to`` (same shape, same element width)."""

    supported_types = ANY_TYPE
    formats = (DataFormat.NDARRAY,)
    infer_shape = same_shape_as_input

    def infer_type(self, in_types):
        to = self.param.to if self.param is not None else None
        if to is None:
            raise self.unsupported('attribute "to" is required')
        source, target = in_types[0], DataType.from_onnx(to)
        if source is None:
            raise self.unsupported("input type is not one pplpy has tensors of")
        if target is None:
            name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() \
                else str(to)
            raise self.unsupported(f"target type {name} is not one pplpy has tensors of "
                                   f"(pplpy has: {', '.join(str(t) for t in DataType)})")
        if source.itemsize != target.itemsize:
            raise self.unsupported(f"{source} ({source.itemsize * 8} bits) and {target} "
                                   f"({target.itemsize * 8} bits) differ in width: BitCast "
                                   f"needs types of one width")
        return [target]

    def create_kernel(self):
        if DataType.from_onnx(self.param.to) is DataType.BOOL:
            return BitCastToBoolKernel(self)
        return CopyKernel(self)
