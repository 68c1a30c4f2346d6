# Resize, RoiAlign and NonMaxSuppression kernels, sse build: the body is
# _resize_fp32.pxi, vectors of 4 floats (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 4
    """
include "_resize_fp32.pxi"
