"""Packed weights and scratch start on a 64-byte cache line (impls/aligned.py): a panel that
did not would straddle two lines at every vector load."""

import numpy as np
import pytest
from impl_variants import variant_fixture

from pplpy.engines.x86.impls.aligned import aligned_copy, aligned_empty, aligned_zeros

conv = variant_fixture("conv_fp32")
gemm = variant_fixture("gemm_fp32")
wino = variant_fixture("winograd_fp32")
deconv = variant_fixture("deconv_fp32")


def on_a_line(array):
    """The data starts on a 64-byte line (an empty array has none to place)."""
    return array.size == 0 or array.ctypes.data % 64 == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
@pytest.mark.parametrize("shape", [0, 1, 7, (3, 5), (100, 33), 1 << 20])
def test_aligned_arrays(dtype, shape):
    for _ in range(4):  # numpy's own placement varies from one allocation to the next
        empty, zeros = aligned_empty(shape, dtype), aligned_zeros(shape, dtype)
        assert on_a_line(empty) and on_a_line(zeros)
        assert empty.shape == zeros.shape == np.empty(shape).shape
        assert empty.dtype == zeros.dtype == np.dtype(dtype)
        assert empty.flags.c_contiguous and empty.flags.writeable
        assert not zeros.any()
    src = np.arange(np.prod(shape), dtype=np.float64).reshape(np.empty(shape).shape)
    copy = aligned_copy(src[::-1], dtype)
    assert on_a_line(copy) and copy.flags.c_contiguous and copy.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(copy, src[::-1].astype(dtype))


def test_packed_weights_start_on_a_line(conv, gemm, wino, deconv):
    rng = np.random.default_rng(0)
    for oc, ic, k, group in [(64, 64, 3, 1), (37, 5, 1, 1), (32, 1, 3, 32), (48, 16, 7, 2)]:
        w = rng.standard_normal((oc, ic, k, k), dtype=np.float32)
        assert on_a_line(conv.conv_pack_weight(w, group)["data"])
    for k, n in [(512, 512), (3, 17), (1000, 1)]:
        assert on_a_line(gemm.gemm_pack_b(rng.standard_normal((k, n), dtype=np.float32),
                                          False))
    assert on_a_line(wino.winograd_pack_weight(
        rng.standard_normal((40, 24, 3, 3), dtype=np.float32))["data"])
    assert on_a_line(deconv.deconv_pack_weight(
        rng.standard_normal((8, 12, 3, 3), dtype=np.float32), 1))
