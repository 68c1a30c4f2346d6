"""LayerNormalization (17) and RMSNormalization (23): statistics over the trailing dims
``dims[axis:]`` of each row, then a per-element scale (and bias).

    LayerNormalization  y = (x - mean) / sqrt(var + epsilon) * Scale + B
                        (optional outputs Mean and InvStdDev, shaped dims[:axis] + [1, ...])
    RMSNormalization    y = x / sqrt(mean(x ** 2) + epsilon) * scale

Scale and B broadcast (numpy, right-aligned) to the normalised shape ``dims[axis:]``.  A
constant Scale / B is copied when the kernel is made and expanded to the normalised shape
once per shape; one fed at run time is read in place, or expanded by each thread into its
scratch when it must be broadcast.  The rows are split across the thread team.
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import ShapeCache, X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import LayerNormalizationParam, RMSNormalizationParam


def broadcast_strides(shape, target):
    """Element strides that read a contiguous array of ``shape`` broadcast to ``target``
    (right-aligned; 0 on broadcast dims), or None if it does not broadcast."""
    shape = tuple(shape)
    while len(shape) > len(target) and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > len(target):
        return None
    shape = (1,) * (len(target) - len(shape)) + shape
    strides, step = [0] * len(target), 1
    for i in range(len(target) - 1, -1, -1):
        if shape[i] == target[i]:
            strides[i] = step if shape[i] > 1 else 0
        elif shape[i] == 1:
            strides[i] = 0
        else:
            return None
        step *= shape[i]
    return tuple(strides)


class RowNormKernel(X86Kernel):
    """Runs both ops through the impl's row normalisation step."""

    def __init__(self, op_ctx, rms):
        super().__init__(op_ctx)
        self.rms = rms
        # Input index -> float32 copy of a constant Scale / B (the raw weights are dropped).
        self.weights = {}
        for index in (1, 2):
            value = op_ctx.constant(index)
            if value is not None:
                self.weights[index] = np.array(value, np.float32)
        self.packed_inputs = tuple(self.weights)
        self._expanded = ShapeCache()  # (index, normalised shape) -> expanded weights

    def _constant_weights(self, index, norm_shape):
        def expand():
            value = self.weights[index]
            while value.ndim > len(norm_shape):
                value = value[0]  # leading 1s (checked by shape inference)
            return np.ascontiguousarray(np.broadcast_to(value, norm_shape), np.float32)

        return self._expanded.get((index, norm_shape), expand)

    def make_step(self, io):
        if not self.has_work(io):
            return None
        dims = io.inputs[0].shape.dims
        axis = normalize_axis(self.param.axis, len(dims))
        norm_shape = tuple(dims[axis:])
        rows, n = math.prod(dims[:axis]), math.prod(norm_shape)
        if n == 0:
            raise self.op.unsupported(f"normalising over an empty shape {list(norm_shape)} "
                                      "(Mean/InvStdDev would be NaN)")
        keep = [io.inputs[0].array]
        addresses, strides = {}, {}
        for index in (1, 2):
            if index in self.weights:
                array = self._constant_weights(index, norm_shape)
                addresses[index] = array.__array_interface__["data"][0]
                strides[index] = None
                keep.append(array)
            elif index < len(io.inputs) and io.inputs[index] is not None:
                slot = io.inputs[index]
                keep.append(slot.array)
                addresses[index] = slot.address
                strides[index] = (None if slot.shape.element_count == n
                                  else broadcast_strides(slot.shape.dims, norm_shape))
        expand = None
        if any(s is not None for s in strides.values()):
            zero = (0,) * len(norm_shape)
            full = broadcast_strides(norm_shape, norm_shape)
            expand = (norm_shape, strides.get(1) or full,
                      (strides.get(2) or full) if 2 in addresses else zero)
        outs = list(io.outputs) + [None] * (3 - len(io.outputs))
        return self.impl("layernorm_fp32").make_row_norm_step(
            io.inputs[0].address, outs[0].address,
            outs[1].address if outs[1] is not None else 0,
            outs[2].address if outs[2] is not None else 0,
            addresses[1], addresses.get(2, 0), rows, n, 1, n, 1, float(self.param.epsilon),
            self.rms, io.num_threads, expand, keep)


class _RowNormOp(X86OptKernel):
    rms = False

    def infer_type(self, in_types):
        for index, data_type in enumerate(in_types):
            if data_type is not None and data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {index} is {data_type}; pplpy normalises "
                                       "float32 only")
        if self.param.stash_type != 1:
            raise self.unsupported(f"stash_type={self.param.stash_type}; pplpy computes the "
                                   "statistics in float32 (stash_type=1) only")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        x = tuple(in_shapes[0])
        if len(x) < 1:
            raise self.shape_error("X must have rank >= 1", in_shapes)
        try:
            axis = normalize_axis(self.param.axis, len(x))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        norm_shape = x[axis:]
        for index, name in ((1, "Scale"), (2, "B")):
            if index < len(in_shapes) and in_shapes[index] is not None:
                if broadcast_strides(in_shapes[index], norm_shape) is None:
                    raise self.shape_error(f"{name} must broadcast to X's normalised shape "
                                           f"{list(norm_shape)} (axis {self.param.axis})",
                                           in_shapes)
        stats = x[:axis] + (1,) * (len(x) - axis)
        return [x, stats, stats][:len(self.node.outputs)]

    def create_kernel(self):
        return RowNormKernel(self, self.rms)


@op("", "LayerNormalization", since=17, param=LayerNormalizationParam)
class LayerNormalizationOp(_RowNormOp):
    """y = (x - mean) / sqrt(var + epsilon) * Scale + B over dims[axis:]; NDARRAY."""


@op("", "RMSNormalization", since=23, param=RMSNormalizationParam)
class RMSNormalizationOp(_RowNormOp):
    """y = x / sqrt(mean(x ** 2) + epsilon) * scale over dims[axis:]; NDARRAY."""

    rms = True
