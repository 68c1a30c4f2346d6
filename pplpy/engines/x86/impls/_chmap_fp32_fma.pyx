# chmap_fp32 for the fma tier: the body is _chmap_fp32.pxi.
include "_chmap_fp32.pxi"
