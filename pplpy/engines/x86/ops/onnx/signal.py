"""Signal processing: DFT (opsets 17, 20) and STFT (17) as compiled steps of
``impls/_signal.pyx``; HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix (17).

DFT transforms along one axis of a float32/float64 tensor whose last dim holds a real (1) or
complex (2) value: forward, inverse (scaled by 1/n), one-sided forward (RFFT, the first
n/2 + 1 bins) and one-sided inverse (IRFFT, a real signal of n values).  ``dft_length`` (and
from opset 20 ``axis``) are inputs that decide the output shape, so they must be known when
the plan is made (constants, fed inputs or host values).  STFT is a DFT of each windowed
frame, with the same kernel: its frames are lines of the DFT that overlap in the signal.

The window and mel generators depend on nothing but their (scalar) inputs, which decide
the output's length, so their value is computed when the plan is made, in float64 with the
reference's formulas, and the step copies it (as Range's).
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _signal
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.misc_index import ValueKernel
from pplpy.engines.x86.ops.onnx.movement_common import (
    INDEX_TYPES,
    NUMERIC_TYPES,
    check_index_type,
    prod,
    scalar_of,
    value_of,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import DFT17Param, DFTParam, MelWeightMatrixParam, STFTParam, WindowParam

FLOAT_TYPES = (DataType.FLOAT32, DataType.FLOAT64)
# Element types a generated window or mel matrix may take (output_datatype).
GENERATED_TYPES = NUMERIC_TYPES + (DataType.FLOAT16,)


def _dims_of(io):
    return [s.shape.dims if s is not None else None for s in io.inputs]


def _arrays_of(io):
    return [s.array if s is not None else None for s in io.inputs]


def _optional_scalar(op, in_shapes, in_values, index, what):
    """The value of optional scalar input ``index``, or None when it is omitted."""
    if not op.input_present(index):
        return None
    return int(scalar_of(op, in_shapes, in_values, index, what))


def _scalar_value(op, in_shapes, in_values, index, what):
    """A one-element input as a numpy scalar of its own type (float32 math stays float32)."""
    value = value_of(op, in_values, index, what)
    if value.size != 1:
        raise op.shape_error(f"input {index} ({what}) must hold one value, got shape "
                             f"{list(value.shape)}", in_shapes)
    return value.reshape(-1)[0]


class DFTGeometry:
    """How one DFT node maps its input onto lines of _signal's kernel."""

    def __init__(self, dims, axis, n, mode, onesided):
        self.dims, self.axis, self.n, self.mode = tuple(dims), axis, n, mode
        length, self.channels = dims[axis], dims[-1]
        if mode == "irfft":
            self.n_read, self.n_out, self.out_channels = min(length, n // 2 + 1), n, 1
        else:
            self.n_read = min(length, n)
            self.n_out = n // 2 + 1 if onesided else n
            self.out_channels = 2
        self.outer = prod(dims[:axis])
        self.inner = prod(dims[axis + 1:-1])

    @property
    def out_dims(self):
        d = self.dims
        return d[:self.axis] + (self.n_out,) + d[self.axis + 1:-1] + (self.out_channels,)


class DFTKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        g = self.op.geometry(_dims_of(io), _arrays_of(io))
        c, co, length = g.channels, g.out_channels, g.dims[g.axis]
        step = _signal.make_dft_step(
            y.address, x.address, x.shape.data_type.value, g.mode, g.n, g.n_read, g.n_out,
            c == 2, co == 2, g.outer, g.inner, length * g.inner * c, c, g.inner * c,
            g.n_out * g.inner * co, co, g.inner * co, num_threads=io.num_threads,
            keep=keep_arrays(io))
        step.label = self.node.name
        return step


class SignalOp(X86OptKernel):
    """Shared type checks: input 0 float32/float64, the listed inputs integer scalars."""

    supported_types = FLOAT_TYPES
    index_inputs = ()  # (index, what) of integer inputs

    def infer_type(self, in_types):
        (t,) = super().infer_type(in_types)[:1]
        for index, what in self.index_inputs:
            check_index_type(self, in_types, index, what)
        return [t]

    def create_kernel(self):
        return DFTKernel(self)


@op("", "DFT", since=17, param=DFT17Param)  # axis: an attribute, default 1
@op("", "DFT", since=20, param=DFTParam)  # axis: an input, default -2
class DFTOp(SignalOp):
    """y = the discrete Fourier transform of x along ``axis`` (see the module's doc)."""

    value_inputs = (1, 2)
    index_inputs = ((1, "dft_length"), (2, "axis"))

    def geometry(self, in_shapes, in_values):
        dims = tuple(in_shapes[0])
        rank = len(dims)
        if rank < 2 or dims[-1] not in (1, 2):
            raise self.shape_error("input must have rank >= 2 and a last dim of 1 (real) or 2 "
                                   "(complex)", in_shapes)
        if self.node.opset >= 20:
            axis = _optional_scalar(self, in_shapes, in_values, 2, "axis")
            axis = -2 if axis is None else axis
        else:
            axis = self.param.axis
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise self.shape_error(f"axis {axis} must lie in [{-rank}, -2] or [0, {rank - 2}] "
                                   "(the last dim holds the complex parts)", in_shapes)
        axis %= rank
        inverse, onesided = bool(self.param.inverse), bool(self.param.onesided)
        for name, value in (("inverse", self.param.inverse), ("onesided", self.param.onesided)):
            if value not in (0, 1):
                raise self.unsupported(f"attribute {name} = {value}: expected 0 or 1")
        mode = "irfft" if inverse and onesided else "inverse" if inverse else "forward"
        n = _optional_scalar(self, in_shapes, in_values, 1, "dft_length (the transform "
                             "length, which decides the output shape)")
        if n is None:
            n = 2 * (dims[axis] - 1) if mode == "irfft" else dims[axis]
        if n < 1:
            raise self.shape_error(f"the DFT length must be >= 1, got {n}", in_shapes)
        return DFTGeometry(dims, axis, n, mode, onesided)

    def infer_shape(self, in_shapes, in_values):
        return [self.geometry(in_shapes, in_values).out_dims]


class STFTKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        window = io.inputs[2] if len(io.inputs) > 2 else None
        batch, length, c = x.shape.dims
        fl, hop, frames, n_out = self.op.geometry(_dims_of(io), _arrays_of(io))
        step = _signal.make_dft_step(
            y.address, x.address, x.shape.data_type.value, "forward", fl, fl, n_out, c == 2,
            True, batch, frames, length * c, hop * c, c, frames * n_out * 2, n_out * 2, 2,
            window=window.address if window is not None else 0, num_threads=io.num_threads,
            keep=keep_arrays(io))
        step.label = self.node.name
        return step


@op("", "STFT", since=17, param=STFTParam)
class STFTOp(SignalOp):
    """y[b, f] = the DFT of frame f of signal b (samples f * frame_step ...), windowed."""

    value_inputs = (1, 3)
    index_inputs = ((1, "frame_step"), (3, "frame_length"))

    def infer_type(self, in_types):
        (t,) = super().infer_type(in_types)
        if self.input_present(2) and in_types[2] is not t:
            raise self.unsupported(f"window must have the signal's type {t}, got {in_types[2]}")
        return [t]

    def geometry(self, in_shapes, in_values):
        """(frame_length, frame_step, frames, bins)."""
        dims = tuple(in_shapes[0])
        if len(dims) != 3 or dims[-1] not in (1, 2):
            raise self.shape_error("signal must be [batch, length, 1 or 2]", in_shapes)
        if self.param.onesided not in (0, 1):
            raise self.unsupported(f"attribute onesided = {self.param.onesided}: expected 0 or 1")
        hop = _optional_scalar(self, in_shapes, in_values, 1, "frame_step")
        if hop is None or hop < 1:
            raise self.shape_error(f"frame_step must be given and >= 1, got {hop}", in_shapes)
        fl = _optional_scalar(self, in_shapes, in_values, 3, "frame_length (which decides the "
                              "output shape)")
        if self.input_present(2):
            window = in_shapes[2]
            if len(window) != 1 or (fl is not None and window[0] != fl):
                raise self.shape_error(f"window must be 1-D of frame_length ({fl}) values",
                                       in_shapes)
            fl = window[0]
        if fl is None:
            fl = dims[1]
        if not 1 <= fl <= dims[1]:
            raise self.shape_error(f"frame_length {fl} must lie in [1, {dims[1]}] (the signal "
                                   "length)", in_shapes)
        frames = (dims[1] - fl) // hop + 1
        return fl, hop, frames, fl // 2 + 1 if self.param.onesided else fl

    def infer_shape(self, in_shapes, in_values):
        _, _, frames, bins = self.geometry(in_shapes, in_values)
        return [(in_shapes[0][0], frames, bins, 2)]

    def create_kernel(self):
        return STFTKernel(self)


# -- values computed when the plan is made ---------------------------------------------------


class GeneratorOp(X86OptKernel):
    """An op whose output is a function of its scalar inputs only: ``value`` computes it."""

    value_inputs = ()
    index_inputs = ()
    supported_types = INDEX_TYPES  # of the integer inputs; the output's is output_datatype

    def infer_type(self, in_types):
        for index, what in self.index_inputs:
            if in_types[index] not in INDEX_TYPES:
                raise self.unsupported(f"input {index} ({what}) must be int32 or int64, got "
                                       f"{in_types[index]}")
        code = self.param.output_datatype
        t = DataType.from_onnx(code)
        if t not in GENERATED_TYPES:
            raise self.unsupported(f"output_datatype {code} is not supported (pplpy has: "
                                   f"{', '.join(str(u) for u in GENERATED_TYPES)})")
        return [t]

    def output_type(self):
        return DataType.from_onnx(self.param.output_datatype).numpy

    def infer_shape(self, in_shapes, in_values):
        return [self.value(in_shapes, in_values).shape]

    def plan_value(self, io):
        return self.value(_dims_of(io), _arrays_of(io))

    def cast(self, values, in_shapes):
        """float64 ``values`` as the output type; NaN cannot become an integer."""
        dtype = self.output_type()
        if dtype.kind in "iu" and not np.isfinite(values).all():
            raise self.shape_error("the values are not finite (0/0: a symmetric window of "
                                   "size 1) and cannot be stored as integers", in_shapes)
        return values.astype(dtype)

    def create_kernel(self):
        return ValueKernel(self)


def _hann(n, denom):
    return np.sin(n * np.pi / denom) ** 2


def _hamming(n, denom):
    alpha = 25.0 / 46.0
    return alpha - np.cos(n * np.pi * 2 / denom) * (1.0 - alpha)


def _blackman(n, denom):
    # Summed in the reference's order: an integer output truncates, so 1 - 1e-16 matters.
    return (np.cos(n * (2 * np.pi) / denom) * -0.5 + np.cos(n * (4 * np.pi) / denom) * 0.08
            + 0.42)


class WindowOp(GeneratorOp):
    """w[n] = formula(n / N) for n < size, N = size (periodic) or size - 1 (symmetric)."""

    value_inputs = (0,)
    index_inputs = ((0, "size"),)
    formula = None

    def value(self, in_shapes, in_values):
        size = int(scalar_of(self, in_shapes, in_values, 0, "size (the window length, which "
                             "decides the output shape)"))
        if size < 0:
            raise self.shape_error(f"size must be >= 0, got {size}", in_shapes)
        if self.param.periodic not in (0, 1):
            raise self.unsupported(f"attribute periodic = {self.param.periodic}: expected 0 "
                                   "or 1")
        denom = size if self.param.periodic else size - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            values = type(self).formula(np.arange(size, dtype=np.float64), float(denom))
        return self.cast(values, in_shapes)


for _name, _formula in (("Hann", _hann), ("Hamming", _hamming), ("Blackman", _blackman)):
    _cls = type(f"{_name}WindowOp", (WindowOp,), {
        "formula": staticmethod(_formula), "__module__": __name__,
        "__doc__": f"ONNX {_name}Window (opset 17): the {_name.lower()} window of ``size`` "
                   "values as output_datatype."})
    globals()[_cls.__name__] = op("", f"{_name}Window", since=17, param=WindowParam)(_cls)
del _name, _formula, _cls


def mel_bins_fit(bins, rows):
    """Whether every row the filters write lies in [0, rows): a filter writes rows
    left..center and center..right - 1."""
    return bins.min() >= 0 and bins[:-1].max() < rows and bins[-1] <= rows


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
    """[dft_length // 2 + 1, num_mel_bins] float64: triangular filters evenly spaced on the
    mel scale, mel(f) = 2595 log10(1 + f / 700), each peaking at 1.  Arithmetic as the ONNX
    reference: the edges' log1p in their own type, the rest in float64, the bin of each mel
    point floor((dft_length + 1) f / sample_rate).  Returns the bins of the points too."""
    edges = np.array([lower_hz, upper_hz])  # numpy scalars of one float type
    mel_edges = np.asarray(2595 * np.log1p(edges / 700), np.float64) / math.log(10)
    points = np.arange(num_mel_bins + 2, dtype=np.int64)
    mel = points * ((mel_edges[1] - mel_edges[0]) / points.size) + mel_edges[0]
    hz = 700 * np.expm1(mel / 2595 * math.log(10))
    bins = (((dft_length + 1) * hz) // sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins), np.float64)
    if not mel_bins_fit(bins, out.shape[0]):
        return out, bins
    for i in range(num_mel_bins):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            rows = np.arange(left, center + 1)
            out[rows, i] = (rows - left) / float(center - left)
        if right > center:
            rows = np.arange(center, right)
            out[rows, i] = (right - rows) / float(right - center)
    return out, bins


@op("", "MelWeightMatrix", since=17, param=MelWeightMatrixParam)
class MelWeightMatrixOp(GeneratorOp):
    """y = the mel filter bank [dft_length // 2 + 1, num_mel_bins] (see mel_weight_matrix)."""

    value_inputs = (0, 1, 2, 3, 4)
    index_inputs = ((0, "num_mel_bins"), (1, "dft_length"), (2, "sample_rate"))
    # The integer inputs' types and the edges' (read on the host when the plan is made).
    supported_types = INDEX_TYPES + (DataType.FLOAT32, DataType.FLOAT64, DataType.FLOAT16)

    def infer_type(self, in_types):
        for index, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
            if in_types[index] not in self.supported_types[len(INDEX_TYPES):]:
                raise self.unsupported(f"input {index} ({what}) must be a float type, got "
                                       f"{in_types[index]}")
        return super().infer_type(in_types)

    def value(self, in_shapes, in_values):
        what = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                "upper_edge_hertz")
        mels, length, rate = (int(scalar_of(self, in_shapes, in_values, i, w + " (which "
                                            "decides the output shape)"))
                              for i, w in enumerate(what[:3]))
        lower, upper = (_scalar_value(self, in_shapes, in_values, i, what[i]) for i in (3, 4))
        if mels < 1 or length < 1 or rate < 1:
            raise self.shape_error(f"num_mel_bins ({mels}), dft_length ({length}) and "
                                   f"sample_rate ({rate}) must be >= 1", in_shapes)
        if not 0 <= lower < upper:
            raise self.shape_error(f"need 0 <= lower_edge_hertz ({lower}) < upper_edge_hertz "
                                   f"({upper})", in_shapes)
        matrix, bins = mel_weight_matrix(mels, length, rate, lower, upper)
        if not mel_bins_fit(bins, matrix.shape[0]):
            raise self.shape_error(f"upper_edge_hertz ({upper}) lies above the highest "
                                   f"frequency of the {matrix.shape[0]} spectrogram bins "
                                   f"(sample_rate / 2 = {rate / 2})", in_shapes)
        return self.cast(matrix, in_shapes)
