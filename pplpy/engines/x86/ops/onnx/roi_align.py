"""Op context of RoiAlign (opsets 10 and 16).

y[r, c] = the regions rois[r] of x[batch_indices[r], c], each cut into output_height x
output_width bins; a bin's value is the average (or max) of bilinear samples on a regular
grid (sampling_ratio per axis, or ceil(region / bins)).  RoiAlign-10 places samples without
the half-pixel shift and makes malformed regions 1x1 (``output_half_pixel``), 16 adds
``coordinate_transformation_mode`` with ``half_pixel`` as default.  Regions are data: the
step (``impls/_resize_fp32.pxi``) computes every sample when it runs, one (region, channel)
plane per work item.  A batch index outside [0, N) yields NaN for its region (a step cannot
fail).  NDARRAY only.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import RoiAlign10Param, RoiAlignParam

_TRANSFORMS = ("half_pixel", "output_half_pixel")


class RoiAlignKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, rois, batch, y = io.inputs[0], io.inputs[1], io.inputs[2], io.outputs[0]
        p = self.param
        return self.impl("resize_fp32").make_roi_align_step(
            x.address, rois.address, batch.address, y.address, tuple(x.shape.dims),
            rois.shape.dims[0], p.output_height, p.output_width, p.sampling_ratio,
            p.spatial_scale, self.op.half_pixel, p.mode == "max",
            keep=(x.array, rois.array, batch.array, y.array))


@op("", "RoiAlign", since=10, param=RoiAlign10Param)
@op("", "RoiAlign", since=16, param=RoiAlignParam)  # coordinate_transformation_mode
class RoiAlignOp(X86OptKernel):
    """y[r, c, i, j] = mean (or max) of bilinear samples of bin (i, j) of region r."""

    @property
    def half_pixel(self):
        return getattr(self.param, "coordinate_transformation_mode",
                       "output_half_pixel") == "half_pixel"

    def infer_type(self, in_types):
        p = self.param
        if p.mode not in ("avg", "max"):
            raise self.unsupported(f"mode {p.mode!r} (expected 'avg' or 'max')")
        transform = getattr(p, "coordinate_transformation_mode", "output_half_pixel")
        if transform not in _TRANSFORMS:
            raise self.unsupported(f"coordinate_transformation_mode {transform!r} (expected "
                                   f"one of {list(_TRANSFORMS)})")
        if p.output_height < 1 or p.output_width < 1 or p.sampling_ratio < 0:
            raise self.unsupported(f"output {p.output_height}x{p.output_width}, sampling_ratio "
                                   f"{p.sampling_ratio}: expected an output of at least 1x1 "
                                   f"and sampling_ratio >= 0")
        if in_types[1] is not DataType.FLOAT32 or in_types[2] is not DataType.INT64:
            raise self.unsupported(f"rois of type {in_types[1]} and batch_indices of type "
                                   f"{in_types[2]} (expected float32 and int64)")
        return [super().infer_type(in_types)[0]]

    def infer_shape(self, in_shapes, in_values):
        x, rois, batch = in_shapes[:3]
        if len(x) != 4:
            raise self.shape_error("X must be (N, C, H, W)", in_shapes)
        if len(rois) != 2 or rois[1] != 4:
            raise self.shape_error("rois must be (num_rois, 4)", in_shapes)
        if len(batch) != 1 or batch[0] != rois[0]:
            raise self.shape_error("batch_indices must be (num_rois,), one per region",
                                   in_shapes)
        if rois[0] > 0 and x[1] > 0 and (x[2] == 0 or x[3] == 0):
            raise self.shape_error("X has no pixels to sample", in_shapes)
        return [(rois[0], x[1], self.param.output_height, self.param.output_width)]

    def create_kernel(self):
        return RoiAlignKernel(self)
