# Reduction kernels, fma build: the body is _reduce_fp32.pxi, vectors of 8 floats
# (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 8
    """
include "_reduce_fp32.pxi"
