"""Attributes of the row-wise normalisations: LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization,
LogSoftmax and Hardmax."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LayerNormalizationParam:
    axis: int = -1
    epsilon: float = 1e-5
    stash_type: int = 1  # 1 (float32) is the only statistics type pplpy computes in


@dataclass(frozen=True, slots=True)
class RMSNormalizationParam:
    axis: int = -1
    epsilon: float = 1e-5
    stash_type: int = 1


@dataclass(frozen=True, slots=True)
class InstanceNormalizationParam:
    epsilon: float = 1e-5


@dataclass(frozen=True, slots=True)
class GroupNormalizationParam:
    """Opset 18: scale and bias per group; from 21 per channel, and ``stash_type`` exists."""

    num_groups: int  # required
    epsilon: float = 1e-5
    stash_type: int = 1


@dataclass(frozen=True, slots=True)
class LpNormalizationParam:
    axis: int = -1
    p: int = 2


@dataclass(frozen=True, slots=True)
class MeanVarianceNormalizationParam:
    axes: tuple = (0, 2, 3)


@dataclass(frozen=True, slots=True)
class LogSoftmaxParam:
    """From opset 13: along the single axis ``axis``."""

    axis: int = -1


@dataclass(frozen=True, slots=True)
class HardmaxParam:
    """From opset 13: along the single axis ``axis``."""

    axis: int = -1


@dataclass(frozen=True, slots=True)
class CoercedAxisParam:
    """LogSoftmax and Hardmax before opset 13: the input is coerced to 2-D
    [prod(dims[:axis]), prod(dims[axis:])] and the op runs along its rows."""

    axis: int = 1
