"""Attributes of ConvTranspose, LpPool and MaxUnpool (ONNX names and defaults; None means
"derive from the input")."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConvTransposeParam:
    auto_pad: str = "NOTSET"
    dilations: tuple | None = None
    group: int = 1
    kernel_shape: tuple | None = None
    output_padding: tuple | None = None
    output_shape: tuple | None = None
    pads: tuple | None = None
    strides: tuple | None = None


@dataclass(frozen=True, slots=True)
class LpPoolParam:
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0           # from opset 18
    dilations: tuple | None = None   # from opset 18
    kernel_shape: tuple | None = None
    p: float = 2.0               # a float attribute in opset 1, an int from opset 2
    pads: tuple | None = None
    strides: tuple | None = None


@dataclass(frozen=True, slots=True)
class MaxUnpoolParam:
    kernel_shape: tuple | None = None
    pads: tuple | None = None
    strides: tuple | None = None
