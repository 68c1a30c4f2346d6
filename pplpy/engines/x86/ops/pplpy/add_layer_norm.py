"""pplpy::AddLayerNormalization: LayerNormalization over the last axis of a residual sum,

    S = A + B;   Y = (S - mean) / sqrt(var + epsilon) * Scale + Bias     (per row of S)

with A and B of one shape and constant Scale / Bias broadcasting to the last axis; the
optional second output is S itself.  The optimiser's ``recognize_add_layer_norm`` writes it
from Add -> LayerNormalization: the kernel forms each row's sum once and normalises it while
it is in cache, so A and B are read once and the sum is written only when something else
reads it (a pre-LN transformer such as GPT-2 carries the residual stream on; a post-LN one,
BERT, does not).
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import ShapeCache, X86Kernel
from pplpy.engines.x86.ops.onnx.layer_norm import broadcast_strides
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.x86 import AddLayerNormalizationParam


class AddLayerNormKernel(X86Kernel):
    def __init__(self, op_ctx):
        super().__init__(op_ctx)
        self.weights = {i: np.array(op_ctx.constant(i), np.float32)
                        for i in (2, 3) if op_ctx.input_present(i)}
        self.packed_inputs = tuple(self.weights)
        self._expanded = ShapeCache()  # (input index, n) -> n contiguous values

    def _row_weights(self, index, n):
        value = self.weights[index].reshape(-1)  # rank and size checked by infer_shape
        return self._expanded.get((index, n), lambda: np.ascontiguousarray(
            np.broadcast_to(value, (n,))))

    def make_step(self, io):
        if not self.has_work(io):
            return None
        a, b = io.inputs[0], io.inputs[1]
        dims = tuple(a.shape.dims)
        n = dims[-1]
        if n == 0:
            raise self.op.unsupported("normalising an empty last axis (the mean would be NaN)")
        scale = self._row_weights(2, n)
        bias = self._row_weights(3, n) if 3 in self.weights else None
        total = io.outputs[1] if len(io.outputs) > 1 else None
        keep = tuple(x for x in (a.array, b.array, scale, bias, io.outputs[0].array,
                                 total.array if total is not None else None) if x is not None)
        return self.impl("layernorm_fp32").make_add_layer_norm_step(
            a.address, b.address, io.outputs[0].address,
            total.address if total is not None else 0, scale.ctypes.data,
            bias.ctypes.data if bias is not None else 0, math.prod(dims[:-1]), n,
            float(self.param.epsilon), io.num_threads, keep)


@op("pplpy", "AddLayerNormalization", since=1, param=AddLayerNormalizationParam)
class AddLayerNormalizationOp(X86OptKernel):
    """(A, B, Scale[, Bias]) -> (Y[, A + B]); float32, NDARRAY, Scale/Bias constants."""

    def infer_type(self, in_types):
        for index, data_type in enumerate(in_types):
            if data_type is not None and data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {index} is {data_type}; pplpy's "
                                       "AddLayerNormalization takes float32 only")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        a, b = tuple(in_shapes[0]), tuple(in_shapes[1])
        if a != b or len(a) < 1:
            raise self.shape_error("A and B must have one shape of rank >= 1 (the sum is not "
                                   "broadcast)", in_shapes)
        for index, name in ((2, "Scale"), (3, "Bias")):
            if index < len(in_shapes) and in_shapes[index] is not None:
                if broadcast_strides(in_shapes[index], a[-1:]) is None:
                    raise self.shape_error(f"{name} must broadcast to the last axis "
                                           f"({a[-1]} values)", in_shapes)
        return [a] * len(self.node.outputs)

    def create_kernel(self):
        for index, name in ((2, "Scale"), (3, "Bias")):
            if self.input_present(index) and self.constant(index) is None:
                raise self.unsupported(f"{name} must be a constant")
        if not self.input_present(2):
            raise self.unsupported("Scale must be given")
        return AddLayerNormKernel(self)
