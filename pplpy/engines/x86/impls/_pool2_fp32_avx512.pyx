# LpPool and MaxUnpool, avx512 build: the body is _pool2_fp32.pxi.
include "_pool2_fp32.pxi"
