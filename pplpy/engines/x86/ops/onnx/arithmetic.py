"""Op contexts of Add, Mul and Sum: numpy broadcasting, float32 / int32 / int64.

Formats: NDARRAY always works.  N16CX is kept when the big operands arrive blocked and
have the output's shape, and any other operand is a per-channel vector ([C], [C,1,1],
[1,C,1,1] ...): the common cases of a residual Sum or a bias/scale after a Conv.
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86.ops.canned import NUMERIC_TYPES, broadcast_inputs_shape
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.layout import as_blocked_3d, as_flat
from pplpy.engines.x86.ops.op_context import X86OptKernel


def broadcast_strides(shape, out_shape):
    """Element strides of a C-contiguous ``shape`` read as ``out_shape`` (0 = broadcast)."""
    strides = [0] * len(out_shape)
    step = 1
    for i in range(1, len(shape) + 1):
        dim = shape[-i]
        strides[-i] = step if dim != 1 else 0
        step *= dim
    return np.asarray(strides, dtype=np.int64)


class BinaryKernel(X86Kernel):
    def __init__(self, op, op_name):
        super().__init__(op)
        self.op_name = op_name

    def do_execute(self, ctx):
        apply_binary(self, self.op_name, ctx.inputs[0], ctx.input_shapes[0], ctx.inputs[1],
                     ctx.input_shapes[1], ctx.outputs[0], ctx.output_shapes[0],
                     ctx.num_threads)


class SumKernel(X86Kernel):
    def do_execute(self, ctx):
        out, out_shape = ctx.outputs[0], ctx.output_shapes[0]
        pairs = [(a, s) for a, s in zip(ctx.inputs, ctx.input_shapes) if a is not None]
        if len(pairs) == 1:
            (array, shape), = pairs
            apply_binary(self, "ADD", array, shape, _zero(shape), _scalar_shape(shape), out,
                         out_shape, ctx.num_threads)
            return
        (a, sa), (b, sb), *rest = pairs
        apply_binary(self, "ADD", a, sa, b, sb, out, out_shape, ctx.num_threads)
        for array, shape in rest:
            # The output already has the full shape, so accumulating into it is safe.
            apply_binary(self, "ADD", out, out_shape, array, shape, out, out_shape,
                         ctx.num_threads)


def _zero(shape):
    return np.zeros(1, dtype=shape.data_type.numpy)


def _scalar_shape(shape):
    return TensorShape((), shape.data_type)


def apply_binary(kernel, op_name, a, sa, b, sb, y, sy, num_threads):
    """y = a op b for any mix of the formats the op context allows."""
    impl = kernel.impl("eltwise_fp32")
    code = getattr(impl, op_name)
    if sy.data_format is DataFormat.N16CX:
        a_blocked = sa.data_format is DataFormat.N16CX
        b_blocked = sb.data_format is DataFormat.N16CX
        if a_blocked and b_blocked:
            impl.binary(code, as_flat(a), as_flat(b), as_flat(y),
                        np.asarray([y.size], np.int64), np.ones(1, np.int64),
                        np.ones(1, np.int64), num_threads)
            return
        big, vec, vec_first = (a, b, False) if a_blocked else (b, a, True)
        channels = sy.dims[1]
        padded = np.zeros(sy.padded_channels, dtype=np.float32)
        padded[:channels] = np.broadcast_to(np.asarray(vec).reshape(-1), (channels,))
        impl.channel_binary_n16cx_fp32(code, as_blocked_3d(big, sy), padded,
                                       as_blocked_3d(y, sy), num_threads, vec_first)
        return
    out_dims = sy.dims
    impl.binary(code, as_flat(np.ascontiguousarray(a)), as_flat(np.ascontiguousarray(b)),
                as_flat(y), np.asarray(out_dims, np.int64) if out_dims else np.ones(1, np.int64),
                broadcast_strides(sa.dims, out_dims) if out_dims else np.zeros(1, np.int64),
                broadcast_strides(sb.dims, out_dims) if out_dims else np.zeros(1, np.int64),
                num_threads)


def is_channel_vector(shape, out_shape):
    """True if ``shape`` broadcast to ``out_shape`` varies only along axis 1 (channels)."""
    if len(shape) > len(out_shape) or len(out_shape) < 2:
        return False
    offset = len(out_shape) - len(shape)
    for axis, dim in enumerate(shape, start=offset):
        if axis != 1 and dim != 1:
            return False
    return True


class ElementwiseOp(X86OptKernel):
    """Shared type checks and format choice of the broadcasting arithmetic ops."""

    supported_types = NUMERIC_TYPES
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = broadcast_inputs_shape

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        present = [t for t in in_types if t is not None]
        if any(t is not present[0] for t in present):
            names = ", ".join(str(t) for t in present)
            raise self.unsupported(f"inputs must share one element type, got {names}")
        return out

    def select_format(self, in_formats, in_shapes):
        ndarray = [DataFormat.NDARRAY] * len(in_formats)
        if any(s is None for s in in_shapes):
            return ndarray, [DataFormat.NDARRAY]
        out_shape = broadcast_inputs_shape(self, in_shapes, None)[0]
        blocked = [f is DataFormat.N16CX for f in in_formats]
        if not any(blocked) or len(out_shape) < 3:
            return ndarray, [DataFormat.NDARRAY]
        wanted = []
        for shape, is_blocked in zip(in_shapes, blocked):
            if is_blocked and tuple(shape) == tuple(out_shape):
                wanted.append(DataFormat.N16CX)
            elif is_channel_vector(shape, out_shape):
                wanted.append(DataFormat.NDARRAY)
            else:
                return ndarray, [DataFormat.NDARRAY]
        if DataFormat.N16CX not in wanted:
            return ndarray, [DataFormat.NDARRAY]
        return wanted, [DataFormat.N16CX]


@op("", "Add", since=7)  # 7 introduced numpy broadcasting
class AddOp(ElementwiseOp):
    def create_kernel(self):
        return BinaryKernel(self, "ADD")


@op("", "Mul", since=7)
class MulOp(ElementwiseOp):
    def create_kernel(self):
        return BinaryKernel(self, "MUL")


@op("", "Sum", since=8)  # 8 introduced broadcasting
class SumOp(ElementwiseOp):
    """Sum of one or more inputs, accumulated pairwise into the output."""

    def create_kernel(self):
        return SumKernel(self)
