include "_reorder_fp32.pxi"
