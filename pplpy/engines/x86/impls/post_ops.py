"""Activation codes, shared by the eltwise kernels and every kernel that can fuse an
activation into its output (the brgemm epilogue of GEMM and convolution).

The codes are plain ints so that ``nogil`` code can switch on them; each one is a vector
function in ``_activation_fp32.h``.  ``p0`` / ``p1`` are the op's scalar parameters
(LeakyRelu's alpha; Clip's min and max).  Follows oneDNN's post-op list (reference/000),
limited for now to one eltwise op.
"""

import enum


class PostOp(enum.IntEnum):
    NONE = 0
    RELU = 1  # y = max(x, 0)
    LEAKY_RELU = 2  # y = x if x >= 0 else p0 * x
    CLIP = 3  # y = min(max(x, p0), p1)
    SIGMOID = 4  # y = 1 / (1 + exp(-x))
    TANH = 5  # y = tanh(x)
    HARD_SWISH = 6  # y = x * min(max(x / 6 + 1/2, 0), 1)
