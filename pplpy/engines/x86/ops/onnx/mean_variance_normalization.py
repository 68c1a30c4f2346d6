"""MeanVarianceNormalization: y = (x - mean) / (std + 1e-9), statistics over ``axes`` (the
epsilon and the population std are those of the spec's function body)."""

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import ShapeCache, X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import MeanVarianceNormalizationParam


def normalized_axes(axes, rank):
    axes = sorted(normalize_axis(int(a), rank, "axes entry") for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} has duplicates")
    return tuple(axes)


class MeanVarianceNormalizationKernel(X86Kernel):
    def __init__(self, op_ctx):
        super().__init__(op_ctx)
        self._offsets = ShapeCache()  # dims -> offsets of the kept and reduced elements

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("layernorm_fp32")
        dims = io.inputs[0].shape.dims
        kept, red, run = self._offsets.get(dims, lambda: impl.mvn_offsets(
            dims, normalized_axes(self.param.axes, len(dims))))
        return impl.make_mvn_step(io.inputs[0].address, io.outputs[0].address, kept, red, run,
                                  io.inputs[0].shape.element_count,
                                  (io.inputs[0].array, io.outputs[0].array))


@op("", "MeanVarianceNormalization", since=9, param=MeanVarianceNormalizationParam)
class MeanVarianceNormalizationOp(X86OptKernel):
    """y = (x - mean) / (std + 1e-9) over axes; NDARRAY."""

    def infer_shape(self, in_shapes, in_values):
        shape = tuple(in_shapes[0])
        try:
            normalized_axes(self.param.axes, len(shape))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [shape]

    def create_kernel(self):
        return MeanVarianceNormalizationKernel(self)
