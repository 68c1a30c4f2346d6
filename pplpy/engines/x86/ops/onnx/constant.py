"""Op contexts of Constant and ConstantOfShape: outputs made from the node's param.

Both are usually gone before the engine sees them (constant_to_initializer and constant
folding); they run as nodes when a pipeline keeps them or their output is a graph output.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import (
    DataMovementKernel,
    check_int64_input,
    constant_vector,
    keep_arrays,
)
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.models.onnx.parsers.encodings import parse_constant, parse_constant_of_shape
from pplpy.params.onnx import ConstantOfShapeParam, ConstantParam
from pplpy.params.onnx.tensor_value import TensorValue


class ConstantKernel(DataMovementKernel):
    """y = the param's value: a copy step from a contiguous copy the step keeps."""

    def __init__(self, op):
        super().__init__(op)
        self.value = np.ascontiguousarray(self.param.value.array)

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        return _copy.make_copy_step(y.address, self.value.ctypes.data, y.shape.bytes,
                                    (self.value, keep_arrays(io)))


class ConstantOfShapeKernel(DataMovementKernel):
    """y = full(shape, value); value defaults to a float32 zero.  A fill step."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        value = self.param.value if self.param is not None else None
        fill = np.float32(0) if value is None else value.array.reshape(-1)[0]
        pattern = np.asarray(fill, y.shape.data_type.numpy).tobytes()
        step = _copy.make_fill_step(y.address, y.shape.element_count, pattern)
        step.keep = keep_arrays(io)
        return step


def value_type(op, value, what):
    """DataType of a param's TensorValue, or an unsupported error naming its dtype."""
    array = value.array if isinstance(value, TensorValue) else None
    data_type = DataType.from_numpy(array.dtype) if array is not None else None
    if data_type is None:
        kind = array.dtype if array is not None else type(value).__name__
        raise op.unsupported(f"{what} of element type {kind} is not supported "
                             f"(pplpy has: {', '.join(str(t) for t in DataType)})")
    return data_type


@op("", "Constant", since=1, param=ConstantParam, parse=parse_constant)
class ConstantOp(X86OptKernel):
    """y = the value attribute (value, value_float(s), value_int(s) ...) as one tensor."""

    def infer_type(self, in_types):
        return [value_type(self, self.param.value, "a Constant value")]

    def infer_shape(self, in_shapes, in_values):
        return [tuple(self.param.value.array.shape)]

    def create_kernel(self):
        return ConstantKernel(self)


@op("", "ConstantOfShape", since=9, param=ConstantOfShapeParam, parse=parse_constant_of_shape)
class ConstantOfShapeOp(X86OptKernel):
    """y = full(input 0, value); value is a one-element tensor, default float32 0.  An empty
    shape gives a scalar."""

    value_inputs = (0,)

    def infer_type(self, in_types):
        check_int64_input(self, in_types, 0, "shape")
        value = self.param.value if self.param is not None else None
        if value is None:
            return [DataType.FLOAT32]
        return [value_type(self, value, "a ConstantOfShape value")]

    def infer_shape(self, in_shapes, in_values):
        dims = constant_vector(self, in_shapes, in_values, 0, "a shape")
        if any(d < 0 for d in dims):
            raise self.shape_error(f"shape {dims} has a negative dim", in_shapes)
        return [tuple(dims)]

    def create_kernel(self):
        return ConstantOfShapeKernel(self)
