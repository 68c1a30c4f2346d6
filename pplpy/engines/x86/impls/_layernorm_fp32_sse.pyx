# layernorm_fp32 for the sse tier: the body is _layernorm_fp32.pxi, vectors of 4 floats.
cdef extern from *:
    """
    #define PPL_VLEN 4
    """
include "_layernorm_fp32.pxi"
