"""Element-wise ops from two tables: the activations and the broadcasting arithmetic.

ACTIVATIONS has one row per (op, opset range): the ONNX op, its activation code (a vector
function in ``impls/_activation_fp32.h``, shared with the fused GEMM/conv epilogue) and where
its parameters p0, p1 come from.  Each row is declared with ``@op`` and runs in NDARRAY or
N16CX (whichever arrives; NDARRAY only where f(0) is not finite, so that N16CX padding lanes
could not stay finite: Log, Reciprocal, Acosh) on every ISA tier, as one compiled activation
step; Abs, Neg and Sign also run on int32 / int64.  The fusion pass reads the same rows
(passes/fuse_post_ops.py).  Adding an activation is a row here plus its vector function and
code.

BINARY_OPS are Add, Sub, Mul and Div with numpy broadcasting, float32 and every integer type
(8 to 64 bits; wrapping as numpy, integer Div truncating); Sum is a chain of Adds in one step.  Formats: NDARRAY always works; N16CX is kept when the big
operands arrive blocked with the output's shape and any other operand is a per-channel vector
([C], [C,1,1], [1,C,1,1] ...): a residual Sum, a bias or a scale after a Conv; or, for two
operands, a one-channel plane [N or 1, 1, H, W] broadcast over the channels (a spatial gate:
FocalNet's modulation, CBAM's spatial attention), read in NDARRAY.

    x --make_activation_step--> y     a, b --binary_pass / channel_pass / plane_pass--> y
"""

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _logic
from pplpy.engines.x86.impls.broadcast import broadcast_strides
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.ops.canned import (
    NUMERIC_TYPES,
    broadcast_inputs_shape,
    follow_input_format,
    ndarray_only,
    same_shape_as_input,
)
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import Slot, X86Kernel
from pplpy.engines.x86.ops.layout import spatial_size
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.models.onnx.parsers.encodings import parse_clip_attributes
from pplpy.params.onnx import (
    CeluParam,
    ClipParam,
    EluParam,
    GeluParam,
    HardSigmoidParam,
    LeakyReluParam,
    SeluParam,
    ShrinkParam,
    SwishParam,
    ThresholdedReluParam,
)

# ---------------------------------------------------------------------------------------
# Activations.


def _no_params(param):
    return 0.0, 0.0


def _alpha(param):
    return float(param.alpha), 0.0


def _alpha_beta(param):
    return float(param.alpha), float(param.beta)


def _clip_attributes(param):
    return param.min, param.max


def _selu_params(param):
    return float(param.alpha), float(param.gamma)


def _celu_params(param):
    if param.alpha == 0:
        raise ValueError("Celu with alpha = 0 is undefined (x / alpha)")
    return float(param.alpha), 0.0


def _shrink_params(param):
    return float(param.bias), float(param.lambd)


def _gelu_params(param):
    approximate = {"none": 0.0, "tanh": 1.0}.get(param.approximate)
    if approximate is None:
        raise ValueError(f"Gelu approximate={param.approximate!r}: expected 'none' or 'tanh'")
    return approximate, 0.0


def _clip_inputs(kernel, io):
    """Clip-11: min and max are optional scalar inputs.  A constant is read now; a fed or
    computed one is left as its Slot, which the step reads each time it runs."""
    bounds = []
    for index, default in ((1, -math.inf), (2, math.inf)):
        slot = io.inputs[index] if index < len(io.inputs) else None
        value = kernel.op.constant(index)
        if slot is None:
            bounds.append(default)
        elif value is not None:
            bounds.append(float(np.asarray(value, np.float32).reshape(-1)[0]))
        else:
            bounds.append(slot)
    return tuple(bounds)


@dataclass(frozen=True)
class Activation:
    """One row of the activation table."""

    op_type: str
    since: int  # the opset where the op took this meaning (open-ended, see declare.py)
    code: PostOp
    # param -> (p0, p1) from the attributes; a ValueError names a value pplpy does not run
    # (raised as UnsupportedOpError at load time).
    params: Callable = _no_params
    param: type | None = None  # the param dataclass parsed from the attributes
    parse: Callable | None = None  # a custom parser, where the ONNX encoding is awkward
    # f(0) is finite, so N16CX's zero padding lanes stay finite and the op may run blocked.
    keeps_padding: bool = True
    # Also int32 / int64 (NDARRAY), through make_int_unary_step.
    int_types: bool = False
    # (kernel, io) -> (p0, p1) where parameters are inputs (Clip-11), instead of params.
    input_params: Callable | None = None


ACTIVATIONS = (
    Activation("Relu", 6, PostOp.RELU),
    Activation("LeakyRelu", 6, PostOp.LEAKY_RELU, _alpha, LeakyReluParam),
    Activation("Clip", 6, PostOp.CLIP, _clip_attributes, ClipParam, parse_clip_attributes),
    # min/max became inputs; int32 / int64 from opset 12 (_int_clip_step)
    Activation("Clip", 11, PostOp.CLIP, input_params=_clip_inputs, int_types=True),
    Activation("Sigmoid", 6, PostOp.SIGMOID),
    Activation("Tanh", 6, PostOp.TANH),
    Activation("HardSwish", 14, PostOp.HARD_SWISH),
    # Opset 1 versions of the ops from 6 had the legacy consumed_inputs attribute.
    Activation("Abs", 6, PostOp.ABS, int_types=True),
    Activation("Neg", 6, PostOp.NEG, int_types=True),
    Activation("Sign", 9, PostOp.SIGN, int_types=True),
    Activation("Exp", 6, PostOp.EXP),
    Activation("Log", 6, PostOp.LOG, keeps_padding=False),  # log(0) = -inf
    Activation("Sqrt", 6, PostOp.SQRT),
    Activation("Reciprocal", 6, PostOp.RECIPROCAL, keeps_padding=False),  # 1 / 0 = inf
    Activation("Floor", 6, PostOp.FLOOR),
    Activation("Ceil", 6, PostOp.CEIL),
    Activation("Round", 11, PostOp.ROUND),
    Activation("Erf", 9, PostOp.ERF),
    Activation("Sin", 7, PostOp.SIN),
    Activation("Cos", 7, PostOp.COS),
    Activation("Tan", 7, PostOp.TAN),
    Activation("Asin", 7, PostOp.ASIN),
    Activation("Acos", 7, PostOp.ACOS),
    Activation("Atan", 7, PostOp.ATAN),
    Activation("Sinh", 9, PostOp.SINH),
    Activation("Cosh", 9, PostOp.COSH),
    Activation("Asinh", 9, PostOp.ASINH),
    Activation("Acosh", 9, PostOp.ACOSH, keeps_padding=False),  # acosh(0) = NaN
    Activation("Atanh", 9, PostOp.ATANH),
    Activation("HardSigmoid", 6, PostOp.HARD_SIGMOID, _alpha_beta, HardSigmoidParam),
    Activation("Softplus", 1, PostOp.SOFTPLUS),
    Activation("Softsign", 1, PostOp.SOFTSIGN),
    Activation("Elu", 6, PostOp.ELU, _alpha, EluParam),
    Activation("Selu", 6, PostOp.SELU, _selu_params, SeluParam),
    Activation("Celu", 12, PostOp.CELU, _celu_params, CeluParam),
    Activation("Gelu", 20, PostOp.GELU, _gelu_params, GeluParam),
    Activation("Mish", 18, PostOp.MISH),
    Activation("ThresholdedRelu", 10, PostOp.THRESHOLDED_RELU, _alpha, ThresholdedReluParam),
    Activation("Shrink", 9, PostOp.SHRINK, _shrink_params, ShrinkParam),
    Activation("Swish", 24, PostOp.SWISH, _alpha, SwishParam),
)


def _int_clip_step(io):
    """Clip of int32 / int64 (``(lengths - 1).clamp(min=0)`` in exported models): y = max(x,
    min), then y = min(y, max), as passes of the baseline _logic module over the flat tensor;
    the one-element bounds are read where they lie at each run (constants, feeds)."""
    x, y = io.inputs[0], io.outputs[0]
    size, elem_type = y.array.size, y.shape.data_type.value
    passes, keep, source = [], [x.array, y.array], x
    for index, name in ((1, "MAX"), (2, "MIN")):
        bound = io.inputs[index] if index < len(io.inputs) else None
        if bound is None:
            continue
        passes.append(_logic.make_pass(_logic.OPS[name], elem_type,
                                       [source.address, bound.address], [size, 1], [size],
                                       [[1], [0]]))
        keep.append(bound.array)
        source = y
    if not passes:  # no bounds: a copy
        passes.append(_logic.make_pass(_logic.OPS["MAX"], elem_type, [x.address, x.address],
                                       [size, size], [size], [[1], [1]]))
    return _logic.make_step(y.address, y.array.itemsize, size, passes, keep=keep)


class ActivationKernel(X86Kernel):
    """y = f(x) as one flat activation step, in either format (N16CX padding stays finite)."""

    def __init__(self, op, activation):
        super().__init__(op)
        self.activation = activation

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        row = self.activation
        impl = self.impl("eltwise_fp32")
        if x.shape.data_type is not DataType.FLOAT32 and row.op_type == "Clip":
            return _named(_int_clip_step(io), self.node.name)
        if x.shape.data_type is not DataType.FLOAT32:  # Abs, Neg, Sign of int32 / int64
            step = impl.make_int_unary_step(x.shape.data_type.numpy, x.address, y.address,
                                            x.array.size, int(row.code))
            return _named(step, self.node.name)
        values, addresses, keep = [], [], []
        params = row.input_params(self, io) if row.input_params else row.params(self.param)
        for p in params:
            if isinstance(p, Slot):
                values.append(0.0)
                addresses.append(p.address)
                keep.append(p.array)
            else:
                values.append(float(p))
                addresses.append(0)
        step = impl.make_activation_step(x.address, y.address, x.array.size, int(row.code),
                                         *values, *addresses)
        step.keep = keep
        return _named(step, self.node.name)


class ActivationOp(X86OptKernel):
    """An element-wise activation; ``activation`` is its row of ACTIVATIONS."""

    activation = None
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        if self.activation.input_params is None:
            try:
                self.activation.params(self.param)
            except ValueError as exc:
                raise self.unsupported(str(exc)) from None
        return out

    def select_format(self, in_formats, in_shapes):
        if not self.activation.keeps_padding:
            return ndarray_only(self, in_formats, in_shapes)
        return follow_input_format(self, in_formats, in_shapes)

    def create_kernel(self):
        return ActivationKernel(self, self.activation)


class ClipOp(ActivationOp):
    """Clip checks that min and max (inputs 1 and 2 from opset 11) are scalars, and that
    integers come at opset 12 or later (where the schema admits them)."""

    def infer_type(self, in_types):
        if in_types and in_types[0] not in (None, DataType.FLOAT32) and self.node.opset < 12:
            raise self.unsupported(f"Clip takes {in_types[0]} from opset 12; this model "
                                   f"imports opset {self.node.opset}")
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        for index in (1, 2):
            shape = in_shapes[index] if index < len(in_shapes) else None
            if shape is not None and math.prod(shape) != 1:
                raise self.shape_error(f"input {index} (min/max) must be a scalar", in_shapes)
        return [in_shapes[0]]


def _declare_activation(row, first):
    base = ClipOp if row.op_type == "Clip" else ActivationOp
    name = f"{row.op_type}Op" if first else f"{row.op_type}{row.since}Op"
    doc = f"ONNX {row.op_type} from opset {row.since}: activation {row.code.name.lower()}."
    attrs = {"activation": row, "__doc__": doc, "__module__": __name__}
    if not row.keeps_padding:
        attrs["formats"] = (DataFormat.NDARRAY,)
    if row.int_types:
        attrs["supported_types"] = NUMERIC_TYPES
    cls = type(name, (base,), attrs)
    return op("", row.op_type, since=row.since, param=row.param, parse=row.parse)(cls)


_seen = set()
for _row in ACTIVATIONS:
    _cls = _declare_activation(_row, _row.op_type not in _seen)
    _seen.add(_row.op_type)
    globals()[_cls.__name__] = _cls
del _row, _cls, _seen


class GatedActivationKernel(X86Kernel):
    """y = f(a) * b as one flat step (the gate's activation from the table)."""

    def __init__(self, op, code):
        super().__init__(op)
        self.code = code

    def make_step(self, io):
        if not self.has_work(io):
            return None
        a, b, y = io.inputs[0], io.inputs[1], io.outputs[0]
        p0, p1 = _alpha(self.param)
        step = self.impl("eltwise_fp32").make_gated_activation_step(
            a.address, b.address, y.address, y.array.size, int(self.code), p0, p1)
        return _named(step, self.node.name)


@op("", "SwiGLU", since=28, param=SwishParam)
class SwiGLUOp(X86OptKernel):
    """ONNX SwiGLU from opset 28: Y = Swish_alpha(A) * B, A and B of one shape (no
    broadcasting).  Element-wise, so N16CX passes through when both inputs arrive blocked
    (the padding lanes give swish(0) * 0 = 0)."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        if in_types[1] is not in_types[0]:
            raise self.unsupported(f"A is {in_types[0]} but B is {in_types[1]}; SwiGLU takes "
                                   "one element type")
        return out

    def infer_shape(self, in_shapes, in_values):
        if tuple(in_shapes[0]) != tuple(in_shapes[1]):
            raise self.shape_error("inputs A and B must have the same shape (SwiGLU does not "
                                   "broadcast)", in_shapes)
        return [in_shapes[0]]

    def select_format(self, in_formats, in_shapes):
        # Both inputs must share one layout: the kernel walks them as flat buffers.
        if all(f is DataFormat.N16CX for f in in_formats) and len(in_shapes[0]) >= 2:
            return [DataFormat.N16CX] * 2, [DataFormat.N16CX]
        return ndarray_only(self, in_formats, in_shapes)

    def create_kernel(self):
        return GatedActivationKernel(self, PostOp.SWISH)


# ---------------------------------------------------------------------------------------
# Broadcasting arithmetic.


def is_channel_vector(shape, out_shape):
    """True if ``shape`` broadcast to ``out_shape`` varies only along axis 1 (channels)."""
    if len(shape) > len(out_shape) or len(out_shape) < 2:
        return False
    offset = len(out_shape) - len(shape)
    for axis, dim in enumerate(shape, start=offset):
        if axis != 1 and dim != 1:
            return False
    return True


def is_batch_channel_vector(shape, out_shape):
    """True if ``shape`` has the output's rank and varies only along axes 0 (batch) and 1
    (channels): a squeeze-excite scale [N, C, 1, 1] or a per-channel [1, C, 1, 1]."""
    if len(shape) != len(out_shape) or len(out_shape) < 3 or tuple(shape) == tuple(out_shape):
        return False
    return all(dim == 1 for dim in shape[2:]) and shape[0] in (1, out_shape[0])


def is_channel_plane(shape, out_shape):
    """True if ``shape`` has the output's rank, one channel and the output's spatial dims:
    a spatial gate [N or 1, 1, H, W] that broadcasts over the channels."""
    return (len(shape) == len(out_shape) >= 3 and shape[1] == 1 and out_shape[1] > 1
            and tuple(shape[2:]) == tuple(out_shape[2:]) and shape[0] in (1, out_shape[0]))


def _vector_strides(vec, channels, out_rank):
    """(vec_len, vec_stride, vec_batch_stride) reading a per-channel or per-(n, c) vector
    operand: shapes right-aligned with the output's; N16CX [N, C, 1, ...] holds (n, c) at
    n * padded C + c, NDARRAY at n * C + c."""
    dims = tuple(vec.shape.dims)
    offset = out_rank - len(dims)
    c = dims[1 - offset] if 0 <= 1 - offset < len(dims) else 1
    n = dims[0] if offset == 0 else 1
    row = vec.shape.padded_channels if vec.shape.data_format is DataFormat.N16CX else c
    return channels, (1 if c > 1 else 0), (row if n > 1 else 0)


def _contiguous(slot, what):
    if not slot.array.flags.c_contiguous:
        raise ValueError(f"{what}: expected a C-contiguous array, got strides "
                         f"{slot.array.strides}")
    return slot


class BinaryKernel(X86Kernel):
    """y = a op b, or for Sum y = ((t0 + t1) + t2) + ..., as one step of passes over y."""

    def __init__(self, op, op_name):
        super().__init__(op)
        self.op_name = op_name

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("eltwise_fp32")
        y = _contiguous(io.outputs[0], "output")
        terms = [_contiguous(s, f"input {i}") for i, s in enumerate(io.inputs) if s is not None]
        code = getattr(impl, self.op_name)
        keep = []
        if len(terms) == 1:  # Sum of one input: y = x * 1, exact for every value
            one = np.ones(1, y.shape.data_type.numpy)
            keep.append(one)
            passes = [_scalar_pass(impl, impl.MUL, terms[0], one, y)]
        else:
            if y.shape.data_format is DataFormat.N16CX and len(terms) > 2:
                # Sum: a blocked term first, so that the first pass writes all of y (Sub and
                # Div keep their order: _passes puts the vector on its side).
                terms.sort(key=lambda s: s.shape.data_format is not DataFormat.N16CX)
            passes = _passes(impl, code, terms[0], terms[1], y, keep)
            for term in terms[2:]:
                passes += _passes(impl, code, y, term, y, keep)
        step = impl.make_eltwise_step(y.shape.data_type.numpy, y.address, y.array.size, passes,
                                      keep=keep)
        return _named(step, self.node.name)


def _named(step, name):
    step.label = name
    return step


def _scalar_pass(impl, code, a, scalar, y):
    size = y.array.size
    return impl.binary_pass(code, a.address, a.array.size, scalar.ctypes.data, 1, [size],
                            [1], [0])


def _strides(dims, out):
    """broadcast_strides, after dropping leading 1s that exceed the output's rank (a scalar
    constant may arrive as [1] for a [] output)."""
    dims = tuple(dims)
    while len(dims) > len(out) and dims[0] == 1:
        dims = dims[1:]
    return broadcast_strides(dims, out)


def _passes(impl, code, a, b, y, keep):
    """The passes computing y = a op b in the formats the op context chose."""
    sy = y.shape
    if sy.data_format is not DataFormat.N16CX:
        out = tuple(sy.dims)
        return [impl.binary_pass(code, a.address, a.array.size, b.address, b.array.size, out,
                                 _strides(a.shape.dims, out), _strides(b.shape.dims, out))]
    a_blocked = a.shape.data_format is DataFormat.N16CX
    b_blocked = b.shape.data_format is DataFormat.N16CX
    channels = sy.dims[1]
    phys = sy.physical_dims
    blocked = (phys[0], phys[1], spatial_size(sy))
    full = tuple(sy.dims)
    if a_blocked and b_blocked and tuple(a.shape.dims) == full == tuple(b.shape.dims):
        size = y.array.size
        passes = [impl.binary_pass(code, a.address, a.array.size, b.address, b.array.size,
                                   [size], [1], [1])]
        if code == impl.DIV and channels % 16:
            # The padding lanes hold 0 / 0: y = y * 1 with padding lanes written 0.
            one = np.ones(1, np.float32)
            keep.append(one)
            passes.append(impl.channel_pass(impl.MUL, y.address, one.ctypes.data, channels, 0,
                                            *blocked, False, channels))
        return passes
    # One operand has the output's shape (blocked); the other is a per-(n, c) vector, in
    # either format, or an NDARRAY plane broadcast over the channels.
    a_big = tuple(a.shape.dims) == full and a_blocked
    big, vec, vec_first = (a, b, False) if a_big else (b, a, True)
    if vec.shape.data_format is not DataFormat.N16CX and is_channel_plane(vec.shape.dims,
                                                                          full):
        batch_stride = blocked[2] if vec.shape.dims[0] > 1 else 0
        return [impl.plane_pass(code, big.address, vec.address, *blocked, vec_first,
                                channels, batch_stride)]
    vec_len, vec_stride, batch_stride = _vector_strides(vec, channels, len(sy.dims))
    return [impl.channel_pass(code, big.address, vec.address, vec_len, vec_stride, *blocked,
                              vec_first, channels, batch_stride)]


# Add, Sub, Mul, Div and Sum: float32 and every integer type (wrapping, Div truncating).
ARITHMETIC_TYPES = (DataType.FLOAT32, DataType.INT8, DataType.UINT8, DataType.INT16,
                    DataType.UINT16, DataType.INT32, DataType.UINT32, DataType.INT64,
                    DataType.UINT64)


class BroadcastOp(X86OptKernel):
    """Shared type checks and format choice of the broadcasting arithmetic ops."""

    supported_types = ARITHMETIC_TYPES
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = broadcast_inputs_shape
    op_name = None  # ADD, SUB, MUL or DIV of the eltwise impl

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
        full = 0
        for shape, is_blocked in zip(in_shapes, blocked):
            if is_blocked and tuple(shape) == tuple(out_shape):
                wanted.append(DataFormat.N16CX)
                full += 1
            elif tuple(shape) == tuple(out_shape) and len(in_shapes) == 2 and getattr(
                    self, "readers_take_blocked", False):
                # A blocked operand meets an NDARRAY one of its shape: one of them is
                # reordered either way; the readers run N16CX, so this one.
                wanted.append(DataFormat.N16CX)
            elif is_batch_channel_vector(shape, out_shape) and len(in_shapes) == 2:
                # A squeeze-excite scale straight from a blocked Conv stays blocked.
                wanted.append(DataFormat.N16CX if is_blocked else DataFormat.NDARRAY)
            elif is_channel_vector(shape, out_shape) or (
                    is_channel_plane(shape, out_shape) and len(in_shapes) == 2):
                wanted.append(DataFormat.NDARRAY)
            else:
                return ndarray, [DataFormat.NDARRAY]
        if not full:
            return ndarray, [DataFormat.NDARRAY]
        return wanted, [DataFormat.N16CX]

    def create_kernel(self):
        return BinaryKernel(self, self.op_name)


# (op type, impl op, first opset with numpy broadcasting).
BINARY_OPS = (("Add", "ADD", 7), ("Sub", "SUB", 7), ("Mul", "MUL", 7), ("Div", "DIV", 7),
              ("Sum", "ADD", 8))

for _op_type, _op_name, _since in BINARY_OPS:
    _cls = type(f"{_op_type}Op", (BroadcastOp,), {
        "op_name": _op_name, "__module__": __name__,
        "__doc__": f"ONNX {_op_type} from opset {_since}, numpy broadcasting."})
    globals()[_cls.__name__] = op("", _op_type, since=_since)(_cls)
del _op_type, _op_name, _since, _cls
