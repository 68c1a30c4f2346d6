# Resize, RoiAlign and NonMaxSuppression kernels, avx512 build: the body is
# _resize_fp32.pxi, vectors of 16 floats (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 16
    """
include "_resize_fp32.pxi"
