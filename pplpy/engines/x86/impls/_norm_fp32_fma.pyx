# norm_fp32 for the fma tier: the body is _norm_fp32.pxi, vectors of 8 floats.
cdef extern from *:
    """
    #define PPL_VLEN 8
    """
include "_norm_fp32.pxi"
