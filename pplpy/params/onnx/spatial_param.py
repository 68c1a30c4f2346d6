"""Attributes of the spatial sampling ops: GridSample, AffineGrid, Col2Im, CenterCropPad and
DeformConv (ONNX names and defaults; None means "derive from the inputs")."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GridSample16Param:
    """GridSample-16: 4-D only, modes named bilinear / nearest / bicubic."""

    align_corners: int = 0
    mode: str = "bilinear"
    padding_mode: str = "zeros"


@dataclass(frozen=True, slots=True)
class GridSampleParam:
    """GridSample-20 and later: N-D, modes named linear / nearest / cubic."""

    align_corners: int = 0
    mode: str = "linear"
    padding_mode: str = "zeros"


@dataclass(frozen=True, slots=True)
class AffineGridParam:
    align_corners: int = 0


@dataclass(frozen=True, slots=True)
class Col2ImParam:
    dilations: tuple | None = None
    pads: tuple | None = None
    strides: tuple | None = None


@dataclass(frozen=True, slots=True)
class CenterCropPadParam:
    axes: tuple | None = None


@dataclass(frozen=True, slots=True)
class DeformConvParam:
    dilations: tuple | None = None
    group: int = 1
    kernel_shape: tuple | None = None
    offset_group: int = 1
    pads: tuple | None = None
    strides: tuple | None = None
