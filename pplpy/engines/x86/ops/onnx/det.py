"""Det (opsets 11, 22): the determinant of each square matrix in the last two dims of a
float32 / float64 tensor, [..., M, M] -> [...], by LU with partial pivoting in float64
(``impls/_linalg.pyx``).  Opset 22 only adds float16/bfloat16, which pplpy does not compute
in (an UnsupportedOpError at load)."""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _linalg
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import prod
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel


class DetKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = x.shape.dims
        step = _linalg.make_det_step(y.address, x.address, x.shape.data_type.value,
                                     prod(dims[:-2]), dims[-1], io.num_threads,
                                     keep_arrays(io))
        step.label = self.node.name
        return step


@op("", "Det", since=11)
@op("", "Det", since=22)  # float16 / bfloat16 added
class DetOp(X86OptKernel):
    """y = det(x) over the last two dims."""

    supported_types = (DataType.FLOAT32, DataType.FLOAT64)

    def infer_shape(self, in_shapes, in_values):
        dims = tuple(in_shapes[0])
        if len(dims) < 2 or dims[-1] != dims[-2]:
            raise self.shape_error("input must be [..., M, M] (square matrices in the last "
                                   "two dims)", in_shapes)
        return [dims[:-2]]

    def create_kernel(self):
        return DetKernel(self)
