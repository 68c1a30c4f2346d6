"""Attributes of the parameterised activations."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeakyReluParam:
    alpha: float = 0.01


@dataclass(frozen=True, slots=True)
class ClipParam:
    """Clip before opset 11 takes min/max as attributes; from 11 on they are inputs and the
    param is empty (both None)."""

    min: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class HardSigmoidParam:
    alpha: float = 0.2
    beta: float = 0.5


@dataclass(frozen=True, slots=True)
class EluParam:
    alpha: float = 1.0


@dataclass(frozen=True, slots=True)
class SeluParam:
    alpha: float = 1.67326319217681884765625  # the schema's float32 defaults
    gamma: float = 1.05070102214813232421875


@dataclass(frozen=True, slots=True)
class CeluParam:
    alpha: float = 1.0


@dataclass(frozen=True, slots=True)
class ThresholdedReluParam:
    alpha: float = 1.0


@dataclass(frozen=True, slots=True)
class ShrinkParam:
    bias: float = 0.0
    lambd: float = 0.5


@dataclass(frozen=True, slots=True)
class GeluParam:
    approximate: str = "none"  # or "tanh"


@dataclass(frozen=True, slots=True)
class SwishParam:
    """Swish (opset 24) and SwiGLU (opset 28): y = x * sigmoid(alpha * x) (SwiGLU gates B
    with it)."""

    alpha: float = 1.0
