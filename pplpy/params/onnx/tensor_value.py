"""TensorValue: a constant tensor stored inside a param, comparable and hashable."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class TensorValue:
    """Wraps a numpy array so that params holding tensors (Constant, ConstantOfShape) stay
    frozen, comparable with ``==`` (for CSE) and hashable."""

    array: np.ndarray

    def __eq__(self, other):
        if not isinstance(other, TensorValue):
            return NotImplemented
        a, b = self.array, other.array
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def __hash__(self):
        return hash((str(self.array.dtype), self.array.shape, self.array.tobytes()))

    def __repr__(self):
        return f"TensorValue({self.array.dtype}{list(self.array.shape)})"
