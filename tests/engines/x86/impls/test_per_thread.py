"""per_thread_buffer: each thread's slice of a step's working memory starts on a cache line
of its own and is whole lines long, so two threads never write the same line."""

import numpy as np
import pytest

from pplpy.engines.x86.impls.per_thread import CACHE_LINE, per_thread_buffer


@pytest.mark.parametrize("dtype", [np.float32, np.uintp, np.int64])
@pytest.mark.parametrize("threads,count", [(1, 1), (2, 2), (3, 17), (16, 64), (4, 0)])
def test_slices_own_their_cache_lines(dtype, threads, count):
    buf, stride = per_thread_buffer(threads, count, dtype)
    itemsize = np.dtype(dtype).itemsize
    assert stride >= max(count, 1) and (stride * itemsize) % CACHE_LINE == 0
    assert buf.size == threads * stride and buf.dtype == dtype and not buf.any()
    for t in range(threads):
        assert buf[t * stride:].ctypes.data % CACHE_LINE == 0


def test_item_size_must_divide_a_line():
    with pytest.raises(ValueError, match="item size"):
        per_thread_buffer(2, 4, np.dtype("V24"))
