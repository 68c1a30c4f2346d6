"""Attributes of the reductions, ArgMax/ArgMin, CumSum and CumProd (ONNX names and defaults)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReduceParam:
    """Reduce* while axes is an attribute (ReduceSum before 13, the others before 18)."""

    axes: tuple | None = None
    keepdims: int = 1


@dataclass(frozen=True, slots=True)
class ReduceAxesInputParam:
    """Reduce* once axes became an optional input (ReduceSum 13, the others 18)."""

    keepdims: int = 1
    noop_with_empty_axes: int = 0


@dataclass(frozen=True, slots=True)
class ArgReduceParam:
    """ArgMax / ArgMin (select_last_index from opset 12)."""

    axis: int = 0
    keepdims: int = 1
    select_last_index: int = 0


@dataclass(frozen=True, slots=True)
class CumSumParam:
    """CumSum, and CumProd, which takes the same attributes."""

    exclusive: int = 0
    reverse: int = 0
