"""Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), logic (And, Or, Xor, Not),
bitwise logic on integers (BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot), Where, IsNaN, IsInf,
BitShift and Mod: numpy broadcasting over any pplpy element type.

Each op is one compiled pass of ``impls/_logic.pyx`` over its output (NDARRAY): the inputs
are read through element strides (0 along broadcast dims), so nothing is expanded.

    a, b --Equal/Less/...--> bool      c, x, z --Where--> x or z      x --IsNaN/Not--> bool
    a, b --BitwiseAnd/...--> a's type                 x --BitwiseNot--> x's type
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _logic
from pplpy.engines.x86.impls.broadcast import broadcast_strides
from pplpy.engines.x86.ops.canned import ANY_TYPE, broadcast_inputs_shape, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import BitShiftParam, IsInfParam, ModParam

OPS = _logic.OPS
_WORD = {1: DataType.UINT8, 2: DataType.UINT16, 4: DataType.UINT32, 8: DataType.UINT64}


def strides_to(dims, out):
    """Element strides reading a C-contiguous ``dims`` array broadcast to ``out`` (leading 1s
    beyond the output's rank dropped: a scalar constant may arrive as [1] for a [] output)."""
    dims = tuple(dims)
    while len(dims) > len(out) and dims[0] == 1:
        dims = dims[1:]
    return [int(s) for s in broadcast_strides(dims, tuple(out))]


def contiguous(slot, what):
    if not slot.array.flags.c_contiguous:
        raise ValueError(f"{what}: expected a C-contiguous array, got strides "
                         f"{slot.array.strides}")
    return slot


def logic_pass(code, elem_type, inputs, out):
    """A _logic pass of ``code`` over ``out`` reading the arrays ``inputs`` (numpy)."""
    return _logic.make_pass(code, elem_type, [a.ctypes.data if a.size else 1 for a in inputs],
                            [a.size for a in inputs], out,
                            [strides_to(a.shape, out) for a in inputs])


def named(step, name):
    step.label = name
    return step


class LogicKernel(X86Kernel):
    """One _logic pass over the output; the op context says which (``logic_args``)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = contiguous(io.outputs[0], "output")
        code, elem_type, arrays, keep = self.op.logic_args(io)
        arrays = [np.asarray(a) for a in arrays]
        for i, a in enumerate(arrays):
            if not a.flags.c_contiguous:
                raise ValueError(f"input {i}: expected a C-contiguous array")
        p = logic_pass(code, elem_type, arrays, tuple(y.shape.dims))
        step = _logic.make_step(y.address, y.array.itemsize, y.array.size, [p],
                                keep=(arrays, keep))
        return named(step, self.node.name)


class LogicOp(X86OptKernel):
    """Shared checks: inputs of one element type that the _logic op ``code`` accepts."""

    supported_types = ANY_TYPE
    infer_shape = broadcast_inputs_shape
    code = None          # a value of _logic.OPS
    output_type = None   # None: the inputs' type

    def check_types(self, in_types, code=None):
        code = self.code if code is None else code
        present = [t for t in in_types if t is not None]
        if any(t is not present[0] for t in present):
            raise self.unsupported("inputs must share one element type, got "
                                   + ", ".join(str(t) for t in present))
        allowed = [DataType(t) for t in _logic.TYPES[code]]
        if present[0] not in allowed:
            raise self.unsupported(f"input type {present[0]} is not supported (pplpy has: "
                                   f"{', '.join(str(t) for t in allowed)})")
        return present[0]

    def infer_type(self, in_types):
        t = self.check_types(in_types)
        return [self.output_type or t]

    def logic_args(self, io):
        arrays = [s.array for s in io.inputs if s is not None]
        return self.code, io.inputs[0].shape.data_type.value, arrays, None

    def create_kernel(self):
        return LogicKernel(self)


def _declare(op_type, since, code, output_type=None, param=None, base=LogicOp, doc=""):
    cls = type(f"{op_type}Op", (base,), {
        "code": code, "output_type": output_type, "__module__": __name__,
        "__doc__": doc or f"ONNX {op_type} from opset {since}, numpy broadcasting."})
    globals()[cls.__name__] = op("", op_type, since=since, param=param)(cls)


# (op type, since, _logic op, output type: None for the inputs' type)
for _op_type, _since, _code, _out in (
        ("Equal", 7, "EQ", DataType.BOOL), ("Less", 7, "LT", DataType.BOOL),
        ("Greater", 7, "GT", DataType.BOOL), ("LessOrEqual", 12, "LE", DataType.BOOL),
        ("GreaterOrEqual", 12, "GE", DataType.BOOL), ("And", 7, "AND", DataType.BOOL),
        ("Or", 7, "OR", DataType.BOOL), ("Xor", 7, "XOR", DataType.BOOL),
        ("BitwiseAnd", 18, "BIT_AND", None), ("BitwiseOr", 18, "BIT_OR", None),
        ("BitwiseXor", 18, "BIT_XOR", None), ("BitwiseNot", 18, "BIT_NOT", None)):
    _declare(_op_type, _since, OPS[_code], _out)


@op("", "Not", since=1)
class NotOp(LogicOp):
    """ONNX Not: y = !x on bool."""

    code = OPS["NOT"]
    infer_shape = same_shape_as_input


@op("", "IsNaN", since=9)
class IsNaNOp(LogicOp):
    """ONNX IsNaN: y = x != x, float32/float64 -> bool."""

    code = OPS["IS_NAN"]
    output_type = DataType.BOOL
    infer_shape = same_shape_as_input


@op("", "IsInf", since=10, param=IsInfParam)
class IsInfOp(LogicOp):
    """ONNX IsInf: x == +inf (detect_positive) or x == -inf (detect_negative) -> bool."""

    code = OPS["IS_INF"]
    output_type = DataType.BOOL
    infer_shape = same_shape_as_input

    def logic_args(self, io):
        x = io.inputs[0]
        pos, neg = self.param.detect_positive, self.param.detect_negative
        if not pos and not neg:  # nothing detected: all False, from one zero byte
            zero = np.zeros(1, np.uint8)
            return OPS["COPY"], DataType.UINT8.value, [zero.reshape(())], zero
        code = OPS["IS_INF"] if pos and neg else OPS["IS_POSINF"] if pos else OPS["IS_NEGINF"]
        return code, x.shape.data_type.value, [x.array], None


@op("", "Where", since=9)
class WhereOp(LogicOp):
    """ONNX Where: y = x if condition else z, any element type, 3-way numpy broadcasting."""

    code = OPS["WHERE"]

    def infer_type(self, in_types):
        cond, x, z = in_types
        if cond is not DataType.BOOL:
            raise self.unsupported(f"condition must be bool, got {cond}")
        if x is not z:
            raise self.unsupported(f"X and Y must share one element type, got {x}, {z}")
        return [x]

    def logic_args(self, io):
        c, x, z = io.inputs
        return self.code, _WORD[x.array.itemsize].value, [c.array, x.array, z.array], None


@op("", "BitShift", since=11, param=BitShiftParam)
class BitShiftOp(LogicOp):
    """ONNX BitShift: y = x << s or x >> s (arithmetic for signed x); counts outside
    [0, bits) give 0 (-1 for a right shift of a negative)."""

    code = OPS["SHL"]

    def infer_type(self, in_types):
        if self.param.direction not in ("LEFT", "RIGHT"):
            raise self.unsupported(f'direction "{self.param.direction}": expected LEFT or RIGHT')
        return super().infer_type(in_types)

    def logic_args(self, io):
        code = OPS["SHL"] if self.param.direction == "LEFT" else OPS["SHR"]
        return code, io.inputs[0].shape.data_type.value, [s.array for s in io.inputs], None


@op("", "Mod", since=10, param=ModParam)
class ModOp(LogicOp):
    """ONNX Mod: fmod=0: the remainder takes the divisor's sign (np.mod), fmod=1: the
    dividend's (np.fmod); integer x mod 0 = 0."""

    code = OPS["MOD"]

    def logic_args(self, io):
        code = OPS["FMOD"] if self.param.fmod else OPS["MOD"]
        return code, io.inputs[0].shape.data_type.value, [s.array for s in io.inputs], None


del _op_type, _since, _code, _out
