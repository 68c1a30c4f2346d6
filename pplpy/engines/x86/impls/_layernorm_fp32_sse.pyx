include "_layernorm_fp32.pxi"
