# GridSample, AffineGrid, Col2Im and DeformConv kernels, sse build: the body is _spatial_fp32.pxi.
include "_spatial_fp32.pxi"
