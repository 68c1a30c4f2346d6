"""gemm_fp32 impls (brgemm microkernel over packed B panels) against numpy, every ISA."""

import pathlib
import re

import numpy as np
import pytest
from impl_variants import post_op_reference, variant_fixture

from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.engines.x86.impls.post_ops import PostOp

IMPLS = pathlib.Path(__file__).parents[4] / "pplpy/engines/x86/impls"


gemm = variant_fixture("gemm_fp32")


def check(gemm, rng, m, n, k, trans_b=False, alpha=1.0, beta=0.0, use_bias=False,
          use_addend=False, post_op=PostOp.NONE, p0=0.0, p1=0.0, threads=1, lda_pad=0):
    a_full = rng.standard_normal((m, k + lda_pad), dtype=np.float32)
    a = a_full[:, :k]  # a row stride larger than k
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32) if use_bias else None
    addend = rng.standard_normal((m, n), dtype=np.float32) if use_addend else None
    packed = gemm.gemm_pack_b(b, trans_b)
    out = np.full((m, n), np.nan, np.float32)
    gemm.gemm_fp32(a, packed, k, n, out, alpha, bias, addend, beta, int(post_op), p0, p1,
                   threads)
    bm = (b.T if trans_b else b).astype(np.float64)
    ref = alpha * (a.astype(np.float64) @ bm)
    if addend is not None:
        ref += beta * addend
    if bias is not None:
        ref += bias
    ref = post_op_reference(ref, post_op, p0, p1)
    scale = np.sqrt(k) * max(1.0, abs(alpha)) + 1
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)


SHAPES = [(1, 1, 1), (1, 1000, 2048), (2, 3, 5), (7, 17, 33), (13, 31, 1), (29, 64, 300),
          (15, 33, 257), (100, 48, 64), (196, 256, 256), (3, 129, 513), (64, 1, 70)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_shapes(gemm, m, n, k):
    check(gemm, np.random.default_rng(m * 1000 + n), m, n, k)


@pytest.mark.parametrize("m,n,k", [(5, 7, 9), (37, 50, 300)])
def test_gemm_trans_b_strided_a(gemm, m, n, k):
    check(gemm, np.random.default_rng(3), m, n, k, trans_b=True, lda_pad=5)


@pytest.mark.parametrize("post_op,p0,p1", [(PostOp.NONE, 0, 0), (PostOp.RELU, 0, 0),
                                           (PostOp.LEAKY_RELU, 0.2, 0), (PostOp.CLIP, -1, 2),
                                           (PostOp.SIGMOID, 0, 0)])
@pytest.mark.parametrize("m,n,k", [(1, 20, 9), (19, 37, 600)])
def test_gemm_epilogue(gemm, post_op, p0, p1, m, n, k):
    check(gemm, np.random.default_rng(int(post_op)), m, n, k, alpha=0.5, beta=-1.5,
          use_bias=True, use_addend=True, post_op=post_op, p0=p0, p1=p1)


@pytest.mark.parametrize("m,n,k", [(1, 1000, 512), (300, 70, 40), (8, 8, 8)])
def test_gemm_threads(gemm, m, n, k):
    check(gemm, np.random.default_rng(5), m, n, k, use_bias=True, threads=2)


def test_gemm_random_shapes(gemm):
    rng = np.random.default_rng(99)
    for _ in range(25):
        m, n, k = (int(v) for v in rng.integers(1, 80, size=3))
        check(gemm, rng, m, n, k, trans_b=bool(rng.integers(2)), alpha=float(rng.normal()),
              beta=float(rng.normal()), use_bias=bool(rng.integers(2)),
              use_addend=bool(rng.integers(2)), threads=int(rng.integers(1, 3)))


def test_gemm_empty_m(gemm):
    packed = gemm.gemm_pack_b(np.ones((4, 3), np.float32), False)
    out = np.empty((0, 3), np.float32)
    gemm.gemm_fp32(np.empty((0, 4), np.float32), packed, 4, 3, out, 1.0, None, None, 0.0, 0,
                   0.0, 0.0, 1)


def test_gemm_rejects_wrong_packing(gemm):
    packed = gemm.gemm_pack_b(np.ones((4, 3), np.float32), False)
    with pytest.raises(ValueError, match="packed_b"):
        gemm.gemm_fp32(np.ones((2, 5), np.float32), packed, 5, 3, np.empty((2, 3), np.float32),
                       1.0, None, None, 0.0, 0, 0.0, 0.0, 1)


def test_variants_export_same_names():
    names = {}
    for isa in ISA_NAMES:
        text = (IMPLS / f"_gemm_fp32_{isa}.pyx").read_text()
        body = re.findall(r'include "([^"]+)"', text)
        assert body == ["_gemm_fp32.pxi"], f"_gemm_fp32_{isa}.pyx must only include the body"
        names[isa] = re.findall(r"^def (\w+)", (IMPLS / body[0]).read_text(), re.M) + \
            re.findall(r"^def (\w+)", text, re.M)
    assert len({tuple(v) for v in names.values()}) == 1, names
    assert set(names["fma"]) == {"gemm_pack_b", "make_gemm_step", "gemm_fp32"}
    for isa in supported_isas():
        mod = load_variant("gemm_fp32", isa)
        assert all(hasattr(mod, name) for name in names[isa])


def test_header_post_op_codes_match_post_ops():
    text = (IMPLS / "_brgemm_fp32.h").read_text()
    codes = {name: int(value) for name, value in re.findall(r"PPL_POST_(\w+) = (\d+)", text)}
    assert codes == {op.name: int(op) for op in PostOp}
