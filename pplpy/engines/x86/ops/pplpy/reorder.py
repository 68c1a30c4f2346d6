"""Op contexts of pplpy's own nodes, which the engine inserts (never in an ONNX file)."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_blocked_3d, as_ndarray_3d
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.canned import same_shape_as_input
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.declare import op


class ReorderKernel(X86Kernel):
    def do_execute(self, ctx):
        impl = self.impl("reorder_fp32")
        x, y = ctx.inputs[0], ctx.outputs[0]
        src, dst = ctx.input_shapes[0], ctx.output_shapes[0]
        if src.data_format is dst.data_format:
            y[...] = x
        elif dst.data_format is DataFormat.N16CX:
            impl.ndarray_to_n16cx_fp32(as_ndarray_3d(x, src), as_blocked_3d(y, dst),
                                       ctx.num_threads)
        else:
            impl.n16cx_to_ndarray_fp32(as_blocked_3d(x, src), as_ndarray_3d(y, dst),
                                       ctx.num_threads)


@op("pplpy", "Reorder", since=1)
class ReorderOp(X86OptKernel):
    """Converts between NDARRAY and N16CX; inserted by reorder insertion."""

    supported_types = (DataType.FLOAT32,)
    infer_shape = same_shape_as_input

    def select_format(self, in_formats, in_shapes):
        return [self.param.src], [self.param.dst]

    def create_kernel(self):
        return ReorderKernel(self)
