"""Op contexts of Gemm and MatMul: float32, NDARRAY, on the brgemm-based gemm impl.

A constant B is packed once when the kernel is created (shared by every runtime, the raw B
dropped; a batched B every entry, once); a B computed at run time is packed inside the step,
each panel group by the work item that uses it.  An activation fused into a Gemm or MatMul
or a chain of post-ops (post_ops: activations, a residual sum, binary ops with another
tensor) runs in the epilogue; per-channel operands are per column (the last axis).
"""

import numpy as np

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.post_chain import PostChain
from pplpy.params.onnx import GemmParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import broadcast_shapes, matmul_shape


class GemmKernel(X86Kernel):
    """Y = post_op(alpha * A' @ B' + beta * C): one compiled step per shape signature."""

    def __init__(self, op):
        super().__init__(op)
        b = op.constant(1)
        self.packed_b = None
        if b is not None:
            self.packed_b = self.impl("gemm_fp32").gemm_pack_b(
                np.ascontiguousarray(b, np.float32), bool(self.param.transB))
        c = op.constant(2) if op.input_present(2) else None
        self.c = np.ascontiguousarray(c, np.float32) if c is not None else None
        self.post_chain = PostChain(op)
        self.packed_inputs = tuple(i for i, v in ((1, self.packed_b), (2, self.c))
                                   if v is not None) + self.post_chain.packed_inputs

    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        a, b, out = io.inputs[0], io.inputs[1], io.outputs[0]
        c = io.inputs[2] if len(io.inputs) > 2 else None
        m, n = out.shape.dims
        k = a.shape.dims[0] if p.transA else a.shape.dims[1]
        keep = [a.array, out.array]
        kwargs = {"trans_a": bool(p.transA), "alpha": float(p.alpha),
                  "post_chain": self.post_chain.step_chain(io, n, keep)}
        if self.packed_b is not None:
            b_address = self.packed_b.ctypes.data
            keep.append(self.packed_b)
        else:  # B computed at run time: the step packs it
            b_address = b.address
            keep.append(b.array)
            kwargs.update(b_packed=False, trans_b=bool(p.transB))
        beta = float(p.beta)
        if c is not None and beta != 0.0:
            if self.c is not None:
                cv = self.c
                if cv.size == 1 or cv.shape in ((n,), (1, n)):  # a row vector: the bias
                    kwargs["bias"] = np.broadcast_to(cv.reshape(-1), (n,)) * np.float32(beta)
                else:
                    addend = np.ascontiguousarray(np.broadcast_to(cv, (m, n)))
                    kwargs.update(addend=addend.ctypes.data, beta=beta)
                    keep.append(addend)
            elif tuple(c.shape.dims) == (m, n):
                kwargs.update(addend=c.address, beta=beta)
                keep.append(c.array)
            else:  # broadcast at run time: read through strides (0 along broadcast dims)
                s0, s1 = (s // 4 for s in np.broadcast_to(c.array, (m, n)).strides)
                kwargs.update(c=c.address, c_s0=s0, c_s1=s1, beta=beta)
                keep.append(c.array)
        return self.impl("gemm_fp32").make_gemm_step(
            a.address, b_address, out.address, m, k, n, io.num_threads, keep=tuple(keep),
            **kwargs)


class MatMulKernel(X86Kernel):
    """Y = post_op(numpy.matmul(A, B)): one compiled step; a constant B is packed once, every
    batch entry."""

    def __init__(self, op):
        super().__init__(op)
        b = op.constant(1)
        self.packed_b = None
        if b is not None:
            impl = self.impl("gemm_fp32")
            b = np.ascontiguousarray(b, np.float32)
            b2 = b.reshape(-1, 1) if b.ndim == 1 else b
            entries = b2.reshape((int(np.prod(b2.shape[:-2])),) + b2.shape[-2:])
            if len(entries):  # (no entries: every output is empty, no step is made)
                self.packed_b = np.stack([impl.gemm_pack_b(e, False) for e in entries])
        self.post_chain = PostChain(op)
        self.packed_inputs = ((1,) if self.packed_b is not None else ()) + \
            self.post_chain.packed_inputs

    def make_step(self, io):
        if not self.has_work(io):
            return None
        a, b, out = io.inputs[0], io.inputs[1], io.outputs[0]
        a_dims, b_dims = tuple(a.shape.dims), tuple(b.shape.dims)
        a2 = (1,) + a_dims if len(a_dims) == 1 else a_dims
        b2 = b_dims + (1,) if len(b_dims) == 1 else b_dims
        m, k, n = a2[-2], b2[-2], b2[-1]
        keep = [a.array, out.array]
        kwargs = {"post_chain": self.post_chain.step_chain(io, n, keep)}
        if self.packed_b is not None:
            b_address = self.packed_b.ctypes.data
            entry = self.packed_b[0].size
            keep.append(self.packed_b)
        else:
            b_address = b.address
            entry = k * n
            keep.append(b.array)
            kwargs["b_packed"] = False
        if len(b2) == 2:
            # Every batch entry of A meets the same B: one product with the batch folded
            # into M.
            m = int(np.prod(a2[:-1]))
        else:
            batch = np.broadcast_shapes(a2[:-2], b2[:-2])
            kwargs["batch"] = int(np.prod(batch))

            def offsets(batch_dims, size):
                index = np.arange(int(np.prod(batch_dims)), dtype=np.intp).reshape(batch_dims)
                return np.broadcast_to(index, batch).reshape(-1) * size

            kwargs["a_offsets"] = offsets(a2[:-2], m * k)
            kwargs["b_offsets"] = offsets(b2[:-2], entry)
        return self.impl("gemm_fp32").make_gemm_step(
            a.address, b_address, out.address, m, k, n, io.num_threads, keep=tuple(keep),
            **kwargs)


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
