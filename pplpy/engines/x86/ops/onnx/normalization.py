"""Op contexts of BatchNormalization (inference), LRN and Softmax."""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.canned import follow_input_format
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import BatchNormalizationParam, LRNParam, SoftmaxParam
from pplpy.models.onnx.parsers.encodings import parse_softmax, parse_softmax_coerced
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis

LANES = 16  # channels per N16CX block


class BatchNormalizationKernel(X86Kernel):
    """y = x * a[c] + b[c] with a = scale / sqrt(var + epsilon), b = B - mean * a.

    Constant parameters (the usual case) are folded into a and b once, here, padded with
    zeros to whole 16-channel blocks; the raw inputs 1-4 are then released
    (``packed_inputs``).  A channel whose a or b is not finite (var + epsilon == 0, an inf
    or NaN statistic) keeps the spec's arithmetic instead, y = (x - mean) * a + B: +/-inf
    for x != mean and NaN for x == mean, where x * inf + (B - mean * inf) is NaN for all x;
    the step then subtracts a per-channel ``center`` (mean there, 0 elsewhere).  Parameters computed at run time need no pre-step: the step reads
    them where they live and folds each channel's a and b itself (C values, cheap beside
    the C * S pixels), so a node mixing constant and run-time parameters works too."""

    def __init__(self, op):
        super().__init__(op)
        params = [op.constant(i) for i in range(1, 5)]
        self.scale = self.shift = self.center = None
        if all(p is not None for p in params):
            scale, bias, mean, var = (np.asarray(p, np.float32).reshape(-1) for p in params)
            with np.errstate(all="ignore"):  # var + epsilon == 0 and the like: see above
                a = (scale / np.sqrt(var + np.float32(self.param.epsilon))).astype(np.float32)
                b = (bias - mean * a).astype(np.float32)
            exact = ~(np.isfinite(a) & np.isfinite(b))
            padded = -(-len(a) // LANES) * LANES
            self.scale = np.zeros(padded, np.float32)
            self.shift = np.zeros(padded, np.float32)
            self.scale[: len(a)] = a
            self.shift[: len(b)] = np.where(exact, bias, b)
            if exact.any():
                self.center = np.zeros(padded, np.float32)
                self.center[: len(a)] = np.where(exact, mean, 0)
            self.packed_inputs = (1, 2, 3, 4)

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("norm_fp32")
        x, y = io.inputs[0], io.outputs[0]
        n, c, s = _n_c_s(x.shape)
        blocked = x.shape.data_format is DataFormat.N16CX
        if self.scale is not None:
            keep = (self.scale, self.shift, self.center)
            scale, shift = (a.__array_interface__["data"][0] for a in keep[:2])
            center = 0 if self.center is None else self.center.__array_interface__["data"][0]
            if blocked:
                return impl.make_channel_affine_n16cx_step(
                    x.address, scale, shift, y.address, n, -(-c // LANES), s, keep, center)
            return impl.make_channel_affine_ndarray_step(x.address, scale, shift, y.address,
                                                         n, c, s, keep, center)
        params = io.inputs[1:5]
        for name, slot in zip(("scale", "B", "mean", "var"), params):
            array = slot.array
            if array.dtype != np.float32 or not array.flags.c_contiguous or array.size != c:
                raise self.op.unsupported(
                    f"input {name!r}: expected {c} contiguous float32 values, got "
                    f"{array.dtype} {list(array.shape)}")
        make = impl.make_batchnorm_n16cx_step if blocked else impl.make_batchnorm_ndarray_step
        return make(x.address, *(slot.address for slot in params), float(self.param.epsilon),
                    y.address, n, c, s, tuple(slot.array for slot in params))


def _n_c_s(shape):
    """(N, C, S) of a rank >= 2 tensor, S the product of its spatial dims (1 for rank 2)."""
    return shape.dims[0], shape.dims[1], math.prod(shape.dims[2:])


class LRNKernel(X86Kernel):
    """y = x / (bias + alpha / size * sum of x ** 2 over the channel window) ** beta."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        n, c, s = _n_c_s(io.inputs[0].shape)
        return self.impl("norm_fp32").make_lrn_step(
            io.inputs[0].address, io.outputs[0].address, n, c, s, int(p.size), float(p.alpha),
            float(p.beta), float(p.bias), io.num_threads)


class SoftmaxKernel(X86Kernel):
    """Softmax along one axis of the (outer, n, inner) view of the input."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        dims = io.inputs[0].shape.dims or (1,)
        axis = self.param.axis % len(dims)
        if self.node.opset < 13:
            # Coerced to 2-D: [prod(dims[:axis]), prod(dims[axis:])], softmax over rows.
            view = (math.prod(dims[:axis]), math.prod(dims[axis:]), 1)
        else:
            view = (math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:]))
        return self.impl("norm_fp32").make_softmax_step(io.inputs[0].address,
                                                       io.outputs[0].address, *view)


@op("", "BatchNormalization", since=7, param=BatchNormalizationParam)
class BatchNormalizationOp(X86OptKernel):
    """y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]; any format."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format

    def infer_type(self, in_types):
        if self.param.training_mode:
            raise self.unsupported("training_mode=1 (batch statistics) is not supported; "
                                   "pplpy runs inference")
        if not self.param.spatial:
            raise self.unsupported("spatial=0 (per-activation statistics) is not supported")
        if len([o for o in self.node.outputs if o]) > 1:
            raise self.unsupported("running mean/var outputs exist only in training mode")
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        x = in_shapes[0]
        if len(x) < 2:
            raise self.shape_error("input must be (N, C, ...)", in_shapes)
        for index, name in enumerate(("scale", "B", "mean", "var"), start=1):
            if in_shapes[index] is None or tuple(in_shapes[index]) != (x[1],):
                raise self.shape_error(f"{name} must have shape [{x[1]}] (one per channel)",
                                       in_shapes)
        return [x]

    def create_kernel(self):
        return BatchNormalizationKernel(self)


@op("", "LRN", since=1, param=LRNParam)
class LRNOp(X86OptKernel):
    """Local response normalisation across channels (NDARRAY: it reads neighbour channels)."""

    def infer_shape(self, in_shapes, in_values):
        if len(in_shapes[0]) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if self.param.size < 1:
            raise self.shape_error(f"size must be >= 1, got {self.param.size}", in_shapes)
        return [in_shapes[0]]

    def create_kernel(self):
        return LRNKernel(self)


@op("", "Softmax", since=1, param=SoftmaxParam, parse=parse_softmax_coerced)  # flattens to 2-D
@op("", "Softmax", since=13, param=SoftmaxParam, parse=parse_softmax)  # one axis
class SoftmaxOp(X86OptKernel):
    """Before opset 13, softmax over the 2-D coercion at ``axis``; from 13, along ``axis``."""

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        rank = max(len(shape), 1)
        normalize_axis(self.param.axis, rank)
        return [shape]

    def create_kernel(self):
        return SoftmaxKernel(self)
