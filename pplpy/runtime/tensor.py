"""Tensor: the public description of a runtime's input or output."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    """Name, element type and dims of a model input or output.  A dim is an int, or a str
    (or None) where the model leaves it free."""

    name: str
    data_type: object  # DataType
    dims: tuple | None

    @property
    def dtype(self):
        """The numpy dtype a feed must have."""
        return self.data_type.numpy
