# Pooling kernels, avx512 build: the body is _pool_fp32.pxi.
include "_pool_fp32.pxi"
