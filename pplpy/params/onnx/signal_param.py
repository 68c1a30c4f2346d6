"""Attributes of the signal-processing ops (DFT, STFT, the window generators,
MelWeightMatrix) and of BitCast.  Field names and defaults are the ONNX ones."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DFT17Param:
    """DFT-17 takes ``axis`` as an attribute; from opset 20 it is an input (DFTParam)."""

    axis: int = 1
    inverse: int = 0
    onesided: int = 0


@dataclass(frozen=True, slots=True)
class DFTParam:
    inverse: int = 0
    onesided: int = 0


@dataclass(frozen=True, slots=True)
class STFTParam:
    onesided: int = 1


@dataclass(frozen=True, slots=True)
class WindowParam:
    """HannWindow, HammingWindow, BlackmanWindow; output_datatype is a TensorProto number."""

    output_datatype: int = 1
    periodic: int = 1


@dataclass(frozen=True, slots=True)
class MelWeightMatrixParam:
    output_datatype: int = 1


@dataclass(frozen=True, slots=True)
class BitCastParam:
    to: int | None = None  # a TensorProto number; required by the spec
