# chmap_fp32 for the avx512 tier: the body is _chmap_fp32.pxi.
include "_chmap_fp32.pxi"
