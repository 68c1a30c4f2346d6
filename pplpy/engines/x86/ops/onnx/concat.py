"""Concat's op context: any element type in NDARRAY; float32 channel concatenation stays
in N16CX when every input arrives in N16CX, so a Conv -> Concat -> Conv chain needs no
reorders."""

import math

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import concat_shape, normalize_axis
from pplpy.params.onnx import ConcatParam


class ConcatKernel(DataMovementKernel):
    """Block copies: in NDARRAY each output row (the dims before ``axis``) is every input's
    row in turn; in N16CX channel concat each output channel block is filled from lane runs
    of the input blocks (input channel j lands at lane (offset + j) % 16 of block
    (offset + j) // 16), its padding lanes zeroed so they stay finite."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        out = y.shape
        inputs = io.inputs
        es = out.data_type.itemsize
        if out.data_format is DataFormat.N16CX:
            step = _copy.make_concat_n16cx_step(
                y.address, [x.address for x in inputs], [x.shape.dims[1] for x in inputs],
                out.dims[0], math.prod(out.dims[2:]), es)
        else:
            axis = normalize_axis(self.param.axis, out.rank)
            outer = math.prod(out.dims[:axis])
            segs = [math.prod(x.shape.dims[axis:]) * es for x in inputs]
            step = _copy.make_concat_step(y.address, [x.address for x in inputs], segs, outer)
        step.keep = (step.keep, keep_arrays(io))
        return step


@op("", "Concat", since=4, param=ConcatParam)  # axis is required from 4
class ConcatOp(X86OptKernel):
    """y = concatenate(inputs, axis); inputs share their type and all dims but ``axis``."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    supported_types = ANY_TYPE

    def infer_shape(self, in_shapes, in_values):
        if any(s is None for s in in_shapes):
            raise self.shape_error("every input must be given (no empty names)", in_shapes)
        try:
            out, _ = concat_shape(in_shapes, self.param.axis)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [out]

    def select_format(self, in_formats, in_shapes):
        """N16CX when every input is N16CX, rank >= 3 and the axis is the channel axis."""
        n = len(in_formats)
        if all(f is DataFormat.N16CX for f in in_formats) and self._is_channel_concat(in_shapes):
            return [DataFormat.N16CX] * n, [DataFormat.N16CX]
        return [DataFormat.NDARRAY] * n, [DataFormat.NDARRAY]

    def _is_channel_concat(self, in_shapes):
        first = in_shapes[0] if in_shapes else None
        if first is None or len(first) < 3:
            return False
        try:
            return normalize_axis(self.param.axis, len(first)) == 1
        except ValueError:
            return False

    def create_kernel(self):
        return ConcatKernel(self)
