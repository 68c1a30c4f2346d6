"""LpNormalization: y = x / ||x||_p along ``axis``, p in {1, 2} (0 where the norm is 0, as
in onnx's reference)."""

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.log_softmax import AxisKernel, AxisOp
from pplpy.params.onnx import LpNormalizationParam


@op("", "LpNormalization", since=1, param=LpNormalizationParam)
class LpNormalizationOp(AxisOp):
    """y = x / sum(|x| ** p) ** (1 / p) along axis; NDARRAY."""

    def infer_shape(self, in_shapes, in_values):
        if self.param.p not in (1, 2):
            raise self.unsupported(f"p={self.param.p}: the spec allows only 1 and 2")
        return super().infer_shape(in_shapes, in_values)

    def create_kernel(self):
        return AxisKernel(self, f"l{self.param.p}", False)
