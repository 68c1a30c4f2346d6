"""Impl-level tests of the transformer families: the attention and rotary steps per ISA tier
against onnx's reference, the einsum, quantize and random steps against numpy; 1 and 2
threads."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, variant_fixture
from onnx.reference.ops.op_attention import _compute_attention
from onnx.reference.ops.op_rotary_embedding import rotary_embedding

from pplpy.engines.x86.impls import _einsum, _quantize, _random

attention = variant_fixture("attention_fp32")
_RNG = np.random.default_rng(3)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names("attention_fp32")


# Keys up to 256 (rounded up to a panel) are one score block, with shorter query blocks as
# they grow (T = 200: four blocks of 30 rows); T = 300 goes 128 keys at a time (online
# softmax over three blocks) in two query blocks of 35.
@pytest.mark.parametrize("dims", [(2, 4, 2, 5, 7, 8, 6), (1, 2, 2, 40, 130, 64, 64),
                                  (1, 1, 1, 1, 1, 3, 5), (1, 2, 1, 17, 65, 16, 16),
                                  (1, 1, 1, 120, 200, 64, 64), (1, 2, 1, 70, 300, 32, 40)])
@pytest.mark.parametrize("kind", ["plain", "causal", "softcap", "bool", "float", "short"])
@pytest.mark.parametrize("threads", [1, 2])
def test_attention_step(attention, dims, kind, threads):
    B, Hq, Hkv, Sq, T, D, Dv = dims
    q = _RNG.standard_normal((B, Hq, Sq, D)).astype(np.float32)
    k = _RNG.standard_normal((B, Hkv, T, D)).astype(np.float32)
    v = _RNG.standard_normal((B, Hkv, T, Dv)).astype(np.float32)
    mask = None
    if kind == "bool":
        mask = _RNG.random((B, Hq, Sq, T)) > 0.3
    elif kind == "float":
        mask = _RNG.standard_normal((B, Hq, Sq, T)).astype(np.float32)
    elif kind == "short":
        mask = np.broadcast_to(_RNG.random((1, 1, Sq, max(1, T - 2))) > 0.2,
                               (B, Hq, Sq, max(1, T - 2)))
    causal, softcap = kind == "causal", 1.5 if kind == "softcap" else 0
    want = _compute_attention(q, k, v, attn_mask=None if mask is None else np.array(mask),
                              is_causal=causal, softcap=softcap or None,
                              qk_matmul_output_mode=3)
    y, qk = attention.attention_fp32(q, k, v, mask=mask, causal=causal, softcap=softcap,
                                     qk_mode=3, num_threads=threads)
    np.testing.assert_allclose(y, want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(qk, want[3], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rdim", [0, 4])
def test_rotary_step(attention, interleaved, rdim):
    B, S, H, D = 2, 6, 3, 8
    R = rdim or D
    x = _RNG.standard_normal((B, S, H, D)).astype(np.float32)
    cos = _RNG.standard_normal((10, R // 2)).astype(np.float32)
    sin = _RNG.standard_normal((10, R // 2)).astype(np.float32)
    pos = _RNG.integers(0, 10, (B, S))
    want = rotary_embedding(x.transpose(0, 2, 1, 3), cos, sin, pos, interleaved=interleaved,
                            rotary_embedding_dim=rdim).transpose(0, 2, 1, 3)
    for threads in (1, 2):
        got = attention.rotary_fp32(x, cos, sin, pos, interleaved, rdim, threads)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_einsum_direct(dtype):
    a = (_RNG.standard_normal((3, 4, 5)) * 4).astype(dtype)
    b = (_RNG.standard_normal((5, 4)) * 4).astype(dtype)
    # y[i, k] = sum_j,l a[i, j, l] * b[l, j]: labels (i) then (j, l); strides in elements.
    got = _einsum.einsum_direct([a, b], [3], [4, 5], [[20, 5, 1], [0, 1, 4]], num_threads=2)
    np.testing.assert_allclose(got, np.einsum("ijl,lj->i", a, b), rtol=1e-6)


@pytest.mark.parametrize("qtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_quantize_round_trip(qtype):
    x = (_RNG.standard_normal((4, 3, 50)) * 300).astype(np.float32)
    x.flat[:4] = [np.inf, -np.inf, 0.5, 1.5]
    scale = np.array([0.5, 1.0, 3.0], np.float32)
    zp = np.array([1, 2, 3], qtype)
    info = np.iinfo(qtype)
    want = np.clip(np.rint(np.clip(x / scale[:, None], -1e7, 1e7)) + zp[:, None].astype(
        np.float32), info.min, info.max).astype(qtype)
    q = _quantize.quantize_fp32(x, scale, zp, qtype, axis=1, num_threads=2)
    np.testing.assert_array_equal(q, want)
    y = _quantize.dequantize_fp32(q, scale, zp, axis=1, num_threads=2)
    np.testing.assert_array_equal(y, (q.astype(np.float32) - zp[:, None]) * scale[:, None])


def test_random_is_independent_of_threads():
    a = _random.random_fill("normal", (300, 300), np.float32, 11, 0, 1, num_threads=1)
    b = _random.random_fill("normal", (300, 300), np.float32, 11, 0, 1, num_threads=2)
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean()) < 0.01 and abs(a.std() - 1) < 0.01
