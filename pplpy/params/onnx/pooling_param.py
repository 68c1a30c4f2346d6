"""Attributes of MaxPool and AveragePool (ONNX names and defaults)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MaxPoolParam:
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    dilations: tuple | None = None
    kernel_shape: tuple | None = None
    pads: tuple | None = None
    storage_order: int = 0
    strides: tuple | None = None


@dataclass(frozen=True, slots=True)
class AveragePoolParam:
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    count_include_pad: int = 0
    dilations: tuple | None = None
    kernel_shape: tuple | None = None
    pads: tuple | None = None
    strides: tuple | None = None
