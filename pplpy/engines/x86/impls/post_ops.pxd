# Activation codes; must match post_ops.py and _activation_fp32.h (a test checks).
cdef enum:
    POST_NONE = 0
    POST_RELU = 1
    POST_LEAKY_RELU = 2
    POST_CLIP = 3
    POST_SIGMOID = 4
    POST_TANH = 5
    POST_HARD_SWISH = 6
