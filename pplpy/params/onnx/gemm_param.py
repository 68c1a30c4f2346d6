"""Attributes of Gemm: Y = alpha * A' @ B' + beta * C."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GemmParam:
    alpha: float = 1.0
    beta: float = 1.0
    transA: int = 0
    transB: int = 0
