include "_norm_fp32.pxi"
