"""Post-op codes understood by every kernel that can fuse an activation into its output.

The codes are plain ints so that ``nogil`` Cython can switch on them.  ``p0`` / ``p1`` are
the op's scalar parameters (LeakyRelu's alpha; Clip's min and max).  Follows oneDNN's
post-op list (reference/000), limited for now to one eltwise op.
"""

import enum


class PostOp(enum.IntEnum):
    NONE = 0
    RELU = 1  # y = max(x, 0)
    LEAKY_RELU = 2  # y = x if x >= 0 else p0 * x
    CLIP = 3  # y = min(max(x, p0), p1)
    SIGMOID = 4  # y = 1 / (1 + exp(-x))
