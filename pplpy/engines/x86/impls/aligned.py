"""Arrays whose data starts on a 64-byte cache line: the kernels' packed weights and scratch.

numpy aligns an array's data to 16 bytes only: a large array comes from mmap, a page start
plus the allocator's 16-byte header, so a packed conv weight began 48 bytes into a cache line
and every 64-byte AVX-512 load of a weight panel straddled two lines.  An Intel core serves
such a split load with two cache accesses, and the microkernel issues one or two panel loads
per k step between its FMAs.  On a Zen 4 core, which splits a 512-bit load into 256-bit
halves anyway, a C replica of the GEMM loop measured no difference (session 8).  The panels, the per-thread scratch and the arena
(runtime/memory_planner.py) all start on a line."""

import numpy

CACHE_LINE = 64


def aligned_empty(shape, dtype, zero=False):
    """An uninitialised (zeroed with ``zero``) C-contiguous array of ``shape`` whose data
    starts on a 64-byte boundary (an empty one has no data to place): a view into a slightly
    larger buffer, which it keeps alive."""
    dtype = numpy.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, numpy.integer)) else tuple(shape)
    nbytes = int(numpy.prod(shape, dtype=numpy.int64)) * dtype.itemsize
    raw = (numpy.zeros if zero else numpy.empty)(nbytes + CACHE_LINE, numpy.uint8)
    start = -raw.ctypes.data % CACHE_LINE
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape, dtype):
    """aligned_empty, zeroed."""
    return aligned_empty(shape, dtype, zero=True)


def aligned_copy(array, dtype=None):
    """A 64-byte-aligned C-contiguous copy of ``array`` (as ``dtype`` if given)."""
    array = numpy.asarray(array)
    out = aligned_empty(array.shape, dtype or array.dtype)
    out[...] = array
    return out
