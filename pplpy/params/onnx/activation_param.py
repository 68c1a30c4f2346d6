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
