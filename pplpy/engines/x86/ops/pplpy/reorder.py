"""Op contexts of pplpy's own nodes, which the engine inserts (never in an ONNX file)."""

import math

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel


class ReorderKernel(X86Kernel):
    """NDARRAY (N, C, S) <-> N16CX (N, C/16, S, 16) float32 as one step of the run plan."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        src, dst = x.shape, y.shape
        keep = (x.array, y.array)
        if src.data_format is dst.data_format:
            return _copy.make_copy_step(y.address, x.address, dst.bytes, keep)
        dims = src.dims
        step = self.impl("reorder_fp32").make_reorder_step(
            x.address, y.address, dims[0], dims[1], math.prod(dims[2:]),
            dst.data_format is DataFormat.N16CX)
        step.keep = keep
        return step


@op("pplpy", "Reorder", since=1)
class ReorderOp(X86OptKernel):
    """Converts between NDARRAY and N16CX; inserted by reorder insertion."""

    supported_types = (DataType.FLOAT32,)
    infer_shape = same_shape_as_input

    def select_format(self, in_formats, in_shapes):
        return [self.param.src], [self.param.dst]

    def create_kernel(self):
        return ReorderKernel(self)
