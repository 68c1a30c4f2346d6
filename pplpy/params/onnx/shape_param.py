"""Attributes of the shape-manipulating ops."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConcatParam:
    axis: int  # required


@dataclass(frozen=True, slots=True)
class ReshapeParam:
    allowzero: int = 0  # opset 14+


@dataclass(frozen=True, slots=True)
class FlattenParam:
    axis: int = 1


@dataclass(frozen=True, slots=True)
class TransposeParam:
    perm: tuple | None = None  # None: reverse the axes


@dataclass(frozen=True, slots=True)
class UnsqueezeParam:
    """Before opset 13 ``axes`` is an attribute; from 13 it is the second input (None here)."""

    axes: tuple | None = None
