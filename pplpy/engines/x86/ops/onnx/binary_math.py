"""Pow, Min, Max, Mean and PRelu with numpy broadcasting.

float32 runs in ``impls/_binmath_fp32_<isa>.pyx`` (vector code per ISA tier); the other
element types of Min and Max, and integer Pow, in the baseline ``impls/_logic.pyx``.  A
variadic op is a chain of passes in one step (y = max(x0, x1); y = max(y, x2) ...), Mean
ends with y = y / n.  Pow's exponent, when its type differs from what the pass reads
(float32 for a float32 base, float64 for an integer base), is cast first in a step of its
own.

Formats: NDARRAY always; float32 PRelu / Min / Max / Mean also run on N16CX when the
blocked operands have the output's shape and every other operand is a constant per-channel
vector or scalar (a PRelu after a Conv): the kernel then works on physical dims with the
vector zero-padded to whole channel blocks, so padding lanes stay finite.
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _cast, _logic
from pplpy.engines.x86.ops.canned import broadcast_inputs_shape
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.compare_logic import contiguous, named, strides_to
from pplpy.engines.x86.ops.onnx.elementwise import is_channel_vector
from pplpy.engines.x86.ops.op_context import X86OptKernel

_LOGIC_TYPES = tuple(DataType(t) for t in _logic.TYPES[_logic.OPS["MAX"]])
_INT_TYPES = tuple(DataType(t) for t in _logic.TYPES[_logic.OPS["SHL"]])


def _contiguous_strides(dims):
    strides, step = [], 1
    for d in reversed(tuple(dims)):
        strides.append(0 if d == 1 else step)
        step *= d
    return strides[::-1]


class BinMathKernel(X86Kernel):
    """y = x0 op x1 op x2 ... as one step of passes; float32 in binmath_fp32, others in
    _logic.  ``padded`` holds constant per-channel operands zero-padded for N16CX."""

    def __init__(self, op, fp_op, logic_op, mean=False):
        super().__init__(op)
        self.fp_op, self.logic_op, self.mean = fp_op, logic_op, mean
        self.padded = {}
        for i in range(len(self.node.inputs)):
            value = op.constant(i)
            if value is not None and op.blocked_vector(i):
                vec = np.asarray(value, np.float32).reshape(-1)
                if vec.size > 1:
                    channels = vec.size
                    pad = np.zeros(-(-channels // 16) * 16, np.float32)
                    pad[:channels] = vec
                    vec = pad
                self.padded[i] = np.ascontiguousarray(vec)

    def input_dims(self, index, dims, out):
        """The dims input ``index`` broadcasts to the output from."""
        return dims

    def _terms(self, io, y):
        """(array, strides over the output's physical dims) of each present input."""
        sy = y.shape
        if sy.data_format is not DataFormat.N16CX:
            out = tuple(sy.dims)
            terms = []
            for i, s in enumerate(io.inputs):
                if s is None:
                    continue
                a = contiguous(s, f"input {i}").array
                terms.append((a, strides_to(self.input_dims(i, s.shape.dims, out), out)))
            return out, terms
        phys = tuple(sy.physical_dims)
        terms = []
        for i, s in enumerate(io.inputs):
            if s is None:
                continue
            if s.shape.data_format is DataFormat.N16CX:
                terms.append((contiguous(s, f"input {i}").array, _contiguous_strides(phys)))
            else:
                vec = self.padded[i]
                st = [0] * len(phys)
                if vec.size > 1:
                    st[1], st[-1] = 16, 1
                terms.append((vec, st))
        return phys, terms

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = contiguous(io.outputs[0], "output")
        out, terms = self._terms(io, y)
        keep = [t[0] for t in terms]
        if len(terms) == 1:  # one input: y = x op x (Min, Max) or x / 1 (Mean)
            terms = terms * 2
        dtype = y.shape.data_type
        yaddr, size = y.address, y.array.size
        if dtype is DataType.FLOAT32:
            impl = self.impl("binmath_fp32")
            first_op = impl.ADD if self.mean else getattr(impl, self.fp_op)

            def fp_pass(code, a, b):
                return impl.make_pass(code, [a[0].ctypes.data, b[0].ctypes.data],
                                      [a[0].size, b[0].size], out, [a[1], b[1]])

            ybuf = (y.array.reshape(-1), _contiguous_strides(out))
            single = len(keep) == 1
            if self.mean and single:
                passes = []
                ybuf = terms[0]
            else:
                passes = [fp_pass(first_op, terms[0], terms[1])]
                for t in terms[2:]:
                    passes.append(fp_pass(first_op, ybuf, t))
            if self.mean:
                n = np.array(len(keep), np.float32)
                keep.append(n)
                passes.append(fp_pass(impl.DIV, ybuf, (n, [0] * len(out))))
            step = impl.make_step(yaddr, size, passes, keep=keep)
        else:
            code = _logic.OPS[self.logic_op]
            et = dtype.value

            def lg_pass(a, b):
                return _logic.make_pass(code, et, [a[0].ctypes.data, b[0].ctypes.data],
                                        [a[0].size, b[0].size], out, [a[1], b[1]])

            ybuf = (y.array.reshape(-1), _contiguous_strides(out))
            passes = [lg_pass(terms[0], terms[1])]
            for t in terms[2:]:
                passes.append(lg_pass(ybuf, t))
            step = _logic.make_step(yaddr, y.array.itemsize, size, passes, keep=keep)
        return named(step, self.node.name)


class BinMathOp(X86OptKernel):
    """Shared type checks and format choice of Min, Max, Mean and PRelu."""

    supported_types = (DataType.FLOAT32,)
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    keeps_padding_finite = True
    infer_shape = broadcast_inputs_shape
    fp_op = logic_op = None
    mean = False

    def infer_type(self, in_types):
        present = [t for t in in_types if t is not None]
        if any(t is not present[0] for t in present):
            raise self.unsupported("inputs must share one element type, got "
                                   + ", ".join(str(t) for t in present))
        if present[0] not in self.supported_types:
            names = ", ".join(str(t) for t in self.supported_types)
            raise self.unsupported(f"input type {present[0]} is not supported (pplpy has: "
                                   f"{names})")
        return [present[0]]

    def out_shape(self, in_shapes):
        return broadcast_inputs_shape(self, in_shapes, None)[0]

    def blocked_vector(self, index):
        """Whether input ``index`` was chosen to stay NDARRAY beside an N16CX output."""
        return index in getattr(self, "_vector_inputs", ())

    def select_format(self, in_formats, in_shapes):
        ndarray = ([DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY])
        self._vector_inputs = ()
        if any(s is None for s in in_shapes) or not any(
                f is DataFormat.N16CX for f in in_formats):
            return ndarray
        out = tuple(self.out_shape(in_shapes))
        if len(out) < 3 or self.node_type() is not DataType.FLOAT32:
            return ndarray
        wanted, vectors = [], []
        for i, (fmt, shape) in enumerate(zip(in_formats, in_shapes)):
            if fmt is DataFormat.N16CX and tuple(shape) == out:
                wanted.append(DataFormat.N16CX)
            elif self.constant(i) is not None and (
                    math.prod(shape) == 1 or is_channel_vector(shape, out)):
                wanted.append(DataFormat.NDARRAY)
                vectors.append(i)
            else:
                return ndarray
        if DataFormat.N16CX not in wanted:
            return ndarray
        self._vector_inputs = tuple(vectors)
        return wanted, [DataFormat.N16CX]

    def node_type(self):
        return getattr(self, "_type", DataType.FLOAT32)

    def create_kernel(self):
        return BinMathKernel(self, self.fp_op, self.logic_op, self.mean)


class MinMaxOp(BinMathOp):
    supported_types = _LOGIC_TYPES

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        self._type = out[0]
        return out


@op("", "Min", since=6)
class MinOp(MinMaxOp):
    """ONNX Min: y = min(x0, x1, ...), numpy broadcasting, NaN propagates."""

    fp_op, logic_op = "MIN", "MIN"


@op("", "Max", since=6)
class MaxOp(MinMaxOp):
    """ONNX Max: y = max(x0, x1, ...), numpy broadcasting, NaN propagates."""

    fp_op, logic_op = "MAX", "MAX"


@op("", "Mean", since=6)
class MeanOp(BinMathOp):
    """ONNX Mean: y = (x0 + x1 + ...) / n, float32."""

    mean = True


def prelu_slope_dims(x, slope):
    """Slope's dims as broadcast against X: unidirectional numpy broadcasting, or (as
    onnx.reference) a 1-D slope whose length matches exactly one dim of X along that dim."""
    x, slope = tuple(x), tuple(slope)
    try:
        strides_to(slope, x)
        return slope
    except ValueError:
        pass
    if len(slope) == 1 and sum(d == slope[0] for d in x) == 1:
        axis = x.index(slope[0])
        return tuple(slope[0] if i == axis else 1 for i in range(len(x)))
    raise ValueError(f"slope {list(slope)} does not broadcast to X {list(x)}")


class PReluKernel(BinMathKernel):
    def input_dims(self, index, dims, out):
        return prelu_slope_dims(out, dims) if index == 1 else dims


@op("", "PRelu", since=7)
class PReluOp(BinMathOp):
    """ONNX PRelu: y = x if x > 0 else x * slope, slope broadcast to X (unidirectional)."""

    fp_op = "PRELU"

    def infer_shape(self, in_shapes, in_values):
        x, slope = in_shapes
        if x is None or slope is None:
            return [x]
        if any(d is None or isinstance(d, str) for d in (*x, *slope)):
            return [x]
        try:
            prelu_slope_dims(x, slope)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [x]

    def out_shape(self, in_shapes):
        return tuple(in_shapes[0])

    def select_format(self, in_formats, in_shapes):
        wanted, out = super().select_format(in_formats, in_shapes)
        if out[0] is DataFormat.N16CX and wanted[0] is not DataFormat.N16CX:
            self._vector_inputs = ()
            return [DataFormat.NDARRAY] * 2, [DataFormat.NDARRAY]
        return wanted, out

    def create_kernel(self):
        return PReluKernel(self, self.fp_op, None)


@op("", "Pow", since=7)
class PowOp(X86OptKernel):
    """ONNX Pow: y = x ** e, numpy broadcasting; float32 x with an exponent of any numeric
    type, or int32 / int64 x (exact by squaring; a fractional exponent through pow)."""

    supported_types = (DataType.FLOAT32, DataType.INT32, DataType.INT64)
    infer_shape = broadcast_inputs_shape

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        e = in_types[1]
        if e not in (DataType.FLOAT32, DataType.FLOAT64) + _INT_TYPES:
            raise self.unsupported(f"exponent type {e} is not supported")
        return out

    def create_kernel(self):
        return PowKernel(self)


class PowKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, e, y = io.inputs[0], io.inputs[1], contiguous(io.outputs[0], "output")
        out = tuple(y.shape.dims)
        xa, ea = contiguous(x, "input 0").array, contiguous(e, "input 1").array
        want = np.float32 if x.shape.data_type is DataType.FLOAT32 else np.float64
        steps = []
        if ea.dtype != want:
            scratch = np.empty(ea.shape, want)
            cast = _cast.make_cast_step(scratch.ctypes.data, ea.ctypes.data, ea.size,
                                        e.shape.data_type.value,
                                        DataType.from_numpy(want).value)
            cast.keep = (scratch, ea)
            steps.append(cast)
            ea = scratch
        strides = [strides_to(x.shape.dims, out), strides_to(e.shape.dims, out)]
        if want is np.float32:
            impl = self.impl("binmath_fp32")
            p = impl.make_pass(impl.POW, [xa.ctypes.data, ea.ctypes.data], [xa.size, ea.size],
                               out, strides)
            step = impl.make_step(y.address, y.array.size, [p], keep=(xa, ea))
        else:
            p = _logic.make_pass(_logic.OPS["POW"], x.shape.data_type.value,
                                 [xa.ctypes.data, ea.ctypes.data], [xa.size, ea.size], out,
                                 strides)
            step = _logic.make_step(y.address, y.array.itemsize, y.array.size, [p],
                                    keep=(xa, ea))
        steps.append(named(step, self.node.name))
        return steps if len(steps) > 1 else steps[0]

