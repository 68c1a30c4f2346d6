"""Params of the x86 engine's own nodes (not ONNX ops)."""

from dataclasses import dataclass

from pplpy.common.data_format import DataFormat


@dataclass(frozen=True, slots=True)
class ReorderParam:
    """Convert a tensor from ``src`` to ``dst`` layout (NDARRAY <-> N16CX)."""

    src: DataFormat
    dst: DataFormat


@dataclass(frozen=True, slots=True)
class ChannelShuffleParam:
    """ShuffleNet's channel shuffle: channels as (group, C / group), transposed."""

    group: int
