"""Attributes of the loss ops, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, which
share them (ONNX names and defaults)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LossParam:
    ignore_index: int | None = None  # None: every target is a class
    reduction: str = "mean"          # "none", "sum" or "mean"
