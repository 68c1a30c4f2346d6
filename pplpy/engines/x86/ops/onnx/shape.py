"""Op contexts of the shape-manipulating ops: Reshape, Flatten, Transpose, Unsqueeze,
Identity and Dropout.  All take any element type and run in NDARRAY.

Reshape's shape and Unsqueeze-13's axes are inputs whose values decide the output shape
(``value_inputs``): inference sees the values of constants and, at run time, of fed model
inputs; a shape computed by another node at run time (a Shape -> Gather -> Concat chain
that folding could not fold) is reported as unsupported.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.canned import ANY_TYPE, same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.models.onnx.parsers.encodings import parse_dropout
from pplpy.params.onnx import DropoutParam, FlattenParam, ReshapeParam, TransposeParam, UnsqueezeParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import (
    flatten_shape,
    reshape_shape,
    transpose_shape,
    unsqueeze_shape,
)
from pplpy.oputils.onnx.shape_functions import transpose_shape


class DataMovementKernel(X86Kernel):
    """Base of the numpy data-movement kernels; tolerates omitted optional outputs ("")."""

    def can_do_execute(self, ctx):
        return any(s is not None and s.element_count > 0 for s in ctx.output_shapes)


class CopyKernel(DataMovementKernel):
    """y = x with new dims: Reshape, Flatten, Unsqueeze, Identity (row-major order kept)."""

    def do_execute(self, ctx):
        y = ctx.outputs[0]
        np.copyto(y, ctx.inputs[0].reshape(y.shape))


class TransposeKernel(DataMovementKernel):
    """y = x.transpose(perm); perm None reverses the axes."""

    def do_execute(self, ctx):
        _, perm = transpose_shape(ctx.input_shapes[0].dims, self.param.perm)
        np.copyto(ctx.outputs[0], ctx.inputs[0].transpose(perm))


class DropoutKernel(DataMovementKernel):
    """Inference Dropout: y = x; the optional mask is all ones (nothing is dropped)."""

    def do_execute(self, ctx):
        outputs = ctx.outputs
        if outputs[0] is not None:
            np.copyto(outputs[0], ctx.inputs[0])
        if len(outputs) > 1 and outputs[1] is not None:
            outputs[1].fill(1)  # True for bool (opset 10+), one of type T before


def check_int64_input(op, in_types, index, what):
    """Raise a ShapeError unless input ``index`` (if present) is int64."""
    if op.input_present(index) and in_types[index] is not DataType.INT64:
        raise ShapeError(f"{op.node.describe()}: input {index} ({what}) must be int64, "
                         f"got {in_types[index]}")


def constant_vector(op, in_shapes, in_values, index, what):
    """The constant 1-D int64 value of input ``index`` as a list of ints."""
    value = in_values[index] if index < len(in_values) else None
    if value is None:
        raise op.value_required(index, what)
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
            axes = constant_vector(self, in_shapes, in_values, 1, "axes")
        else:
            axes = getattr(self.param, "axes", None)
            if axes is None:
                raise self.shape_error('attribute "axes" is required before opset 13',
                                       in_shapes)
        return [self.infer_shape_checked(in_shapes, unsqueeze_shape, in_shapes[0], axes)]


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
