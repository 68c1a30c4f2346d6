"""AffineGrid's op context (opset 20): the sampling grid of a batch of affine matrices.

grid[n, *o, :] = theta[n] @ (p(o), 1), p(o) the normalised position of output point o (x
first), for a 2-D (theta (N, 2, 3), size (N, C, H, W)) or 3-D (theta (N, 3, 4), size (N, C,
D, H, W)) output.  ``size`` decides the output shape, so it must be known when the plan is
made (a constant, a fed input or a value computed on the host).  Computed in double and
rounded to float32 as onnx.reference does.  NDARRAY only.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, ints_of
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.onnx.spatial_common import SPATIAL_FAMILY
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import AffineGridParam


class AffineGridKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        theta, y = io.inputs[0], io.outputs[0]
        dims = y.shape.dims
        return self.impl(SPATIAL_FAMILY).make_affine_grid_step(
            theta.address, y.address, dims[0], tuple(dims[1:-1]),
            bool(self.param.align_corners), keep=keep_arrays(io))


@op("", "AffineGrid", since=20, param=AffineGridParam)
class AffineGridOp(X86OptKernel):
    """grid = theta applied to the regular grid of ``size``."""

    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "size", (DataType.INT64,))
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        size = ints_of(self, in_shapes, in_values, 1,
                       "size (the output's (N, C, *spatial dims), which decides its shape)")
        if len(size) not in (4, 5) or any(s < 0 for s in size):
            raise self.shape_error(f"size {size} must be (N, C, H, W) or (N, C, D, H, W) of "
                                   f"non-negative dims", in_shapes)
        rank = len(size) - 2
        want = (size[0], rank, rank + 1)
        if tuple(in_shapes[0]) != want:
            raise self.shape_error(f"theta must have shape {list(want)} for size {size}",
                                   in_shapes)
        return [(size[0],) + tuple(size[2:]) + (rank,)]

    def create_kernel(self):
        return AffineGridKernel(self)
