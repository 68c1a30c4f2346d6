"""Attributes of Constant, ConstantOfShape and Dropout."""

from dataclasses import dataclass

from pplpy.params.onnx.tensor_value import TensorValue


@dataclass(frozen=True, slots=True)
class ConstantParam:
    """Whichever of Constant's value attributes was given, as one tensor."""

    value: TensorValue


@dataclass(frozen=True, slots=True)
class ConstantOfShapeParam:
    value: TensorValue | None = None  # None: a float32 zero


@dataclass(frozen=True, slots=True)
class DropoutParam:
    """``ratio`` is an attribute before opset 12 and an input after; pplpy runs inference, where
    Dropout is the identity whatever the ratio."""

    ratio: float = 0.5
    seed: int | None = None
