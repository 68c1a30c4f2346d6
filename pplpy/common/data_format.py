"""Memory layouts of a tensor.

NDARRAY is plain row-major (NCHW for 4-D).  N16CX blocks the channel axis (axis 1) by 16
and pads it to a multiple of 16, so one 16-float block of channels of one pixel fills an
AVX-512 register: logical (N, C, *S) is stored as (N, ceil(C/16), *S, 16).
"""

import enum

N16CX_BLOCK = 16


class DataFormat(enum.Enum):
    NDARRAY = "ndarray"
    N16CX = "n16cx"

    def __str__(self):
        return self.value
