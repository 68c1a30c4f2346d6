# Pooling kernels, sse build: the body is _pool_fp32.pxi.
include "_pool_fp32.pxi"
