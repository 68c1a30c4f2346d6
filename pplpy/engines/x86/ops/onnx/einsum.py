"""Einsum (12): numpy.einsum semantics for an ONNX equation.

    "bhqd,bhkd->bhqk"   explicit output;   "ij,jk"   implicit (labels seen once, sorted)
    "...ii->...i"       ellipsis (broadcast, right-aligned) and repeated labels (diagonals)

The equation is planned once per input-shape signature into one of two steps:

- a batched GEMM (``_gemm_fp32``) when the contraction is matmul-shaped: float32, two
  operands, every label either a batch label (in both operands and the output), the
  contracted label (in both, not in the output), or a row / column label (one operand and
  the output), at most one of each of the last three, the output ordered (batch..., row,
  column) or (batch..., column, row) (the operands are swapped: C^T = B^T A^T), and each
  operand stored with unit stride along the row/contracted or column/contracted dim (the
  GEMM reads strided rows and transposed operands in place: no copy); labels of size 1
  are left out first, and a batch label broadcast from size 1 reads its operand again;
- otherwise the direct strided contraction of ``_einsum`` (any number of operands,
  diagonals, sums, broadcasting; float32, float64, int32, int64).
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _einsum
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.einsum_equation import parse_equation
from pplpy.params.onnx import EinsumParam

_TYPES = (DataType.FLOAT32, DataType.FLOAT64, DataType.INT32, DataType.INT64)
def label_sizes(labels, shapes):
    """{label: size} with broadcasting of size-1 dims; ValueError on a mismatch."""
    sizes = {}
    for term_labels, shape in zip(labels, shapes):
        for c, d in zip(term_labels, shape):
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
            elif d != 1 and d != sizes[c]:
                raise ValueError(f"label {c!r} has sizes {sizes[c]} and {d}")
    return sizes


def _strides_of(dims):
    strides, step = [], 1
    for d in reversed(dims):
        strides.append(step)
        step *= d
    return list(reversed(strides))


class EinsumKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        shapes = [tuple(s.shape.dims) for s in io.inputs]
        labels, out = parse_equation(self.param.equation, [len(s) for s in shapes])
        sizes = label_sizes(labels, shapes)
        y = io.outputs[0]
        keep = [s.array for s in io.inputs] + [y.array]
        # Element strides of each operand per label (0: absent or broadcast; summed over a
        # repeated label: its diagonal).
        strides = []
        for term_labels, shape in zip(labels, shapes):
            st = {}
            for c, d, s in zip(term_labels, shape, _strides_of(shape)):
                st[c] = st.get(c, 0) + (s if d != 1 or sizes[c] == 1 else 0)
            strides.append(st)
        summed = [c for c in sizes if c not in out]
        step = None
        if y.shape.data_type is DataType.FLOAT32:
            step = self._gemm_step(io, labels, out, shapes, sizes, strides, keep)
        if step is not None:
            return step
        return _einsum.make_einsum_step(
            y.shape.data_type.numpy, [s.address for s in io.inputs], y.address,
            [sizes[c] for c in out], [sizes[c] for c in summed],
            [[st.get(c, 0) for c in out + summed] for st in strides], tuple(keep))

    def _gemm_step(self, io, labels, out, shapes, sizes, strides, keep):
        """The batched GEMM for a matmul-shaped contraction, or None."""
        if len(labels) != 2 or any(len(set(t)) != len(t) for t in labels):
            return None
        # Labels of size 1 everywhere index nothing: drop them (CvT's attention,
        # "bhlk,bhtk->bhlt" at batch 1 and one head, took the direct step and ran at
        # 0.15 GFLOP/s).  A batch label broadcast from size 1 is a batch offset stride of 0.
        labels = [[c for c in t if sizes[c] != 1] for t in labels]
        out = [c for c in out if sizes[c] != 1]
        a_set, b_set, o_set = set(labels[0]), set(labels[1]), set(out)
        batch = [c for c in out if c in a_set and c in b_set]
        ks = [c for c in a_set & b_set if c not in o_set]
        ms = [c for c in out if c in a_set and c not in b_set]
        ns = [c for c in out if c in b_set and c not in a_set]
        if len(ks) != 1 or len(ms) > 1 or len(ns) > 1 or (a_set | b_set) - o_set - set(ks):
            return None
        rest = out[len(batch):]
        if out[:len(batch)] != batch or len(rest) != len(ms) + len(ns):
            return None
        sa, sb = strides
        if rest == ms + ns:
            a, b, m_l, n_l = 0, 1, ms, ns
        elif rest == ns + ms:
            a, b, m_l, n_l, sa, sb = 1, 0, ns, ms, sb, sa
        else:
            return None
        k = ks[0]
        if sa[k] == 0 or sb[k] == 0:
            return None  # the contracted dim broadcast from size 1: the direct step
        m, n = (sizes[m_l[0]] if m_l else 1), (sizes[n_l[0]] if n_l else 1)
        kk = sizes[k]
        am = sa.get(m_l[0], 0) if m_l else 0
        bn = sb.get(n_l[0], 0) if n_l else 0
        # A[i] is M x K read along K (row stride lda), or stored K x M (trans_a); B[i] is
        # K x N read along N (row stride ldb), or stored N x K (trans_b).
        kwargs = {"b_packed": False}
        if sa[k] == 1:
            kwargs["lda"] = am if m > 1 else kk
        elif m == 1 or am == 1:
            kwargs["trans_a"], kwargs["lda"] = True, sa[k]
        else:
            return None
        if n == 1 or bn == 1:
            kwargs["ldb"] = sb[k]
        elif sb[k] == 1:
            kwargs["trans_b"], kwargs["ldb"] = True, bn
        else:
            return None
        nb = math.prod(sizes[c] for c in batch)
        if nb > 1:
            index = np.indices([sizes[c] for c in batch]).reshape(len(batch), -1)
            kwargs["batch"] = nb
            kwargs["a_offsets"] = sum(index[i] * sa[c] for i, c in enumerate(batch))
            kwargs["b_offsets"] = sum(index[i] * sb[c] for i, c in enumerate(batch))
        x_a, x_b = io.inputs[a], io.inputs[b]
        return self.impl("gemm_fp32").make_gemm_step(
            x_a.address, x_b.address, io.outputs[0].address, m, kk, n, io.num_threads,
            keep=tuple(keep), **kwargs)


@op("", "Einsum", since=12, param=EinsumParam)
class EinsumOp(X86OptKernel):
    """numpy.einsum over float32, float64, int32 or int64 operands; NDARRAY."""

    supported_types = _TYPES  # float64 too: the direct step computes in it

    def infer_type(self, in_types):
        first = in_types[0]
        for index, data_type in enumerate(in_types):
            if data_type not in _TYPES:
                raise self.unsupported(f"input {index} is {data_type}; pplpy's Einsum takes "
                                       f"{', '.join(str(t) for t in _TYPES)}")
            if data_type is not first:
                raise self.unsupported(f"inputs have types {first} and {data_type}")
        return [first]

    def infer_shape(self, in_shapes, in_values):
        try:
            labels, out = parse_equation(self.param.equation, [len(s) for s in in_shapes])
            sizes = label_sizes(labels, in_shapes)
        except ValueError as exc:
            raise self.shape_error(f"equation {self.param.equation!r}: {exc}",
                                   in_shapes) from exc
        return [tuple(sizes[c] for c in out)]

    def create_kernel(self):
        return EinsumKernel(self)
