"""Op contexts of the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp), ArgMax/ArgMin, CumSum and
CumProd.

Reduce* take ``axes`` as an attribute until ReduceSum-13 / the others' opset 18, then as an
optional int64 input (a value input: its value decides the output shape); no axes means every
axis, or none with ``noop_with_empty_axes``.  Keepdims changes only the output's dims, never its
memory layout, so one kernel serves both.  The kernel (``impls/_reduce_fp32.pxi``) runs every
axis set in one strided pass; a fed axes tensor is read by the step when it runs.

A reduction over spatial axes that keeps N's and C's axes with keepdims (ReduceMean over H and
W in a squeeze-excite block) runs on N16CX input and writes N16CX: on the physical layout
(N, C/16, *S, 16) it is the same reduction over the same axes, and zero padding lanes reduce
to finite values (ReduceLogSum, log(0), stays NDARRAY).

Element-wise nodes after a float32 reduction may run in its step as a post-op chain applied to
each output value as it is stored (passes/fuse_post_ops.py, ``op.post_ops``; oneDNN Graph's
Reduction + [Unary|Binary]*); per-channel operands broadcast along the output's axis 1.  The
fused node keeps its own inputs (x and, from ReduceSum-13 / opset 18, axes) and reads the
operands after them.
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.shape import check_int64_input
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.post_chain import ChainedKernel
from pplpy.errors import ShapeError
from pplpy.params.onnx import ArgReduceParam, CumSumParam, ReduceAxesInputParam, ReduceParam

_FAMILY = "reduce_fp32"
_FLOAT = (DataType.FLOAT32,)
_NUMERIC = (DataType.FLOAT32, DataType.INT32, DataType.INT64)
_DT_CODES = {DataType.FLOAT32: 0, DataType.INT32: 1, DataType.INT64: 2, DataType.BOOL: 3,
             DataType.FLOAT64: 4}
# The scans compute in their input's type, float64 included (ONNX's own cases use it).
_SCAN_TYPES = (DataType.FLOAT32, DataType.FLOAT64, DataType.INT32, DataType.INT64)
_MAX_RANK = 16


def _known(dim):
    return isinstance(dim, int)


class ReduceKernel(ChainedKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl(_FAMILY)
        x, y = io.inputs[0], io.outputs[0]
        keep = [x.array, y.array]
        chain = self.post_chain.run_kwargs(io, keep) if self.post_chain.entries else {}
        shape = x.shape
        code = _DT_CODES[shape.data_type]
        kind = impl.KINDS[self.op.kind]
        dims = shape.physical_dims
        axes = self.op.static_axes(len(shape.dims))
        x_address = x.address if shape.element_count > 0 else 0
        if axes is not None:
            # N16CX: the logical axes (never 1) name the same physical axes; the lanes axis
            # appended at the end is kept.
            rank = len(shape.dims)
            if not axes and not self.op.noop:
                axes = range(rank)
            mask = impl.axes_mask(tuple(a % rank for a in axes), len(dims), self.op.noop)
            return impl.make_reduce_step(kind, code, x_address, y.address, dims, mask=mask,
                                         keep=tuple(keep), **chain)
        axes_slot = io.inputs[1]
        n_axes = axes_slot.shape.element_count
        return impl.make_reduce_step(kind, code, x_address, y.address, dims,
                                     axes=axes_slot.address if n_axes else 1, n_axes=n_axes,
                                     noop=bool(self.op.noop),
                                     keep=(*keep, axes_slot.array), **chain)


class ReduceOp(X86OptKernel):
    """y = post(combine over ``axes`` of f(x)): the kind names f, combine and post."""

    kind = None             # the impl's name: "sum", "mean", ...
    supported_types = _FLOAT
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    value_inputs = (1,)

    @property
    def axes_from_input(self):
        # By the param's form rather than the node's opset: a pplpy::Reduce* twin of a saved
        # optimised model (ops/pplpy/standard_twins.py) stands for either form.
        return isinstance(self.param, ReduceAxesInputParam)

    @property
    def own_inputs(self):
        """Inputs before fused post-op operands (passes/fuse_post_ops.py): x, and axes once
        they are an input."""
        return 2 if self.axes_from_input else 1

    @property
    def noop(self):
        return bool(getattr(self.param, "noop_with_empty_axes", 0))

    @property
    def keepdims(self):
        return bool(self.param.keepdims)

    def static_axes(self, rank):
        """The axes as given (a tuple, maybe empty) when known without running, else None."""
        if not self.axes_from_input:
            return tuple(self.param.axes or ())
        if not self.input_present(1):
            return ()
        value = self.constant(1)
        return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))

    def resolve_axes(self, rank, in_values, in_shapes):
        """The sorted non-negative axes reduced (empty: a no-op)."""
        if self.axes_from_input and self.input_present(1):
            value = in_values[1] if len(in_values) > 1 else None
            if value is None:
                raise self.value_required(1, "axes")
            raw = [int(v) for v in np.asarray(value).reshape(-1)]
        else:
            raw = list(self.static_axes(rank))
        if not raw:
            return () if self.noop else tuple(range(rank))
        axes = []
        for a in raw:
            if not -rank <= a < rank:
                raise self.shape_error(f"axis {a} is out of range for rank {rank}", in_shapes)
            axes.append(a % rank)
        if len(set(axes)) != len(axes):
            raise self.shape_error(f"axes {raw} repeat an axis", in_shapes)
        return tuple(sorted(axes))

    def infer_type(self, in_types):
        if self.axes_from_input:
            check_int64_input(self, in_types, 1, "axes")
        return [super().infer_type(in_types)[0]]

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        if len(shape) > _MAX_RANK:
            raise self.unsupported(f"rank {len(shape)}: reductions handle at most {_MAX_RANK}")
        axes = self.resolve_axes(len(shape), in_values, in_shapes)
        out = []
        for i, d in enumerate(shape):
            if i not in axes:
                out.append(d)
            elif self.keepdims:
                out.append(1)
        return [tuple(out)]

    def select_format(self, in_formats, in_shapes):
        nd = [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY]
        shape = in_shapes[0]
        if in_formats[0] is not DataFormat.N16CX or shape is None or len(shape) < 3:
            return nd
        if self.kind == "log_sum" or not self.keepdims:
            return nd
        axes = self.static_axes(len(shape))
        if axes is None or (not axes and not self.noop):
            return nd
        if any(a % len(shape) == 1 for a in axes):
            return nd
        return [DataFormat.N16CX] + [DataFormat.NDARRAY] * (len(in_formats) - 1), [
            DataFormat.N16CX]

    def create_kernel(self):
        return ReduceKernel(self)


@op("", "ReduceSum", since=1, param=ReduceParam)
@op("", "ReduceSum", since=13, param=ReduceAxesInputParam)  # axes became an input
class ReduceSumOp(ReduceOp):
    """y = sum of x over axes."""

    kind = "sum"
    supported_types = _NUMERIC


@op("", "ReduceMean", since=1, param=ReduceParam)
@op("", "ReduceMean", since=18, param=ReduceAxesInputParam)
class ReduceMeanOp(ReduceOp):
    """y = sum of x over axes / count (NaN over an empty set)."""

    kind = "mean"


@op("", "ReduceMax", since=1, param=ReduceParam)
@op("", "ReduceMax", since=18, param=ReduceAxesInputParam)
class ReduceMaxOp(ReduceOp):
    """y = max of x over axes (-inf, the type's min or false over an empty set)."""

    kind = "max"
    supported_types = _NUMERIC + (DataType.BOOL,)


@op("", "ReduceMin", since=1, param=ReduceParam)
@op("", "ReduceMin", since=18, param=ReduceAxesInputParam)
class ReduceMinOp(ReduceOp):
    """y = min of x over axes (inf, the type's max or true over an empty set)."""

    kind = "min"
    supported_types = _NUMERIC + (DataType.BOOL,)


@op("", "ReduceProd", since=1, param=ReduceParam)
@op("", "ReduceProd", since=18, param=ReduceAxesInputParam)
class ReduceProdOp(ReduceOp):
    """y = product of x over axes."""

    kind = "prod"
    supported_types = _NUMERIC


@op("", "ReduceL1", since=1, param=ReduceParam)
@op("", "ReduceL1", since=18, param=ReduceAxesInputParam)
class ReduceL1Op(ReduceOp):
    """y = sum of |x| over axes."""

    kind = "l1"


@op("", "ReduceL2", since=1, param=ReduceParam)
@op("", "ReduceL2", since=18, param=ReduceAxesInputParam)
class ReduceL2Op(ReduceOp):
    """y = sqrt(sum of x^2 over axes)."""

    kind = "l2"


@op("", "ReduceSumSquare", since=1, param=ReduceParam)
@op("", "ReduceSumSquare", since=18, param=ReduceAxesInputParam)
class ReduceSumSquareOp(ReduceOp):
    """y = sum of x^2 over axes."""

    kind = "sum_square"


@op("", "ReduceLogSum", since=1, param=ReduceParam)
@op("", "ReduceLogSum", since=18, param=ReduceAxesInputParam)
class ReduceLogSumOp(ReduceOp):
    """y = log(sum of x over axes)."""

    kind = "log_sum"


@op("", "ReduceLogSumExp", since=1, param=ReduceParam)
@op("", "ReduceLogSumExp", since=18, param=ReduceAxesInputParam)
class ReduceLogSumExpOp(ReduceOp):
    """y = m + log(sum of exp(x - m) over axes), m the max over axes."""

    kind = "log_sum_exp"


# ---------------------------------------------------------------------------------------


class ArgReduceKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        dims = x.shape.dims
        axis = self.param.axis % len(dims)
        outer = int(np.prod(dims[:axis], dtype=np.int64))
        inner = int(np.prod(dims[axis + 1:], dtype=np.int64))
        return self.impl(_FAMILY).make_arg_step(
            _DT_CODES[x.shape.data_type], x.address, y.address, outer, dims[axis], inner,
            self.op.is_max, bool(self.param.select_last_index), keep=(x.array, y.array))


class ArgReduceOp(X86OptKernel):
    """y = the index of the max (or min) along axis: the first, or the last with
    select_last_index; int64."""

    supported_types = _NUMERIC
    is_max = True

    def infer_type(self, in_types):
        super().infer_type(in_types)
        return [DataType.INT64]

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        rank = len(shape)
        axis = self.param.axis
        if rank == 0 or not -rank <= axis < rank:
            raise self.shape_error(f"axis {axis} is out of range for rank {rank}", in_shapes)
        axis %= rank
        if _known(shape[axis]) and shape[axis] == 0:
            raise self.shape_error(f"axis {axis} is empty: there is no index to return",
                                   in_shapes)
        out = list(shape)
        if self.param.keepdims:
            out[axis] = 1
        else:
            del out[axis]
        return [tuple(out)]

    def create_kernel(self):
        return ArgReduceKernel(self)


@op("", "ArgMax", since=1, param=ArgReduceParam)
class ArgMaxOp(ArgReduceOp):
    is_max = True


@op("", "ArgMin", since=1, param=ArgReduceParam)
class ArgMinOp(ArgReduceOp):
    is_max = False


# ---------------------------------------------------------------------------------------


class CumulativeKernel(X86Kernel):
    """CumSum or CumProd (the op context's ``scan``) as one step of the shared scan loop."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y, axis = io.inputs[0], io.outputs[0], io.inputs[1]
        constant = self.op.constant(1)
        kwargs = {}
        if constant is not None:
            kwargs["axis"] = int(np.asarray(constant).reshape(-1)[0])
        else:
            kwargs["axis_address"] = axis.address
            kwargs["axis_is64"] = axis.shape.data_type is DataType.INT64
        impl = self.impl(_FAMILY)
        return impl.make_cumulative_step(
            impl.CUM_OPS[self.op.scan], _DT_CODES[x.shape.data_type], x.address, y.address,
            x.shape.dims, exclusive=bool(self.param.exclusive), reverse=bool(self.param.reverse),
            keep=(x.array, y.array, axis.array), **kwargs)


class CumulativeOp(X86OptKernel):
    """A running combination along the axis given as input 1 (an int32/int64 scalar):
    y[..., i, ...] = x[..., j, ...] combined over j <= i (j < i when exclusive; from the end
    when reverse); ``scan`` names the combination."""

    scan = None
    supported_types = _SCAN_TYPES
    value_inputs = (1,)

    def infer_type(self, in_types):
        if len(in_types) < 2 or in_types[1] not in (DataType.INT32, DataType.INT64):
            got = in_types[1] if len(in_types) > 1 else "nothing"
            raise ShapeError(f"{self.node.describe()}: input 1 (axis) must be an int32 or "
                             f"int64 scalar, got {got}")
        return [super().infer_type(in_types)[0]]

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        rank = len(shape)
        if rank == 0 or rank > _MAX_RANK:
            raise self.shape_error(f"{self.node.op_type} needs rank 1 to {_MAX_RANK}",
                                   in_shapes)
        value = in_values[1] if len(in_values) > 1 else None
        if value is None:
            raise self.value_required(1, "axis")
        value = np.asarray(value)
        if value.size != 1:
            raise self.shape_error(f"axis must be a scalar, got shape {list(value.shape)}",
                                   in_shapes)
        axis = int(value.reshape(-1)[0])
        if not -rank <= axis < rank:
            raise self.shape_error(f"axis {axis} is out of range for rank {rank}", in_shapes)
        return [tuple(shape)]

    def create_kernel(self):
        return CumulativeKernel(self)


@op("", "CumSum", since=11, param=CumSumParam)  # 14: bfloat16, float16
class CumSumOp(CumulativeOp):
    """y[..., i, ...] = sum of x[..., j, ...] for j <= i along axis."""

    scan = "sum"


@op("", "CumProd", since=26, param=CumSumParam)  # CumSum's attributes: exclusive, reverse
class CumProdOp(CumulativeOp):
    """y[..., i, ...] = product of x[..., j, ...] for j <= i along axis."""

    scan = "prod"
