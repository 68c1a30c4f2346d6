# Resize, RoiAlign and NonMaxSuppression kernels, sse build: the body is _resize_fp32.pxi.
include "_resize_fp32.pxi"
