"""Col2Im's op context (opset 18): column blocks put back into a batched image (PyTorch's
fold), any number of image dims.

input (N, C * prod(block_shape), L) -> y (N, C, *image_shape), where L is the number of
positions of the block sliding over the padded image with the given strides and dilations,
and overlapping entries add up.  ``image_shape`` and ``block_shape`` decide the output shape
and must be known when the plan is made.  float32, NDARRAY.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, ints_of, prod
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.onnx.spatial_common import SPATIAL_FAMILY, check_float32, window
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import Col2ImParam


class Col2ImKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        shapes = [s.shape.dims if s is not None else None for s in io.inputs]
        image, block, geometry = self.op.geometry(shapes, [s.array for s in io.inputs])
        return self.impl(SPATIAL_FAMILY).make_col2im_step(
            x.address, y.address, y.shape.dims[0] * y.shape.dims[1], image, block,
            geometry.out, geometry.strides, geometry.dilations, geometry.pads_begin,
            keep=keep_arrays(io))


@op("", "Col2Im", since=18, param=Col2ImParam)
class Col2ImOp(X86OptKernel):
    """y = the image whose column blocks are the input."""

    value_inputs = (1, 2)

    def infer_type(self, in_types):
        check_float32(self, in_types, {0: "input"})
        check_index_type(self, in_types, 1, "image_shape", (DataType.INT64,))
        check_index_type(self, in_types, 2, "block_shape", (DataType.INT64,))
        return super().infer_type(in_types)

    def geometry(self, in_shapes, in_values):
        """(image_shape, block_shape, the PoolWindow of the block over the image)."""
        image = ints_of(self, in_shapes, in_values, 1, "image_shape (the output's spatial "
                        "dims)")
        block = ints_of(self, in_shapes, in_values, 2, "block_shape (the block's dims, which "
                        "decide the channel count)")
        if not image or len(block) != len(image):
            raise self.shape_error(f"image_shape {image} and block_shape {block} must have "
                                   f"the same length, at least 1", in_shapes)
        if any(b < 1 for b in block) or any(d < 0 for d in image):
            raise self.shape_error(f"block_shape {block} must be positive and image_shape "
                                   f"{image} non-negative", in_shapes)
        return image, block, window(self, in_shapes, image, block, self.param)

    def infer_shape(self, in_shapes, in_values):
        x = in_shapes[0]
        image, block, geometry = self.geometry(in_shapes, in_values)
        if len(x) != 3:
            raise self.shape_error("input must be (N, C * prod(block_shape), L)", in_shapes)
        size = prod(block)
        if x[1] % size:
            raise self.shape_error(f"input's dim 1 ({x[1]}) must be a multiple of the block "
                                   f"size {size} (block_shape {block})", in_shapes)
        if x[2] != prod(geometry.out):
            raise self.shape_error(f"input's dim 2 ({x[2]}) must be the number of block "
                                   f"positions, {' x '.join(map(str, geometry.out))} = "
                                   f"{prod(geometry.out)} for image_shape {image}", in_shapes)
        return [(x[0], x[1] // size) + tuple(image)]

    def create_kernel(self):
        return Col2ImKernel(self)
