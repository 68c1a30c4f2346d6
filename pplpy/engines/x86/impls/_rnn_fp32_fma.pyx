include "_rnn_fp32.pxi"
