# Post-op codes; must match post_ops.py (a test checks).
cdef enum:
    POST_NONE = 0
    POST_RELU = 1
    POST_LEAKY_RELU = 2
    POST_CLIP = 3
    POST_SIGMOID = 4
