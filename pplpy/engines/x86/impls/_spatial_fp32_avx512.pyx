# GridSample, AffineGrid, Col2Im and DeformConv kernels, avx512 build: the body is _spatial_fp32.pxi.
include "_spatial_fp32.pxi"
