"""TfIdfVectorizer (opset 9): counts of pooled n-grams (with skips) in each row of integer
tokens, weighted as TF, IDF or TFIDF.

x is [C] (one row) or [B, C] of int32 or int64 tokens; y is [out] or [B, out] float32, out
= max(ngram_indexes) + 1.  The pool (``pool_int64s``) becomes sorted lookup tables once,
when the kernel is made; a string pool (``pool_strings``) raises UnsupportedOpError: pplpy
has no string tensors.  One compiled step (``_tfidf``).
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _tfidf
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import TfIdfVectorizerParam


class TfIdfKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        p = self.param
        self.tables = _tfidf.pool_tables(p.pool_int64s, p.ngram_counts, p.ngram_indexes,
                                         p.min_gram_length, p.max_gram_length)
        self.weights = np.asarray(p.weights, np.float32) if p.weights else None

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = tuple(x.shape.dims)
        rows, cols = (dims[0], dims[1]) if len(dims) == 2 else (1, x.shape.element_count)
        p = self.param
        step = _tfidf.make_tfidf_step(
            x.shape.data_type.numpy, x.address, y.address, rows, cols, self.op.out_size(),
            p.mode, p.min_gram_length, p.max_gram_length, p.max_skip_count, self.tables,
            self.weights, keep_arrays(io))
        step.label = self.node.name
        return step


@op("", "TfIdfVectorizer", since=9, param=TfIdfVectorizerParam)
class TfIdfVectorizerOp(X86OptKernel):
    """y = weighted counts of the pool's n-grams per row of integer tokens."""

    supported_types = (DataType.INT32, DataType.INT64)

    def out_size(self):
        return max(int(i) for i in self.param.ngram_indexes) + 1

    def infer_type(self, in_types):
        p = self.param
        if p.pool_strings:
            raise self.unsupported("pool_strings: pplpy has no string tensors (pool_int64s "
                                   "with int32/int64 tokens is supported)")
        if p.mode not in _tfidf.MODES:
            raise self.unsupported(f"mode {p.mode!r}: expected TF, IDF or TFIDF")
        if not p.ngram_indexes or min(p.ngram_indexes) < 0:
            raise self.unsupported("ngram_indexes must be non-empty and non-negative")
        if not 1 <= p.min_gram_length <= p.max_gram_length or p.max_skip_count < 0:
            raise self.unsupported(f"min_gram_length {p.min_gram_length}, max_gram_length "
                                   f"{p.max_gram_length}, max_skip_count {p.max_skip_count}: "
                                   "expected 1 <= min <= max and skip >= 0")
        if p.weights and len(p.weights) < self.out_size():
            raise self.unsupported(f"{len(p.weights)} weights for {self.out_size()} outputs")
        try:
            _tfidf.pool_tables(p.pool_int64s, p.ngram_counts, p.ngram_indexes,
                               p.min_gram_length, p.max_gram_length)
        except ValueError as exc:
            raise self.unsupported(str(exc)) from None
        super().infer_type(in_types)
        return [DataType.FLOAT32]

    def infer_shape(self, in_shapes, in_values):
        x = tuple(in_shapes[0])
        if len(x) > 2:
            raise self.shape_error("the input must be [C] or [B, C]", in_shapes)
        return [(x[0], self.out_size()) if len(x) == 2 else (self.out_size(),)]

    def create_kernel(self):
        return TfIdfKernel(self)
