"""Op contexts of Gemm and MatMul: float32, NDARRAY, on the brgemm-based gemm impl.

A constant B is packed once when the kernel is created (shared by every runtime); a B
computed at run time is packed on each run.
"""

import itertools

import numpy as np

from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import GemmParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import broadcast_shapes, matmul_shape


class GemmKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        b = op.constant(1)
        self.packed_b = None
        if b is not None:
            self.packed_b = self.impl("gemm_fp32").gemm_pack_b(
                np.ascontiguousarray(b, np.float32), bool(self.param.transB))

    def do_execute(self, ctx):
        impl = self.impl("gemm_fp32")
        p = self.param
        a, b = ctx.inputs[0], ctx.inputs[1]
        if p.transA:
            a = np.ascontiguousarray(a.T)
        packed = self.packed_b
        if packed is None:
            packed = impl.gemm_pack_b(np.ascontiguousarray(b), bool(p.transB))
        m, n = ctx.output_shapes[0].dims
        k = a.shape[1]
        bias, addend, beta = None, None, 0.0
        c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
        if c is not None and p.beta != 0.0:
            c = np.asarray(c, np.float32)
            if c.ndim == 0 or c.shape in ((n,), (1, n)) or c.size == 1:
                bias = np.ascontiguousarray(
                    np.broadcast_to(c.reshape(-1) if c.size == n else c.reshape(()), (n,))
                    * np.float32(p.beta), np.float32)
            else:
                addend = np.ascontiguousarray(np.broadcast_to(c, (m, n)), np.float32)
                beta = float(p.beta)
        impl.gemm_fp32(a, packed, k, n, ctx.outputs[0], float(p.alpha), bias, addend, beta,
                       int(PostOp.NONE), 0.0, 0.0, ctx.num_threads)


class MatMulKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        b = op.constant(1)
        self.packed_b = None
        if b is not None and b.ndim == 2:
            self.packed_b = self.impl("gemm_fp32").gemm_pack_b(
                np.ascontiguousarray(b, np.float32), False)

    def do_execute(self, ctx):
        impl = self.impl("gemm_fp32")
        a, b = ctx.inputs[0], ctx.inputs[1]
        out = ctx.outputs[0]
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        k, n = b2.shape[-2], b2.shape[-1]
        if k == 0:
            out[...] = 0
            return
        if b2.ndim == 2:
            # Every batch of A meets the same B: one call with the batch folded into M.
            packed = self.packed_b if self.packed_b is not None else impl.gemm_pack_b(
                np.ascontiguousarray(b2), False)
            rows = a2.reshape(-1, k)
            impl.gemm_fp32(rows, packed, k, n, out.reshape(rows.shape[0], n), 1.0, None, None,
                           0.0, int(PostOp.NONE), 0.0, 0.0, ctx.num_threads)
            return
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        m = a2.shape[-2]
        a_b = np.broadcast_to(a2, batch + a2.shape[-2:])
        b_b = np.broadcast_to(b2, batch + b2.shape[-2:])
        out3 = out.reshape(batch + (m, n))
        for index in itertools.product(*(range(d) for d in batch)):
            packed = impl.gemm_pack_b(np.ascontiguousarray(b_b[index]), False)
            impl.gemm_fp32(np.ascontiguousarray(a_b[index]), packed, k, n, out3[index], 1.0,
                           None, None, 0.0, int(PostOp.NONE), 0.0, 0.0, ctx.num_threads)


@op("", "Gemm", since=7, param=GemmParam)  # before 7, C needed the "broadcast" attribute
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


@op("", "MatMul", since=1)
class MatMulOp(X86OptKernel):
    """numpy.matmul semantics: batched, broadcast batch dims, 1-D operands promoted."""

    def infer_shape(self, in_shapes, in_values):
        try:
            return [matmul_shape(in_shapes[0], in_shapes[1])]
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def create_kernel(self):
        return MatMulKernel(self)
