# LpPool and MaxUnpool, fma build: the body is _pool2_fp32.pxi.
include "_pool2_fp32.pxi"
