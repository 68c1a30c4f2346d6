"""Kernels of Gemm and MatMul over the gemm impl (``gemm_pack_b`` / ``gemm_fp32``)."""

import itertools

import numpy as np

from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.kernels.kernel import X86Kernel


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
