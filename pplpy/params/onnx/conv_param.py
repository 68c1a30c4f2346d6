"""Attributes of Conv (ONNX names and defaults; None means "derive from the input")."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConvParam:
    auto_pad: str = "NOTSET"
    dilations: tuple | None = None
    group: int = 1
    kernel_shape: tuple | None = None
    pads: tuple | None = None
    strides: tuple | None = None
