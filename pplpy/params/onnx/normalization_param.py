"""Attributes of BatchNormalization, LRN and Softmax."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchNormalizationParam:
    epsilon: float = 1e-5
    momentum: float = 0.9
    spatial: int = 1  # opset 7 only: 1 means per-channel statistics, the only kind later
    training_mode: int = 0  # opset 14+


@dataclass(frozen=True, slots=True)
class LRNParam:
    size: int  # required
    alpha: float = 0.0001
    beta: float = 0.75
    bias: float = 1.0


@dataclass(frozen=True, slots=True)
class SoftmaxParam:
    """``axis`` defaults to 1 before opset 13 (inputs coerced to 2-D there) and to -1 after."""

    axis: int = -1
