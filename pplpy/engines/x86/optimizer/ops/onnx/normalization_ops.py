"""Op contexts of BatchNormalization (inference), LRN and Softmax."""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.kernels.onnx.normalization_kernels import (
    BatchNormalizationKernel,
    LRNKernel,
    SoftmaxKernel,
)
from pplpy.engines.x86.optimizer.canned import follow_input_format
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.oputils.onnx.shape_functions import normalize_axis


@register_op("", "BatchNormalization", versions=(7, 28))
class BatchNormalizationOp(X86OptKernel):
    """y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]; any format."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format

    def infer_type(self, in_types):
        if self.param.training_mode:
            raise self.unsupported("training_mode=1 (batch statistics) is not supported; "
                                   "pplpy runs inference")
        if not self.param.spatial:
            raise self.unsupported("spatial=0 (per-activation statistics) is not supported")
        if len([o for o in self.node.outputs if o]) > 1:
            raise self.unsupported("running mean/var outputs exist only in training mode")
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        x = in_shapes[0]
        if len(x) < 2:
            raise self.shape_error("input must be (N, C, ...)", in_shapes)
        for index, name in enumerate(("scale", "B", "mean", "var"), start=1):
            if in_shapes[index] is None or tuple(in_shapes[index]) != (x[1],):
                raise self.shape_error(f"{name} must have shape [{x[1]}] (one per channel)",
                                       in_shapes)
        return [x]

    def create_kernel(self):
        return BatchNormalizationKernel(self)


@register_op("", "LRN", versions=(1, 28))
class LRNOp(X86OptKernel):
    """Local response normalisation across channels (NDARRAY: it reads neighbour channels)."""

    def infer_shape(self, in_shapes, in_values):
        if len(in_shapes[0]) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if self.param.size < 1:
            raise self.shape_error(f"size must be >= 1, got {self.param.size}", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return LRNKernel(self)


@register_op("", "Softmax", versions=(1, 28))
class SoftmaxOp(X86OptKernel):
    """Before opset 13, softmax over the 2-D coercion at ``axis``; from 13, along ``axis``."""

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        rank = max(len(shape), 1)
        normalize_axis(self.param.axis, rank)
        return [shape]

    def create_kernel(self):
        return SoftmaxKernel(self)
