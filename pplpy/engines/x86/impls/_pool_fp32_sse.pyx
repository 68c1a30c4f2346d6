# Pooling kernels, sse build: the body is _pool_fp32.pxi, vectors of 4 floats (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 4
    """
include "_pool_fp32.pxi"
