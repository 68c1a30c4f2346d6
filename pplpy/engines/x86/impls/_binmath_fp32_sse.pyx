# binmath_fp32 for the sse tier: the body is _binmath_fp32.pxi.
include "_binmath_fp32.pxi"
