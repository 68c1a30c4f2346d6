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


@dataclass(frozen=True, slots=True)
class FusedParam:
    """A pplpy-domain twin of a standard op, as a saved optimised model writes it
    (ops/pplpy/standard_twins.py): ``op`` is the standard op's own param (None for an op
    without attributes) and ``post_ops`` the post-ops fused into its epilogue, in the form
    op contexts hold them (``op.post_ops``)."""

    op: object
    post_ops: tuple = ()


@dataclass(frozen=True, slots=True)
class AddLayerNormalizationParam:
    """LayerNormalization over the last axis of a residual sum A + B (recognize_add_layer_norm)."""

    epsilon: float = 1e-5
