include "_attention_fp32.pxi"
