"""Attributes of Resize, Upsample, RoiAlign and NonMaxSuppression (ONNX names and defaults)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UpsampleParam:
    """Upsample-7: scales as an attribute (one per axis, required)."""

    mode: str = "nearest"
    scales: tuple | None = None


@dataclass(frozen=True, slots=True)
class Upsample9Param:
    """Upsample-9: scales became an input."""

    mode: str = "nearest"


@dataclass(frozen=True, slots=True)
class Resize10Param:
    """Resize-10: nearest or linear, asymmetric coordinates (as Upsample)."""

    mode: str = "nearest"


@dataclass(frozen=True, slots=True)
class ResizeParam:
    """Resize-11 to 17: coordinate transformation modes, cubic, roi."""

    coordinate_transformation_mode: str = "half_pixel"
    cubic_coeff_a: float = -0.75
    exclude_outside: int = 0
    extrapolation_value: float = 0.0
    mode: str = "nearest"
    nearest_mode: str = "round_prefer_floor"


@dataclass(frozen=True, slots=True)
class Resize18Param:
    """Resize-18 and later: antialias, axes, keep_aspect_ratio_policy."""

    antialias: int = 0
    axes: tuple | None = None
    coordinate_transformation_mode: str = "half_pixel"
    cubic_coeff_a: float = -0.75
    exclude_outside: int = 0
    extrapolation_value: float = 0.0
    keep_aspect_ratio_policy: str = "stretch"
    mode: str = "nearest"
    nearest_mode: str = "round_prefer_floor"


@dataclass(frozen=True, slots=True)
class RoiAlign10Param:
    """RoiAlign-10: sample points without the half-pixel shift (output_half_pixel)."""

    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class RoiAlignParam:
    """RoiAlign-16 and later: coordinate_transformation_mode (half_pixel by default)."""

    coordinate_transformation_mode: str = "half_pixel"
    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class NonMaxSuppressionParam:
    center_point_box: int = 0
