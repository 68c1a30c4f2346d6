# norm_fp32 for the avx512 tier: the body is _norm_fp32.pxi, vectors of 16 floats.
cdef extern from *:
    """
    #define PPL_VLEN 16
    """
include "_norm_fp32.pxi"
