# Reduction kernels, sse build: the body is _reduce_fp32.pxi, vectors of 4 floats
# (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 4
    """
include "_reduce_fp32.pxi"
