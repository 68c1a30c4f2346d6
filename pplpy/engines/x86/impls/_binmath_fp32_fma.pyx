# binmath_fp32 for the fma tier: the body is _binmath_fp32.pxi.
include "_binmath_fp32.pxi"
