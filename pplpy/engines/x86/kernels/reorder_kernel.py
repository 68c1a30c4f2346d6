"""Kernel of pplpy::Reorder: NDARRAY <-> N16CX through the reorder impls."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.kernel import X86Kernel
from pplpy.engines.x86.kernels.layout import as_blocked_3d, as_ndarray_3d


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
