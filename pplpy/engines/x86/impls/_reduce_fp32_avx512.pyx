# Reduction kernels, avx512 build: the body is _reduce_fp32.pxi, vectors of 16 floats
# (post-op chains).
cdef extern from *:
    """
    #define PPL_VLEN 16
    """
include "_reduce_fp32.pxi"
