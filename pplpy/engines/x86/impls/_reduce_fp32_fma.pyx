# Reduction kernels, fma build: the body is _reduce_fp32.pxi.
include "_reduce_fp32.pxi"
