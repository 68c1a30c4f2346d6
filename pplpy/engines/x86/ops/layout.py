"""Views that present a tensor to an impl in the few canonical shapes impls accept.

Impls see channel-wise work as (N, C, S) for NDARRAY and (N, C/16, S, 16) for N16CX, where
S is the product of the spatial dims; these helpers make those views without copying.
"""

import math


def spatial_size(shape):
    return math.prod(shape.dims[2:])


def as_ndarray_3d(array, shape):
    """(N, C, S) view of an NDARRAY tensor of rank >= 2."""
    n, c = shape.dims[0], shape.dims[1]
    return array.reshape(n, c, spatial_size(shape))


def as_blocked_3d(array, shape):
    """(N, C/16, S, 16) view of an N16CX tensor."""
    phys = shape.physical_dims
    return array.reshape(phys[0], phys[1], spatial_size(shape), phys[-1])


def as_flat(array):
    """1-D view of a contiguous array (element-wise kernels ignore the layout)."""
    return array.reshape(-1)
