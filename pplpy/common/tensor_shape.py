"""TensorShape: logical dims plus the element type and memory layout that decide the
physical array a kernel sees."""

import math
from dataclasses import dataclass

from pplpy.common.data_format import N16CX_BLOCK, DataFormat
from pplpy.common.data_type import DataType


@dataclass(frozen=True)
class TensorShape:
    """A tensor's logical dims, element type and format.

    For N16CX the channel axis (1) is padded up to a multiple of 16 and moved innermost:
    ``physical_dims`` is (N, ceil(C/16), *spatial, 16).
    """

    dims: tuple
    data_type: DataType = DataType.FLOAT32
    data_format: DataFormat = DataFormat.NDARRAY

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        if self.data_format is DataFormat.N16CX and len(self.dims) < 2:
            raise ValueError(f"N16CX needs at least 2 dims (N, C, ...), got {list(self.dims)}")

    @property
    def rank(self):
        return len(self.dims)

    @property
    def element_count(self):
        """Number of logical elements."""
        return math.prod(self.dims)

    @property
    def padded_channels(self):
        """Channels including padding (C for NDARRAY)."""
        c = self.dims[1]
        if self.data_format is DataFormat.N16CX:
            return -(-c // N16CX_BLOCK) * N16CX_BLOCK
        return c

    @property
    def physical_dims(self):
        """Shape of the numpy array that holds the tensor in its format."""
        if self.data_format is DataFormat.N16CX:
            n, c, *spatial = self.dims
            return (n, -(-c // N16CX_BLOCK), *spatial, N16CX_BLOCK)
        return self.dims

    @property
    def bytes(self):
        """Bytes the tensor occupies, padding included."""
        return math.prod(self.physical_dims) * self.data_type.itemsize

    def with_format(self, data_format):
        return TensorShape(self.dims, self.data_type, data_format)

    def __str__(self):
        fmt = "" if self.data_format is DataFormat.NDARRAY else f" {self.data_format}"
        return f"{self.data_type} [{','.join(map(str, self.dims))}]{fmt}"
