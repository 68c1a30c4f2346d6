"""pplpy::MatMulBias: Y = A @ B + bias with A of rank >= 2, B a constant K x N matrix and
bias a constant vector of N values, made by the optimiser's ``fuse_matmul_bias`` from a
transformer projection (MatMul then Add of the bias) whose A is 3-D, which ONNX's Gemm
cannot take.

It runs as one gemm step with A's leading dims folded into M and the bias added in the
epilogue, so the Add's pass over the output is gone and an activation after it (Gelu, Relu)
fuses into the same epilogue (the engine's fuse_post_ops).
"""

import math

import numpy as np

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.post_chain import PostChain
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.pplpy.standard_twins import ParamFromFusedParam, parse_post_ops_only
from pplpy.oputils.onnx.shape_functions import matmul_shape


class MatMulBiasKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        impl = self.impl("gemm_fp32")
        self.packed_b = impl.gemm_pack_b(np.ascontiguousarray(op.constant(1), np.float32),
                                         False)
        self.bias = np.ascontiguousarray(op.constant(2).reshape(-1), np.float32)
        self.post_chain = PostChain(op)
        self.packed_inputs = (1, 2) + self.post_chain.packed_inputs

    def make_step(self, io):
        if not self.has_work(io):
            return None
        a, out = io.inputs[0], io.outputs[0]
        dims = tuple(a.shape.dims)
        m, k, n = math.prod(dims[:-1]), dims[-1], self.bias.size
        keep = [a.array, out.array, self.packed_b, self.bias]
        post_chain = self.post_chain.step_chain(io, n, keep)
        return self.impl("gemm_fp32").make_gemm_step(
            a.address, self.packed_b.ctypes.data, out.address, m, k, n, io.num_threads,
            bias=self.bias, post_chain=post_chain, keep=tuple(keep))


@op("pplpy", "MatMulBias", since=1, parse=parse_post_ops_only)
class MatMulBiasOp(ParamFromFusedParam, X86OptKernel):
    """A (..., M, K) @ B (K, N) + bias (N,); B and bias constants; float32, NDARRAY.  A saved
    optimised model writes its fused post-ops as attributes (ops/post_op_attributes.py)."""

    def infer_shape(self, in_shapes, in_values):
        a, b, bias = (tuple(s) for s in in_shapes[:3])
        if len(a) < 2 or len(b) != 2 or bias != (b[1],):
            raise self.shape_error("expected A of rank >= 2, B of rank 2 and a bias of B's "
                                   "columns", in_shapes)
        try:
            return [matmul_shape(a, b)]
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def create_kernel(self):
        if self.constant(1) is None or self.constant(2) is None:
            raise self.unsupported("B and bias must be constants")
        return MatMulBiasKernel(self)
