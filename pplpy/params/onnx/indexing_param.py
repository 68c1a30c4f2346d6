"""Attributes of the ops that pick parts of a tensor or of its shape: Shape, Gather,
Compress, Squeeze and Slice."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShapeParam:
    """Opset 15+: output dims[start:end], Python-style (negative counts from the back, out of
    range clamps).  Before 15 there are no attributes and the whole shape is output."""

    start: int = 0
    end: int | None = None  # None: up to the rank


@dataclass(frozen=True, slots=True)
class GatherParam:
    axis: int = 0


@dataclass(frozen=True, slots=True)
class CompressParam:
    axis: int | None = None  # None: select from the flattened input


@dataclass(frozen=True, slots=True)
class SqueezeParam:
    """Before opset 13 ``axes`` is an attribute; from 13 it is the optional second input.
    None: every size-1 dim."""

    axes: tuple | None = None


@dataclass(frozen=True, slots=True)
class SliceParam:
    """Opset 1-9 only: starts/ends/axes attributes (10+ takes them, and steps, as inputs)."""

    starts: tuple | None = None
    ends: tuple | None = None
    axes: tuple | None = None
