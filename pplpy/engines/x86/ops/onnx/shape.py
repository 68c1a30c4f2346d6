"""Op contexts of the shape-manipulating ops: Reshape, Flatten, Transpose, Squeeze,
Unsqueeze, Identity and Dropout.  All take any element type and run in NDARRAY; their
kernels are compiled copy steps from the ``_copy`` impl module.

Reshape's shape and Squeeze/Unsqueeze-13's axes are inputs whose values decide the output
shape (``value_inputs``): inference sees the values of constants, of fed model inputs and of
values computed on the host when the plan is made (a Shape -> Gather -> Concat chain).
"""


import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.models.onnx.parsers.encodings import parse_dropout
from pplpy.oputils.onnx.shape_functions import (
    flatten_shape,
    reshape_shape,
    squeeze_shape,
    transpose_shape,
    unsqueeze_shape,
)
from pplpy.params.onnx import (
    DropoutParam,
    FlattenParam,
    ReshapeParam,
    SqueezeParam,
    TransposeParam,
    UnsqueezeParam,
)


def keep_arrays(io):
    """The numpy arrays a step reads and writes, for ``Step.keep``: a constant's contiguous
    copy made for the slot must live as long as the step that points into it."""
    return tuple(s.array for s in (*io.inputs, *io.outputs) if s is not None)


class DataMovementKernel(X86Kernel):
    """Base of the data-movement kernels; tolerates omitted optional outputs ("")."""

    def can_do_execute(self, ctx):
        return any(s is not None and s.element_count > 0 for s in ctx.output_shapes)


class CopyKernel(DataMovementKernel):
    """y = x with new dims: Reshape, Flatten, Squeeze, Unsqueeze, Identity (row-major order
    kept), a memcpy step split over threads when big, where the plan cannot place the output
    on the input's memory instead."""

    views_input = True

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        return _copy.make_copy_step(y.address, x.address, y.shape.bytes, keep_arrays(io))


class TransposeKernel(DataMovementKernel):
    """y = x.transpose(perm); perm None reverses the axes.  A strided copy step."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        _, perm = transpose_shape(x.shape.dims, self.param.perm if self.param else None)
        es = x.shape.data_type.itemsize
        dims, strides = _copy.transpose_strides(x.shape.dims, perm, es)
        step = _copy.make_strided_copy_step(y.address, x.address, es, dims, strides)
        step.keep = keep_arrays(io)
        return step


class DropoutKernel(DataMovementKernel):
    """Inference Dropout: y = x; the optional mask is all ones (nothing is dropped)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        steps = []
        y = io.outputs[0]
        if y is not None and y.shape.element_count:
            steps.append(_copy.make_copy_step(y.address, io.inputs[0].address, y.shape.bytes))
        mask = io.outputs[1] if len(io.outputs) > 1 else None
        if mask is not None and mask.shape.element_count:
            # True for bool (opset 10+), a one of type T before.
            one = np.ones((), mask.shape.data_type.numpy).tobytes()
            steps.append(_copy.make_fill_step(mask.address, mask.shape.element_count, one))
        step = steps[0] if len(steps) == 1 else _copy.make_group_step(steps)
        step.keep = (step.keep, keep_arrays(io))
        return step


def check_int64_input(op, in_types, index, what):
    """Raise a ShapeError unless input ``index`` (if present) is int64."""
    if op.input_present(index) and in_types[index] is not DataType.INT64:
        raise ShapeError(f"{op.node.describe()}: input {index} ({what}) must be int64, "
                         f"got {in_types[index]}")


def constant_vector(op, in_shapes, in_values, index, what, scalar_ok=False):
    """The constant 1-D int64 value of input ``index`` as a list of ints; with
    ``scalar_ok`` a rank-0 value is one element (Squeeze's and Unsqueeze's axes: ONNX
    Runtime takes a scalar there, and ONNX's own AffineGrid function passes one)."""
    value = in_values[index] if index < len(in_values) else None
    if value is None:
        raise op.value_required(index, what)
    if scalar_ok and value.ndim == 0:
        value = value.reshape(1)
    if value.ndim != 1:
        raise op.shape_error(f"input {index} ({what}) must be 1-D, got shape "
                             f"{list(value.shape)}", in_shapes)
    return [int(v) for v in value]


class ShapeOp(X86OptKernel):
    """Any element type, NDARRAY only; the output copies input 0's data in row-major order."""

    supported_types = ANY_TYPE

    def infer_shape_checked(self, in_shapes, rule, *args):
        try:
            return rule(*args)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def create_kernel(self):
        return CopyKernel(self)


@op("", "Reshape", since=5, param=ReshapeParam)  # shape became an input in 5
class ReshapeOp(ShapeOp):
    """y = x.reshape(shape): 0 copies the input dim (unless allowzero, opset 14+), -1 is
    inferred."""

    value_inputs = (1,)

    def infer_type(self, in_types):
        check_int64_input(self, in_types, 1, "shape")
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        target = constant_vector(self, in_shapes, in_values, 1, "a shape")
        allowzero = getattr(self.param, "allowzero", 0) if self.node.opset >= 14 else 0
        return [self.infer_shape_checked(in_shapes, reshape_shape, in_shapes[0], target,
                                         allowzero)]


@op("", "Flatten", since=1, param=FlattenParam)
class FlattenOp(ShapeOp):
    """y = x.reshape(prod(dims[:axis]), prod(dims[axis:]))."""

    def infer_shape(self, in_shapes, in_values):
        axis = self.param.axis if self.param is not None else 1
        return [self.infer_shape_checked(in_shapes, flatten_shape, in_shapes[0], axis)]


@op("", "Unsqueeze", since=1, param=UnsqueezeParam)  # axes attribute
@op("", "Unsqueeze", since=13)  # axes input
class UnsqueezeOp(ShapeOp):
    """y = x with size-1 dims inserted at ``axes`` (attribute before opset 13, input from 13)."""

    value_inputs = (1,)

    def infer_type(self, in_types):
        if self.node.opset >= 13:
            if not self.input_present(1):
                raise ShapeError(f"{self.node.describe()}: input 1 (axes) is required")
            check_int64_input(self, in_types, 1, "axes")
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        if self.node.opset >= 13:
            axes = constant_vector(self, in_shapes, in_values, 1, "axes", scalar_ok=True)
        else:
            axes = getattr(self.param, "axes", None)
            if axes is None:
                raise self.shape_error('attribute "axes" is required before opset 13',
                                       in_shapes)
        return [self.infer_shape_checked(in_shapes, unsqueeze_shape, in_shapes[0], axes)]


@op("", "Squeeze", since=1, param=SqueezeParam)  # axes attribute
@op("", "Squeeze", since=11, param=SqueezeParam)  # negative axes allowed
@op("", "Squeeze", since=13)  # axes became an optional input
class SqueezeOp(ShapeOp):
    """y = x without the size-1 dims at ``axes`` (every size-1 dim when absent)."""

    value_inputs = (1,)

    def infer_type(self, in_types):
        if self.node.opset >= 13:
            check_int64_input(self, in_types, 1, "axes")
        return super().infer_type(in_types)[:1]

    def infer_shape(self, in_shapes, in_values):
        if self.node.opset >= 13:
            axes = (constant_vector(self, in_shapes, in_values, 1, "axes", scalar_ok=True)
                    if self.input_present(1) else None)
        else:
            axes = getattr(self.param, "axes", None)
        return [self.infer_shape_checked(in_shapes, squeeze_shape, in_shapes[0], axes)]


@op("", "Identity", since=1)
class IdentityOp(ShapeOp):
    """y = x.  Usually removed by the remove_identity pass; kept when it joins a graph input
    to a graph output."""

    infer_shape = same_shape_as_input


@op("", "Transpose", since=1, param=TransposeParam)
class TransposeOp(ShapeOp):
    """y = x.transpose(perm); perm None reverses the axes."""

    def infer_shape(self, in_shapes, in_values):
        perm = self.param.perm if self.param is not None else None
        out, _ = self.infer_shape_checked(in_shapes, transpose_shape, in_shapes[0], perm)
        return [out]

    def create_kernel(self):
        return TransposeKernel(self)


@op("", "Dropout", since=7, param=DropoutParam, parse=parse_dropout)
@op("", "Dropout", since=12, param=DropoutParam, parse=parse_dropout)  # ratio became an input
class DropoutOp(ShapeOp):
    """Inference Dropout: y = x, mask all ones.  Training mode is not supported.

    The mask is bool from opset 10; before that ONNX types it like the input (ones of T).
    The ratio (attribute before 12, input 1 from 12) does not matter in inference.
    """

    def infer_type(self, in_types):
        if self.node.opset >= 12 and self.input_present(2):
            training = self.constant(2)
            if training is None or training.size != 1 or bool(training.reshape(-1)[0]):
                raise self.unsupported(
                    "training_mode must be absent or a constant false: pplpy runs inference "
                    "only"
                )
        (data_type,) = super().infer_type(in_types)[:1]
        mask_type = DataType.BOOL if self.node.opset >= 10 else data_type
        return [data_type, mask_type][: len(self.node.outputs)]

    def infer_shape(self, in_shapes, in_values):
        return [in_shapes[0]] * len(self.node.outputs)

    def create_kernel(self):
        return DropoutKernel(self)
