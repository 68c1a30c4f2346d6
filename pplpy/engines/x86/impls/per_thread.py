"""Per-thread slices of one buffer, each on cache lines of its own.

A parallel step allocates its threads' working memory once, at build time: batch pointer
lists, packed weight panels, copied rows of A.  Thread t writes only slice t, but two slices
that share a 64-byte line still make the two cores hand that line back and forth on every
write (false sharing).  A convolution's pointer list is rewritten after every register tile,
and for a 1x1 convolution with 16 input channels it is two pointers: 16 bytes, so thread 0's
and thread 1's lists sat in the same line.  Every slice here starts on a line boundary and
is a whole number of lines long."""

import numpy

from pplpy.engines.x86.impls.aligned import CACHE_LINE, aligned_zeros


def per_thread_buffer(num_threads, count, dtype):
    """(buffer, stride): a zeroed array of ``num_threads`` slices, slice t at
    ``buffer[t * stride:]``, each at least ``count`` items, starting on a 64-byte boundary
    and a whole number of 64-byte lines long."""
    itemsize = numpy.dtype(dtype).itemsize
    if CACHE_LINE % itemsize:
        raise ValueError(f"per_thread_buffer: item size {itemsize} does not divide a "
                         f"{CACHE_LINE}-byte cache line")
    per_line = CACHE_LINE // itemsize
    stride = -(-max(int(count), 1) // per_line) * per_line
    size = max(int(num_threads), 1) * stride
    return aligned_zeros(size, dtype), stride
