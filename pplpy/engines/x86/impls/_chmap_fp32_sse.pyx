# chmap_fp32 for the sse tier: the body is _chmap_fp32.pxi.
include "_chmap_fp32.pxi"
