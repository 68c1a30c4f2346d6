"""Activation codes, shared by the eltwise kernels and every kernel that can fuse an
activation into its output (the brgemm epilogue of GEMM and convolution).

The codes are plain ints so that ``nogil`` code can switch on them; each one is a vector
function in ``_activation_fp32.h``.  ``p0`` / ``p1`` are the op's scalar parameters
(LeakyRelu's alpha; Clip's min and max; Selu's alpha and gamma ...).  Follows oneDNN's post-op list (reference/000),
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
    ABS = 7  # y = |x|
    NEG = 8  # y = -x
    EXP = 9  # y = exp(x)
    LOG = 10  # y = log(x); -inf at 0: NDARRAY only
    SQRT = 11  # y = sqrt(x)
    RECIPROCAL = 12  # y = 1 / x; inf at 0: NDARRAY only
    FLOOR = 13  # y = floor(x)
    CEIL = 14  # y = ceil(x)
    ROUND = 15  # y = x rounded to nearest, ties to even
    SIGN = 16  # y = -1, 0 or 1 (NaN stays NaN)
    ERF = 17  # y = erf(x)
    SIN = 18  # y = sin(x)
    COS = 19  # y = cos(x)
    TAN = 20  # y = tan(x)
    ASIN = 21  # y = asin(x)
    ACOS = 22  # y = acos(x)
    ATAN = 23  # y = atan(x)
    SINH = 24  # y = sinh(x)
    COSH = 25  # y = cosh(x)
    ASINH = 26  # y = asinh(x)
    ACOSH = 27  # y = acosh(x); NaN at 0: NDARRAY only
    ATANH = 28  # y = atanh(x)
    HARD_SIGMOID = 29  # y = min(max(p0 * x + p1, 0), 1)
    SOFTPLUS = 30  # y = log(1 + exp(x))
    SOFTSIGN = 31  # y = x / (1 + |x|)
    ELU = 32  # y = x if x >= 0 else p0 * (exp(x) - 1)
    SELU = 33  # y = p1 * (x if x > 0 else p0 * (exp(x) - 1))
    CELU = 34  # y = max(x, 0) + min(0, p0 * (exp(x / p0) - 1))
    GELU = 35  # y = x * Phi(x); p0 = 1: Phi by the tanh approximation
    MISH = 36  # y = x * tanh(log(1 + exp(x)))
    THRESHOLDED_RELU = 37  # y = x if x > p0 else 0 (NaN: 0, as the spec says)
    SHRINK = 38  # y = x + p0 if x < -p1 else x - p0 if x > p1 else 0 (NaN: 0)
    SWISH = 39  # y = x * sigmoid(p0 * x)
