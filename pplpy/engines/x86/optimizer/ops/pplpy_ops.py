"""Op contexts of pplpy's own nodes, which the engine inserts (never in an ONNX file)."""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.kernels.reorder_kernel import ReorderKernel
from pplpy.engines.x86.optimizer.canned import same_shape_as_input
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op


@register_op("pplpy", "Reorder", versions=(1, 1))
class ReorderOp(X86OptKernel):
    """Converts between NDARRAY and N16CX; inserted by reorder insertion."""

    supported_types = (DataType.FLOAT32,)
    infer_shape = same_shape_as_input

    def select_format(self, in_formats, in_shapes):
        return [self.param.src], [self.param.dst]

    def create_kernel(self):
        return ReorderKernel(self)
