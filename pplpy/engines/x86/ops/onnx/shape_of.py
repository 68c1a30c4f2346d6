"""Shape's op context: y = the input's logical dims (dims[start:end] from opset 15) as int64.

Shape reads no data, only the input's dims, so the runtime evaluates it on the host whenever
it makes a plan (``computes_from_shapes``): it costs nothing per inference, and the
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains PyTorch exports follow it onto the
host.  An N16CX input reports its logical dims, never the padded physical ones.
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import shape_slice
from pplpy.params.onnx import ShapeParam


def shape_value(dims, param):
    """The int64 vector Shape outputs for input ``dims``."""
    start = param.start if param is not None else 0
    end = param.end if param is not None else None
    first, last = shape_slice(len(dims), start, end)
    return np.array(dims[first:last], np.int64)


class ShapeKernel(DataMovementKernel):
    """Copies the dims, computed when the step is made, into the output."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        dims = io.inputs[0].shape.dims  # on the host, a slot with dims and no array
        value = shape_value(dims, self.param)
        y = io.outputs[0]
        if value.nbytes != y.shape.bytes:
            raise ValueError(f"Shape of dims {list(dims)} gives {value.size} values, the "
                             f"output holds {y.shape.element_count}")
        return _copy.make_copy_step(y.address, value.ctypes.data, value.nbytes,
                                    (value, y.array))


@op("", "Shape", since=1)
@op("", "Shape", since=15, param=ShapeParam)  # start and end attributes
class ShapeOfOp(X86OptKernel):
    """y = shape(x)[start:end], int64; x of any element type and format."""

    computes_from_shapes = True  # the runtime evaluates it on the host from dims alone
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    supported_types = ANY_TYPE  # only dims are read: float16 / float64 inputs too

    def infer_type(self, in_types):
        return [DataType.INT64]

    def infer_shape(self, in_shapes, in_values):
        return [(len(shape_value(in_shapes[0], self.param)),)]

    def select_format(self, in_formats, in_shapes):
        """Whatever format the input arrives in: only its logical dims are read."""
        return list(in_formats), [DataFormat.NDARRAY]

    def create_kernel(self):
        return ShapeKernel(self)
