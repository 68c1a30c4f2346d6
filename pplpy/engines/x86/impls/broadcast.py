"""Element strides that let a binary kernel read a C-contiguous input broadcast to a shape."""

import numpy as np


def broadcast_strides(shape, out_shape):
    """Element strides of a C-contiguous array of ``shape`` seen as ``out_shape`` (numpy
    broadcasting: shapes align on the right, size-1 and missing dims get stride 0)."""
    shape, out_shape = tuple(shape), tuple(out_shape)
    if len(shape) > len(out_shape):
        raise ValueError(f"cannot broadcast shape {list(shape)} to {list(out_shape)}: "
                         "it has more dims")
    strides = [0] * len(out_shape)
    step = 1
    for i in range(1, len(shape) + 1):
        dim, out_dim = shape[-i], out_shape[-i]
        if dim == out_dim and dim != 1:
            strides[-i] = step
        elif dim != 1:
            raise ValueError(f"cannot broadcast shape {list(shape)} to {list(out_shape)}: "
                             f"dim {dim} against {out_dim}")
        step *= dim
    return np.array(strides, np.int64)
