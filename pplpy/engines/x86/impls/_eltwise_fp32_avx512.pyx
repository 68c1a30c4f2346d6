include "_eltwise_fp32.pxi"
