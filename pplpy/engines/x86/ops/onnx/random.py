"""The random generators: RandomUniform, RandomNormal (1, 22), RandomUniformLike,
RandomNormalLike (1, 22) and Bernoulli (15, 22).

    RandomUniform(Like)   y ~ U[low, high)           shape: the attribute / the input's
    RandomNormal(Like)    y ~ N(mean, scale ** 2)
    Bernoulli             y[i] = 1 with probability input[i], else 0

Outputs are float32 or float64 (Bernoulli: also bool, int8/uint8, int32, int64), as
``dtype`` says (the *Like ops and Bernoulli default to the input's type).  With ``seed``
the values are a fixed function of (seed, element index), the same for every run and
thread count.  Without, every run draws new values: the kernel takes a base seed from the
OS when it is made and a counter, and a serial step before the fill seeds each run with
hash(base, next count) (runtimes sharing the kernel take different counts).  ONNX fixes the
distribution, not the generator: no other engine gives the same values.  Compiled steps of
``_random``.
"""


import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _random
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import (
    BernoulliParam,
    RandomNormalLikeParam,
    RandomNormalParam,
    RandomUniformLikeParam,
    RandomUniformParam,
)

_FLOATS = (DataType.FLOAT32, DataType.FLOAT64)
_BERNOULLI_OUT = _FLOATS + (DataType.BOOL, DataType.INT8, DataType.UINT8, DataType.INT32,
                            DataType.INT64)


def _seed_bits(seed):
    """The generator's 64-bit seed: the float attribute's bits, or fresh entropy."""
    if seed is None:
        return int(np.random.SeedSequence().entropy) & ((1 << 64) - 1)
    return int(np.array(float(seed), np.float64).view(np.uint64))


class RandomKernel(X86Kernel):
    def __init__(self, op_ctx, kind):
        super().__init__(op_ctx)
        self.kind = kind
        self.seed = _seed_bits(self.param.seed)
        # Unseeded: the number of runs drawn so far, shared by every plan of this kernel.
        self.draws = None if self.param.seed is not None else np.zeros(1, np.uint64)
        p = self.param
        if kind == "uniform":
            self.a, self.b = float(p.low), float(p.high) - float(p.low)
        elif kind == "normal":
            self.a, self.b = float(p.mean), float(p.scale)
        else:
            self.a, self.b = 0.0, 1.0

    def make_step(self, io):
        if not self.has_work(io):
            return None
        y = io.outputs[0]
        keep = [y.array]
        p_addr, p_double = 0, False
        if self.kind == "bernoulli":
            x = io.inputs[0]
            keep.append(x.array)
            p_addr, p_double = x.address, x.shape.data_type is DataType.FLOAT64
        fill = _random.make_random_step(
            self.kind, y.shape.data_type.numpy, y.address, y.shape.element_count, self.seed,
            self.a, self.b, p_addr, p_double, tuple(keep))
        if self.draws is None:
            return fill
        draw = _random.make_draw_seed_step(fill, self.draws.ctypes.data, self.seed)
        draw.keep = (draw.keep, self.draws)
        return [draw, fill]


class _RandomOp(X86OptKernel):
    # Never folded into a constant or evaluated on the host when a plan is made: the op
    # stays a step.  (Without a seed, every run draws new values.)
    deterministic = False
    kind = "uniform"
    allowed = _FLOATS

    def _out_type(self, default):
        dtype = self.param.dtype
        out = default if dtype is None else DataType.from_onnx(dtype)
        if out not in self.allowed:
            name = out if out is not None else f"ONNX type {dtype}"
            raise self.unsupported(f"dtype {name}: pplpy generates "
                                   f"{', '.join(str(t) for t in self.allowed)}")
        return out

    def create_kernel(self):
        return RandomKernel(self, self.kind)


class _FromShape(_RandomOp):
    def infer_type(self, in_types):
        return [self._out_type(None)]

    def infer_shape(self, in_shapes, in_values):
        shape = tuple(int(d) for d in self.param.shape)
        if any(d < 0 for d in shape):
            raise self.shape_error(f"shape {list(shape)} has a negative dim", in_shapes)
        return [shape]


class _Like(_RandomOp):
    supported_types = tuple(DataType)  # only the input's shape is read
    def infer_type(self, in_types):
        return [self._out_type(in_types[0])]

    def infer_shape(self, in_shapes, in_values):
        return [tuple(in_shapes[0])]


@op("", "RandomUniform", since=1, param=RandomUniformParam)
class RandomUniformOp(_FromShape):
    """y ~ U[low, high) of the attribute shape; float32/float64."""



@op("", "RandomNormal", since=1, param=RandomNormalParam)
class RandomNormalOp(_FromShape):
    """y ~ N(mean, scale^2) of the attribute shape; float32/float64."""

    kind = "normal"


@op("", "RandomUniformLike", since=1, param=RandomUniformLikeParam)
class RandomUniformLikeOp(_Like):
    """y ~ U[low, high) of the input's shape; float32/float64."""


@op("", "RandomNormalLike", since=1, param=RandomNormalLikeParam)
class RandomNormalLikeOp(_Like):
    """y ~ N(mean, scale^2) of the input's shape; float32/float64."""

    kind = "normal"


@op("", "Bernoulli", since=15, param=BernoulliParam)
class BernoulliOp(_Like):
    """y[i] = 1 with probability x[i]; float32/float64 x."""

    kind = "bernoulli"
    allowed = _BERNOULLI_OUT
    supported_types = _FLOATS  # float64 probabilities are read as they are

    def infer_type(self, in_types):
        if in_types[0] not in _FLOATS:
            raise self.unsupported(f"input is {in_types[0]}: Bernoulli takes float32 or "
                                   "float64 probabilities")
        return [self._out_type(in_types[0])]


