"""Unique (opset 11): the distinct values (or slices along ``axis``) of x, sorted or in order
of first occurrence, with the index of each one's first occurrence, the inverse indices
(which output each input element or slice became) and the counts.

The output size is the number of distinct values: like NonZero's, x must be known when the
plan is made (a constant, a fed input, or a host value), otherwise the plan fails with an
UnsupportedOpError.  Every output is then a function of that value alone, fixed for the plan
(a fed x joins the plan's cache key), so the op computes them once, when shapes are inferred
for the plan, and its steps copy them into the outputs (as Range's do).
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import NUMERIC_TYPES, value_of
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import UniqueParam


def unique(x, axis, sort):
    """(y, first indices, inverse indices, counts) of ONNX Unique on the array x; axis None
    flattens x; without ``sort`` the outputs follow the order of first occurrence."""
    flat = axis is None
    data = x.reshape(-1) if flat else x
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                          return_counts=True, axis=None if flat else axis)
    inverse = inverse.reshape(-1)
    if not sort:
        order = np.argsort(first, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if flat else axis)
        first, counts, inverse = first[order], counts[order], position[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


class UniqueKernel(DataMovementKernel):
    """Copies the outputs computed for this plan's value of x."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        values = self.op.outputs_of(io.inputs[0].array)
        steps = []
        for slot, value in zip(io.outputs, values):
            if slot is None or not slot.shape.element_count:
                continue
            value = np.ascontiguousarray(value, slot.shape.data_type.numpy)
            if value.nbytes != slot.shape.bytes:
                raise ValueError(f"{self.node.describe()}: computed {value.size} values for "
                                 f"an output of {slot.shape.element_count}")
            step = _copy.make_copy_step(slot.address, value.ctypes.data, value.nbytes,
                                        (value, slot.array))
            step.label = self.node.name
            steps.append(step)
        return steps


@op("", "Unique", since=11, param=UniqueParam)
class UniqueOp(X86OptKernel):
    """y, indices, inverse_indices, counts = the distinct values of x (int64 indices)."""

    supported_types = NUMERIC_TYPES + (DataType.BOOL,)
    value_inputs = (0,)

    def infer_type(self, in_types):
        (t,) = super().infer_type(in_types)[:1]
        return [t, DataType.INT64, DataType.INT64, DataType.INT64][:len(self.node.outputs)]

    def axis(self, rank):
        axis = self.param.axis if self.param is not None else None
        return None if axis is None else normalize_axis(axis, rank)

    def outputs_of(self, x):
        x = np.asarray(x)
        sort = bool(self.param.sorted) if self.param is not None else True
        return unique(x, self.axis(x.ndim), sort)[:len(self.node.outputs)]

    def infer_shape(self, in_shapes, in_values):
        x = value_of(self, in_values, 0, "the input of Unique (its number of distinct values "
                                         "decides the output shapes)")
        try:
            axis = self.axis(len(in_shapes[0]))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        if axis is not None and x.ndim == 0:
            raise self.shape_error("axis needs an input of rank >= 1", in_shapes)
        return [np.shape(v) for v in self.outputs_of(x)]

    def create_kernel(self):
        return UniqueKernel(self)
