"""Element-wise ops from two tables: the activations and the broadcasting arithmetic.

ACTIVATIONS has one row per (op, opset range): the ONNX op, its activation code (a vector
function in ``impls/_activation_fp32.h``, shared with the fused GEMM/conv epilogue) and where
its parameters p0, p1 come from.  Each row is declared with ``@op`` and runs in NDARRAY or
N16CX (whichever arrives) on every ISA tier, as one compiled activation step.  Adding an
activation is a row here plus its vector function and code.

BINARY_OPS are Add, Sub, Mul and Div with numpy broadcasting, float32 / int32 / int64; Sum
is a chain of Adds in one step.  Formats: NDARRAY always works; N16CX is kept when the big
operands arrive blocked with the output's shape and any other operand is a per-channel vector
([C], [C,1,1], [1,C,1,1] ...): a residual Sum, a bias or a scale after a Conv.

    x --make_activation_step--> y                 a, b --binary_pass / channel_pass--> y
"""

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls.broadcast import broadcast_strides
from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.engines.x86.ops.canned import (
    NUMERIC_TYPES,
    broadcast_inputs_shape,
    follow_input_format,
    same_shape_as_input,
)
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import Slot, X86Kernel
from pplpy.engines.x86.ops.layout import spatial_size
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.models.onnx.parsers.encodings import parse_clip_attributes
from pplpy.params.onnx import ClipParam, LeakyReluParam

# ---------------------------------------------------------------------------------------
# Activations.


def _no_params(kernel, io):
    return 0.0, 0.0


def _leaky_relu_params(kernel, io):
    return kernel.param.alpha, 0.0


def _clip_attributes(kernel, io):
    return kernel.param.min, kernel.param.max


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
    params: Callable = _no_params  # (kernel, io) -> (p0, p1): floats, or Slots read at run time
    param: type | None = None  # the param dataclass parsed from the attributes
    parse: Callable | None = None  # a custom parser, where the ONNX encoding is awkward


ACTIVATIONS = (
    Activation("Relu", 6, PostOp.RELU),
    Activation("LeakyRelu", 6, PostOp.LEAKY_RELU, _leaky_relu_params, LeakyReluParam),
    Activation("Clip", 6, PostOp.CLIP, _clip_attributes, ClipParam, parse_clip_attributes),
    Activation("Clip", 11, PostOp.CLIP, _clip_inputs),  # min/max became optional inputs
    Activation("Sigmoid", 6, PostOp.SIGMOID),
    Activation("Tanh", 6, PostOp.TANH),
    Activation("HardSwish", 14, PostOp.HARD_SWISH),
)


class ActivationKernel(X86Kernel):
    """y = f(x) as one flat activation step, in either format (N16CX padding stays finite)."""

    def __init__(self, op, activation):
        super().__init__(op)
        self.activation = activation

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        values, addresses, keep = [], [], []
        for p in self.activation.params(self, io):
            if isinstance(p, Slot):
                values.append(0.0)
                addresses.append(p.address)
                keep.append(p.array)
            else:
                values.append(float(p))
                addresses.append(0)
        step = self.impl("eltwise_fp32").make_activation_step(
            x.address, y.address, x.array.size, int(self.activation.code), *values, *addresses)
        step.keep = keep
        return _named(step, self.node.name)


class ActivationOp(X86OptKernel):
    """An element-wise float32 activation; ``activation`` is its row of ACTIVATIONS."""

    activation = None
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input
    select_format = follow_input_format

    def create_kernel(self):
        return ActivationKernel(self, self.activation)


class ClipOp(ActivationOp):
    """Clip checks that min and max (inputs 1 and 2 from opset 11) are scalars."""

    def infer_shape(self, in_shapes, in_values):
        for index in (1, 2):
            shape = in_shapes[index] if index < len(in_shapes) else None
            if shape is not None and math.prod(shape) != 1:
                raise self.shape_error(f"input {index} (min/max) must be a scalar", in_shapes)
        return [in_shapes[0]]


def _declare_activation(row):
    base = ClipOp if row.op_type == "Clip" else ActivationOp
    name = f"{row.op_type}Op" if row.since == 6 else f"{row.op_type}{row.since}Op"
    doc = f"ONNX {row.op_type} from opset {row.since}: activation {row.code.name.lower()}."
    cls = type(name, (base,), {"activation": row, "__doc__": doc, "__module__": __name__})
    return op("", row.op_type, since=row.since, param=row.param, parse=row.parse)(cls)


for _row in ACTIVATIONS:
    _cls = _declare_activation(_row)
    globals()[_cls.__name__] = _cls
del _row, _cls


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
            if y.shape.data_format is DataFormat.N16CX:
                # A blocked term first, so that the first pass writes all of y.
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
    if a_blocked and b_blocked:
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
    big, vec, vec_first = (a, b, False) if a_blocked else (b, a, True)
    return [impl.channel_pass(code, big.address, vec.address, channels,
                              1 if vec.array.size > 1 else 0, *blocked, vec_first, channels)]


class BroadcastOp(X86OptKernel):
    """Shared type checks and format choice of the broadcasting arithmetic ops."""

    supported_types = NUMERIC_TYPES
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

    def create_kernel(self):
        return BinaryKernel(self, self.op_name)


# (op type, impl op, first opset with numpy broadcasting).  The kernels also do SUB and DIV;
# rows for Sub and Div wait for their small-int conformance cases to join EXCLUDES.
BINARY_OPS = (("Add", "ADD", 7), ("Mul", "MUL", 7), ("Sum", "ADD", 8))

for _op_type, _op_name, _since in BINARY_OPS:
    _cls = type(f"{_op_type}Op", (BroadcastOp,), {
        "op_name": _op_name, "__module__": __name__,
        "__doc__": f"ONNX {_op_type} from opset {_since}, numpy broadcasting."})
    globals()[_cls.__name__] = op("", _op_type, since=_since)(_cls)
del _op_type, _op_name, _since, _cls
