"""Op contexts of Gemm and MatMul: float32, NDARRAY, on the brgemm-based gemm impl.

A constant B is packed once when the kernel is created (shared by every runtime); a B
computed at run time is packed on each run.
"""

from pplpy.engines.x86.kernels.onnx.matmul_kernels import GemmKernel, MatMulKernel
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.oputils.onnx.shape_functions import broadcast_shapes, matmul_shape


@register_op("", "Gemm", versions=(7, 28))
class GemmOp(X86OptKernel):
    """Y = alpha * A' @ B' + beta * C, A' = A.T if transA, B' = B.T if transB."""

    def infer_shape(self, in_shapes, in_values):
        a, b = in_shapes[0], in_shapes[1]
        if len(a) != 2 or len(b) != 2:
            raise self.shape_error("A and B must be 2-D", in_shapes)
        m, k = (a[1], a[0]) if self.param.transA else a
        kb, n = (b[1], b[0]) if self.param.transB else b
        if k != kb:
            raise self.shape_error(f"inner dims differ: {k} (A') vs {kb} (B')", in_shapes)
        c = in_shapes[2] if len(in_shapes) > 2 else None
        if c is not None:
            try:
                if broadcast_shapes(c, (m, n)) != (m, n):
                    raise ValueError
            except ValueError:
                raise self.shape_error(f"C {list(c)} does not broadcast to [{m}, {n}]",
                                       in_shapes) from None
        return [(m, n)]

    def create_kernel(self):
        return GemmKernel(self)


@register_op("", "MatMul", versions=(1, 28))
class MatMulOp(X86OptKernel):
    """numpy.matmul semantics: batched, broadcast batch dims, 1-D operands promoted."""

    def infer_shape(self, in_shapes, in_values):
        try:
            return [matmul_shape(in_shapes[0], in_shapes[1])]
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def create_kernel(self):
        return MatMulKernel(self)
