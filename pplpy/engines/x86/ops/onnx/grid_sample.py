"""GridSample's op context (opsets 16, 20 and 22).

y[n, c, o] = X[n, c] interpolated at the normalised position grid[n, o] (x first: the last
entry of a grid vector indexes X's first spatial dim).  GridSample-16 takes 4-D X and names
its modes bilinear / nearest / bicubic; 20 generalises to N-D and renames them linear /
nearest / cubic; 22 only adds bfloat16.  pplpy samples 1 to 3 spatial dims (2-D images and
3-D volumes, and 1-D for free) in float32, every mode, padding mode and align_corners.  The
grid is data, so the step (``impls/_spatial_fp32.pxi``) computes every sample when it runs.
NDARRAY only.
"""

from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import prod
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.onnx.spatial_common import SPATIAL_FAMILY, check_float32
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import GridSample16Param, GridSampleParam

# The kernel's mode names, by the name each opset uses.
_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
_PADDINGS = ("zeros", "border", "reflection")
_MAX_SPATIAL = 3


class GridSampleKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, grid, y = io.inputs[0], io.inputs[1], io.outputs[0]
        return self.impl(SPATIAL_FAMILY).make_grid_sample_step(
            x.address, grid.address, y.address, tuple(x.shape.dims),
            prod(grid.shape.dims[1:-1]), self.op.kernel_mode(), self.param.padding_mode,
            bool(self.param.align_corners), keep=keep_arrays(io))


@op("", "GridSample", since=16, param=GridSample16Param)
@op("", "GridSample", since=20, param=GridSampleParam)  # N-D; modes linear / cubic
@op("", "GridSample", since=22, param=GridSampleParam)  # adds bfloat16 (not a pplpy type)
class GridSampleOp(X86OptKernel):
    """y[n, c, *o] = X[n, c] sampled at grid[n, *o, :]."""

    def kernel_mode(self):
        """The mode in the kernel's names (linear / nearest / cubic)."""
        modes = _MODES_16 if self.node.opset < 20 else _MODES_20
        if self.param.mode not in modes:
            raise self.unsupported(f"mode {self.param.mode!r} (opset {self.node.opset} has "
                                   f"{list(modes)})")
        return modes[self.param.mode]

    def infer_type(self, in_types):
        self.kernel_mode()  # an unknown mode is refused at load
        if self.param.padding_mode not in _PADDINGS:
            raise self.unsupported(f"padding_mode {self.param.padding_mode!r} (expected one "
                                   f"of {list(_PADDINGS)})")
        check_float32(self, in_types, {0: "X", 1: "grid"})
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        x, grid = in_shapes[:2]
        rank = len(x) - 2
        if rank < 1:
            raise self.shape_error("X must be (N, C, D1, ..., Dr) with r >= 1 spatial dims",
                                   in_shapes)
        if self.node.opset < 20 and rank != 2:
            raise self.shape_error("GridSample-16 takes 4-D X (N, C, H, W) only; opset 20 "
                                   "samples volumes", in_shapes)
        if rank > _MAX_SPATIAL:
            raise self.unsupported(f"{rank} spatial dims: pplpy samples 1 to {_MAX_SPATIAL}")
        if len(grid) != rank + 2:
            raise self.shape_error(f"grid must have rank {rank + 2}, (N, *output dims, "
                                   f"{rank}) for X of rank {rank + 2}", in_shapes)
        if grid[-1] != rank:
            raise self.shape_error(f"grid's last dim is {grid[-1]}; it must be {rank}, one "
                                   f"coordinate per spatial dim of X", in_shapes)
        if grid[0] != x[0]:
            raise self.shape_error(f"grid's batch dim {grid[0]} differs from X's {x[0]}",
                                   in_shapes)
        out = (x[0], x[1]) + tuple(grid[1:-1])
        if all(out) and not all(x[2:]):
            raise self.shape_error("X has no pixels to sample (an empty spatial dim)",
                                   in_shapes)
        return [out]

    def create_kernel(self):
        return GridSampleKernel(self)
