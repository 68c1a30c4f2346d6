"""Small index ops: Size, Range, OneHot, Trilu, EyeLike, ReverseSequence and NonZero.

Size and Range outputs are decided when the plan is made (Size from the input's dims, Range
from its three scalar inputs, which decide its length and so must be known then): their
steps copy a value computed at that time.  OneHot, Trilu, EyeLike, ReverseSequence and
NonZero are compiled steps of ``_index``; OneHot's ``values``, Trilu's ``k`` and
ReverseSequence's ``sequence_lens`` are read when the step runs.  NonZero's output size is
the number of non-zero elements: its input must be known when the plan is made (a constant,
a fed input, or a host value); one computed by the run cuts the plan before the NonZero
(``pplpy/runtime/staged_plan.py``).
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy, _index
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import (
    NUMERIC_TYPES,
    check_index_type,
    prod,
    scalar_of,
    value_of,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import (
    EyeLikeParam,
    OneHotParam,
    RangeParam,
    ReverseSequenceParam,
    TriluParam,
)


class ValueKernel(DataMovementKernel):
    """Copies the value the op context computes for the plan (``plan_value``)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        value = np.ascontiguousarray(self.op.plan_value(io), y.shape.data_type.numpy)
        if value.nbytes != y.shape.bytes:
            raise ValueError(f"{self.node.describe()}: computed {value.size} values for an "
                             f"output of {y.shape.element_count}")
        return _copy.make_copy_step(y.address, value.ctypes.data, value.nbytes,
                                    (value, y.array))


# -- Size ----------------------------------------------------------------------------------


@op("", "Size", since=1)
class SizeOp(X86OptKernel):
    """y = the number of elements of x (int64 scalar); reads only x's dims."""

    computes_from_shapes = True  # evaluated on the host when a plan is made
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    supported_types = ANY_TYPE  # only dims are read: float16 / float64 inputs too

    def infer_type(self, in_types):
        return [DataType.INT64]

    def infer_shape(self, in_shapes, in_values):
        return [()]

    def select_format(self, in_formats, in_shapes):
        return list(in_formats), [DataFormat.NDARRAY]

    def plan_value(self, io):
        return np.int64(prod(io.inputs[0].shape.dims))

    def create_kernel(self):
        return ValueKernel(self)


# -- Range ---------------------------------------------------------------------------------

RANGE_TYPES = (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64, DataType.INT16, DataType.INT32,
               DataType.INT64)


@op("", "Range", since=11)
@op("", "Range", since=27, param=RangeParam)  # stash_type
class RangeOp(X86OptKernel):
    """y = numpy.arange(start, limit, delta) in the inputs' type, its length ceil((limit -
    start) / delta) worked out in double precision as ONNX Runtime and onnx.reference do
    (Range(0, 28, 0.7) in float32 has 41 elements: 0.7 is 0.699999988 in float32)."""

    supported_types = RANGE_TYPES
    value_inputs = (0, 1, 2)

    def infer_type(self, in_types):
        (t,) = super().infer_type(in_types)
        if any(u is not t for u in in_types):
            raise ShapeError(f"{self.node.describe()}: start, limit and delta must share one "
                             f"type, got {', '.join(str(u) for u in in_types)}")
        return [t]

    def scalars(self, in_shapes, in_values):
        """(start, limit, delta) as Python numbers, and the output's numpy type."""
        start, limit, delta = (value_of(self, in_values, i, what) for i, what in
                               enumerate(("start", "limit", "delta")))
        for i, v in enumerate((start, limit, delta)):
            if v.size != 1:
                raise self.shape_error(f"input {i} must be a scalar", in_shapes)
        if delta.reshape(()) == 0:
            raise self.shape_error("delta must not be 0", in_shapes)
        return start.item(), limit.item(), delta.item(), start.dtype

    def value(self, in_shapes, in_values):
        start, limit, delta, dtype = self.scalars(in_shapes, in_values)
        return np.arange(start, limit, delta).astype(dtype)

    def infer_shape(self, in_shapes, in_values):
        """The length alone: the values are made once, by the plan (``plan_value``)."""
        start, limit, delta, _ = self.scalars(in_shapes, in_values)
        if isinstance(start, int):
            return [(len(range(start, limit, delta)),)]
        return [(max(math.ceil((limit - start) / delta), 0),)]

    def plan_value(self, io):
        return self.value(io.input_shapes, [s.array for s in io.inputs])

    def create_kernel(self):
        return ValueKernel(self)


# -- OneHot --------------------------------------------------------------------------------


class OneHotKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        indices, values, y = io.inputs[0], io.inputs[2], io.outputs[0]
        shapes = [s.shape.dims if s else None for s in io.inputs]
        axis, depth = self.op.geometry(shapes, [s.array for s in io.inputs])
        dims = indices.shape.dims
        step = _index.make_onehot_step(y.address, indices.address, indices.shape.data_type.value,
                                       values.address, y.shape.data_type.itemsize,
                                       prod(dims[:axis]), depth, prod(dims[axis:]))
        step.keep = keep_arrays(io)
        return step


@op("", "OneHot", since=9, param=OneHotParam)
@op("", "OneHot", since=11, param=OneHotParam)  # negative indices count from depth
class OneHotOp(X86OptKernel):
    """y[..., d, ...] = values[1] where indices == d (at ``axis``), values[0] elsewhere."""

    supported_types = NUMERIC_TYPES
    value_inputs = (1,)

    def infer_type(self, in_types):
        super().infer_type(in_types)
        if len(in_types) < 3 or in_types[1] not in NUMERIC_TYPES:
            raise ShapeError(f"{self.node.describe()}: needs indices, a numeric depth and "
                             f"values")
        return [in_types[2]]

    def geometry(self, in_shapes, in_values):
        rank = len(in_shapes[0])
        depth = int(scalar_of(self, in_shapes, in_values, 1, "depth"))
        if depth < 1:
            raise self.shape_error(f"depth must be positive, got {depth}", in_shapes)
        if in_shapes[2] is None or prod(in_shapes[2]) != 2:
            raise self.shape_error("values must hold two elements [off, on]", in_shapes)
        try:
            axis = normalize_axis(self.param.axis if self.param else -1, rank + 1)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return axis, depth

    def infer_shape(self, in_shapes, in_values):
        axis, depth = self.geometry(in_shapes, in_values)
        dims = tuple(in_shapes[0])
        return [dims[:axis] + (depth,) + dims[axis:]]

    def create_kernel(self):
        return OneHotKernel(self)


# -- Trilu and EyeLike ---------------------------------------------------------------------


class TriluKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = x.shape.dims
        k_slot = io.inputs[1] if len(io.inputs) > 1 else None
        k_at = k_slot.address if k_slot is not None and k_slot.shape.element_count else 0
        upper = bool(self.param.upper) if self.param is not None else True
        step = _index.make_trilu_step(y.address, x.address, x.shape.data_type.itemsize,
                                      prod(dims[:-2]), dims[-2], dims[-1], k_at, 0, upper)
        step.keep = keep_arrays(io)
        return step


@op("", "Trilu", since=14, param=TriluParam)
class TriluOp(X86OptKernel):
    """y = the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims."""

    supported_types = ANY_TYPE

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "k", (DataType.INT64,))
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        if len(in_shapes[0]) < 2:
            raise self.shape_error("the input needs rank >= 2", in_shapes)
        if self.input_present(1) and prod(in_shapes[1]) != 1:
            raise self.shape_error("k must be a scalar", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return TriluKernel(self)


class EyeKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        rows, cols = y.shape.dims
        one = np.ones(1, y.shape.data_type.numpy).tobytes()
        k = self.param.k if self.param is not None else 0
        step = _index.make_eye_step(y.address, rows, cols, k, one)
        step.keep = keep_arrays(io)
        return step


@op("", "EyeLike", since=9, param=EyeLikeParam)
class EyeLikeOp(X86OptKernel):
    """y = ones on diagonal k of a 2-D tensor of x's shape, zeros elsewhere."""

    supported_types = ANY_TYPE

    def infer_type(self, in_types):
        super().infer_type(in_types)
        dtype = self.param.dtype if self.param is not None else None
        if dtype is None:
            return [in_types[0]]
        t = DataType.from_onnx(dtype)
        if t is None:
            raise self.unsupported(f"dtype {dtype} is not a type pplpy has")
        return [t]

    def infer_shape(self, in_shapes, in_values):
        if len(in_shapes[0]) != 2:
            raise self.shape_error("the input must be 2-D", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return EyeKernel(self)


# -- ReverseSequence -----------------------------------------------------------------------


class ReverseSequenceKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, lens, y = io.inputs[0], io.inputs[1], io.outputs[0]
        dims = x.shape.dims
        time_major = self.op.time_axis() == 0
        steps, batch = (dims[0], dims[1]) if time_major else (dims[1], dims[0])
        step = _index.make_reverse_sequence_step(
            y.address, x.address, lens.address, time_major, steps, batch,
            prod(dims[2:]) * x.shape.data_type.itemsize)
        step.keep = keep_arrays(io)
        return step


@op("", "ReverseSequence", since=10, param=ReverseSequenceParam)
class ReverseSequenceOp(X86OptKernel):
    """y[t, b] = x[lens[b] - 1 - t, b] for t < lens[b] (time and batch axes 0 and 1)."""

    supported_types = ANY_TYPE

    def time_axis(self):
        param = self.param or ReverseSequenceParam()
        if {param.time_axis, param.batch_axis} != {0, 1}:
            raise self.unsupported(f"time_axis {param.time_axis} and batch_axis "
                                   f"{param.batch_axis} must be 0 and 1 in some order")
        return param.time_axis

    def infer_type(self, in_types):
        self.time_axis()
        check_index_type(self, in_types, 1, "sequence_lens", (DataType.INT64,))
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        dims = in_shapes[0]
        if len(dims) < 2:
            raise self.shape_error("the input needs rank >= 2", in_shapes)
        batch = dims[1 - self.time_axis()]
        if in_shapes[1] is None or tuple(in_shapes[1]) != (batch,):
            raise self.shape_error(f"sequence_lens must have shape [{batch}]", in_shapes)
        return [dims]

    def create_kernel(self):
        return ReverseSequenceKernel(self)


# -- NonZero -------------------------------------------------------------------------------


class NonZeroKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        step = _index.make_nonzero_step(y.address, x.address, x.shape.data_type.value,
                                        x.shape.data_type.itemsize, list(x.shape.dims),
                                        y.shape.dims[1])
        step.keep = keep_arrays(io)
        return step


@op("", "NonZero", since=9)
class NonZeroOp(X86OptKernel):
    """y (rank, count) int64 = the coordinates of the non-zero elements, row-major."""

    supported_types = ANY_TYPE
    value_inputs = (0,)

    def infer_type(self, in_types):
        if in_types[0] is DataType.FLOAT16:
            raise self.unsupported("float16 input is not supported")
        super().infer_type(in_types)
        return [DataType.INT64]

    def infer_shape(self, in_shapes, in_values):
        x = in_values[0] if in_values else None
        if x is None:
            raise self.value_required(0, "the input of NonZero (its number of non-zero "
                                         "elements decides the output shape)")
        return [(len(in_shapes[0]), int(np.count_nonzero(x)))]

    def create_kernel(self):
        return NonZeroKernel(self)
