"""DepthToSpace and SpaceToDepth: NCHW rearrangements of blocks, any element type, as one
strided copy each (a reshape to 6-D and a transpose).

    DepthToSpace DCR: (N, b, b, C', H, W) -> transpose (0, 3, 4, 1, 5, 2) -> (N, C', H*b, W*b)
    DepthToSpace CRD: (N, C', b, b, H, W) -> transpose (0, 1, 4, 2, 5, 3)
    SpaceToDepth DCR: (N, C, H', b, W', b) -> transpose (0, 3, 5, 1, 2, 4) -> (N, C*b*b, H', W')
    SpaceToDepth CRD (28+): transpose (0, 1, 3, 5, 2, 4)
"""

from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import parse_with
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import DepthToSpaceParam

PERMS = {
    ("DepthToSpace", "DCR"): (0, 3, 4, 1, 5, 2),
    ("DepthToSpace", "CRD"): (0, 1, 4, 2, 5, 3),
    ("SpaceToDepth", "DCR"): (0, 3, 5, 1, 2, 4),
    ("SpaceToDepth", "CRD"): (0, 1, 3, 5, 2, 4),
}


class BlockKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        six, perm = self.op.geometry(x.shape.dims)
        es = x.shape.data_type.itemsize
        dims, strides = _copy.transpose_strides(six, perm, es)
        step = _copy.make_strided_copy_step(y.address, x.address, es, dims, strides)
        step.keep = keep_arrays(io)
        return step


class BlockOp(X86OptKernel):
    supported_types = ANY_TYPE

    def mode(self):
        mode = getattr(self.param, "mode", "DCR")
        if (self.node.op_type, mode) not in PERMS:
            raise self.unsupported(f'mode "{mode}" is not DCR or CRD')
        return mode

    def infer_type(self, in_types):
        self.mode()
        return super().infer_type(in_types)

    def geometry(self, dims):
        """(the 6-D view of x, the permutation) for x of ``dims``."""
        b = self.param.blocksize
        if len(dims) != 4 or b <= 0:
            raise self.shape_error(f"needs a 4-D input and a positive blocksize, got "
                                   f"blocksize {b}", [dims])
        n, c, h, w = dims
        mode = self.mode()
        if self.node.op_type == "DepthToSpace":
            if c % (b * b):
                raise self.shape_error(f"channels {c} are not a multiple of blocksize^2 "
                                       f"{b * b}", [dims])
            six = (n, b, b, c // (b * b), h, w) if mode == "DCR" else (n, c // (b * b), b, b,
                                                                        h, w)
        else:
            if h % b or w % b:
                raise self.shape_error(f"spatial dims {h}x{w} are not multiples of blocksize "
                                       f"{b}", [dims])
            six = (n, c, h // b, b, w // b, b)
        return six, PERMS[(self.node.op_type, mode)]

    def infer_shape(self, in_shapes, in_values):
        n, c, h, w = self.geometry(in_shapes[0])[0][:1] + tuple(in_shapes[0][1:])
        b = self.param.blocksize
        if self.node.op_type == "DepthToSpace":
            return [(n, c // (b * b), h * b, w * b)]
        return [(n, c * b * b, h // b, w // b)]

    def create_kernel(self):
        return BlockKernel(self)


@op("", "DepthToSpace", since=1, param=DepthToSpaceParam, parse=parse_with(DepthToSpaceParam))  # DCR only
@op("", "DepthToSpace", since=11, param=DepthToSpaceParam)  # mode DCR / CRD
class DepthToSpaceOp(BlockOp):
    """y[n, c, h*b + i, w*b + j] = x[n, channel of (i, j, c), h, w]."""


@op("", "SpaceToDepth", since=1, param=DepthToSpaceParam, parse=parse_with(DepthToSpaceParam))  # DCR only
@op("", "SpaceToDepth", since=28, param=DepthToSpaceParam)  # mode DCR / CRD
class SpaceToDepthOp(BlockOp):
    """The inverse of DepthToSpace."""
