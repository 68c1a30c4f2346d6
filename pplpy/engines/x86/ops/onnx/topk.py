"""TopK's op context: the k largest (or smallest) values along ``axis`` and their int64
indices, best first, ties by lower index, for the numeric types.

k is the attribute before opset 10 and a 1-element int64 input from 10; it decides the
output shape, so it must be known when the plan is made (a constant, a fed input, or a value
computed on the host): otherwise the plan fails with an UnsupportedOpError that says so.
``sorted`` = 0 allows any order; pplpy returns the sorted order anyway.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _index
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import (
    NUMERIC_TYPES,
    check_index_type,
    parse_with,
    prod,
    scalar_of,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import TopKParam


class TopKKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x = io.inputs[0]
        values, indices = io.outputs[0], io.outputs[1]
        shapes = [s.shape.dims if s else None for s in io.inputs]
        axis, k = self.op.geometry(shapes, [s.array if s is not None else None
                                            for s in io.inputs])
        dims = x.shape.dims
        largest = bool(self.param.largest) if self.param is not None else True
        if values is None or indices is None:  # an omitted output gets a scratch buffer
            shape = tuple(dims[:axis]) + (k,) + tuple(dims[axis + 1:])
            scratch = [np.empty(shape, x.shape.data_type.numpy), np.empty(shape, np.int64)]
        else:
            scratch = []
        v_addr = values.address if values is not None else scratch[0].ctypes.data
        i_addr = indices.address if indices is not None else scratch[1].ctypes.data
        step = _index.make_topk_step(v_addr, i_addr, x.address, x.shape.data_type.value,
                                     prod(dims[:axis]), dims[axis], prod(dims[axis + 1:]), k,
                                     largest, io.num_threads)
        step.keep = (step.keep, scratch, keep_arrays(io))
        return step


@op("", "TopK", since=1, param=TopKParam, parse=parse_with(TopKParam))  # k attribute
@op("", "TopK", since=10, param=TopKParam, parse=parse_with(TopKParam))  # k input
@op("", "TopK", since=11, param=TopKParam, parse=parse_with(TopKParam))  # largest, sorted
class TopKOp(X86OptKernel):
    """values, indices = the k best of x along ``axis``."""

    supported_types = NUMERIC_TYPES
    value_inputs = (1,)

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "K", (DataType.INT64,))
        (t,) = super().infer_type(in_types)[:1]
        return [t, DataType.INT64][: len(self.node.outputs)]

    def geometry(self, in_shapes, in_values):
        dims = in_shapes[0]
        try:
            axis = normalize_axis(self.param.axis if self.param else -1, len(dims))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        if self.node.opset >= 10:
            k = int(scalar_of(self, in_shapes, in_values, 1, "K (the number of values to "
                              "keep, which decides the output shape)"))
        else:
            k = self.param.k
            if k is None:
                raise self.shape_error('attribute "k" is required before opset 10', in_shapes)
        if not 0 <= k <= dims[axis]:
            raise self.shape_error(f"k = {k} must lie in [0, {dims[axis]}] (axis {axis})",
                                   in_shapes)
        return axis, k

    def infer_shape(self, in_shapes, in_values):
        axis, k = self.geometry(in_shapes, in_values)
        dims = tuple(in_shapes[0])
        out = dims[:axis] + (k,) + dims[axis + 1:]
        return [out, out][: len(self.node.outputs)]

    def create_kernel(self):
        return TopKKernel(self)
