"""Split's op context: y_i = x[..., offset_i : offset_i + size_i, ...] along ``axis``, any
element type.

The sizes are the ``split`` attribute (opsets 1-12; opset 1 also takes them as input 1),
the ``split`` input (13+), ``num_outputs`` chunks of ceil(dim / n) with a smaller last one
(18+), or, with none of these, equal parts for the outputs.  They decide the output shapes,
so an input ``split`` must be known when the plan is made.  Each output is a strided copy;
the steps of all outputs run as one group.  A channel split of an N16CX tensor stays blocked:
a part made of whole channel blocks is a block copy, any other a channel map (lanes move).
"""

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import (
    check_index_type,
    ints_of,
    n16cx_channel_step,
    parse_with,
    prod,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import PplError
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import SplitParam

LANES = 16


class SplitKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x = io.inputs[0]
        dims = x.shape.dims
        values = [s.array if s is not None else None for s in io.inputs]
        axis, sizes = self.op.sizes([s.shape.dims if s else None for s in io.inputs], values)
        es = x.shape.data_type.itemsize
        steps, offset = [], 0
        blocked = x.shape.data_format is DataFormat.N16CX
        if blocked:  # physical (N, C/16, S, 16): whole blocks per output
            pdims = x.shape.physical_dims
            outer, axis_dim, inner = pdims[0], pdims[1], prod(pdims[2:])
        else:
            outer, axis_dim, inner = prod(dims[:axis]), dims[axis], prod(dims[axis + 1:])
        for y, size in zip(io.outputs, sizes):
            lanes_move = blocked and (offset % LANES or (size % LANES and offset + size != dims[1]))
            if y is not None and y.shape.element_count > 0 and lanes_move:
                # Lanes move (or the part ends inside a block whose other lanes belong to
                # the next part, and the output's padding lanes must be zero): a channel map.
                steps.append(n16cx_channel_step(self, y, x, range(offset, offset + size)))
            elif y is not None and y.shape.element_count > 0:
                first = offset // LANES if blocked else offset
                count = y.shape.physical_dims[1] if blocked else size
                steps.append(_copy.make_strided_copy_step(
                    y.address, x.address + first * inner * es, es, [outer, count, inner],
                    [axis_dim * inner * es, inner * es, es]))
            offset += size
        if not steps:
            return None
        step = steps[0] if len(steps) == 1 else _copy.make_group_step(steps)
        step.keep = (step.keep, keep_arrays(io))
        return step


@op("", "Split", since=1, param=SplitParam, parse=parse_with(SplitParam))  # split: attr or input
@op("", "Split", since=2, param=SplitParam, parse=parse_with(SplitParam))  # split: attribute
@op("", "Split", since=13, param=SplitParam, parse=parse_with(SplitParam))  # split: input
@op("", "Split", since=18, param=SplitParam, parse=parse_with(SplitParam))  # num_outputs
class SplitOp(X86OptKernel):
    """y_0, y_1, ... = consecutive parts of x along ``axis``."""

    supported_types = ANY_TYPE
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "split")
        return super().infer_type(in_types)

    def sizes(self, in_shapes, in_values):
        """(axis, the size of each output along it)."""
        dims = in_shapes[0]
        param = self.param
        try:
            axis = normalize_axis(param.axis, len(dims))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        dim = dims[axis]
        n = len(self.node.outputs)
        if self.input_present(1) and (self.node.opset == 1 or self.node.opset >= 13):
            split = ints_of(self, in_shapes, in_values, 1, "split")
        elif param.split is not None and self.node.opset < 13:
            split = list(param.split)
        elif param.num_outputs is not None and self.node.opset >= 18:
            if param.num_outputs != n or n < 1:
                raise self.shape_error(f"num_outputs is {param.num_outputs} but the node has "
                                       f"{n} outputs", in_shapes)
            chunk = -(-dim // n)
            split = [min(chunk, max(dim - chunk * i, 0)) for i in range(n)]
        else:
            if n == 0 or dim % n:
                raise self.shape_error(f"cannot split a dim of {dim} into {n} equal parts",
                                       in_shapes)
            split = [dim // n] * n
        if len(split) != n or sum(split) != dim or min(split, default=0) < 0:
            raise self.shape_error(f"split {split} must have one non-negative size per output "
                                   f"({n}) summing to the dim {dim} of axis {axis}", in_shapes)
        return axis, split

    def infer_shape(self, in_shapes, in_values):
        axis, split = self.sizes(in_shapes, in_values)
        dims = in_shapes[0]
        return [tuple(dims[:axis]) + (s,) + tuple(dims[axis + 1:]) for s in split]

    def select_format(self, in_formats, in_shapes):
        """N16CX for a channel split of a blocked input (a part that starts on a block
        boundary is a block copy, others a channel map); NDARRAY otherwise."""
        n_in, n_out = len(in_formats), len(self.node.outputs)
        blocked = ([in_formats[0]] + [DataFormat.NDARRAY] * (n_in - 1),
                   [DataFormat.N16CX] * n_out)
        plain = [DataFormat.NDARRAY] * n_in, [DataFormat.NDARRAY] * n_out
        dims = in_shapes[0]
        if in_formats[0] is not DataFormat.N16CX or dims is None or len(dims) < 3:
            return plain
        if not isinstance(dims[1], int):
            return plain
        values = [self.constant(i) for i in range(n_in)]
        try:
            axis, split = self.sizes(in_shapes, values)
        except (PplError, ValueError, TypeError):  # sizes unknown until a plan
            return plain
        if axis != 1:
            return plain
        return blocked

    def create_kernel(self):
        return SplitKernel(self)
