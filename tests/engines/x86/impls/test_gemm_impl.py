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
from pplpy.runtime.step import run_steps

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
          (15, 33, 257), (100, 48, 64), (196, 256, 256), (3, 129, 513), (64, 1, 70),
          (250, 40, 1100)]  # two row blocks on avx512, each in two K chunks


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


# ---- the step API: run-time operands packed inside the step, and team sizes 1, 2, 3 ----


def addr(array):
    return array.__array_interface__["data"][0]


def run_threads(make, threads=(1, 2, 3)):
    """Outputs of the step that make(num_threads) -> (step, out) gives, per team size."""
    results = []
    for t in threads:
        step, out = make(t)
        run_steps([step], t)
        results.append(out.copy())
    return results


def test_gemm_step_items_for_the_team(gemm):
    """Few panels (64 columns) and one row block: a team of 16 gets its items from shorter
    row blocks (same bits: test_gemm_step_threads_bitwise); a matrix-vector product with a
    large B (the 512 x 1000 classifier, 1 MFLOP) is a parallel step."""
    def step(m, n, k, t):
        a = np.ones((m, k), np.float32)
        bb = gemm.gemm_pack_b(np.ones((k, n), np.float32), False)
        out = np.empty((m, n), np.float32)
        return gemm.make_gemm_step(addr(a), addr(bb), addr(out), m, k, n, t, keep=(a, bb, out))

    assert step(128, 64, 300, 16).work_items >= 16 > step(128, 64, 300, 1).work_items
    assert step(1, 1000, 512, 2).parallel and not step(1, 50, 512, 2).parallel


# (41, 33, 1100): an odd last row and two K chunks on every tier, the copied A (broadcast on
# sse) read at the second chunk's offset, transposed or not
@pytest.mark.parametrize("m,n,k", [(1, 1000, 300), (29, 70, 300), (3136 // 16, 64, 576 // 4),
                                   (5, 3, 0), (17, 33, 17), (41, 33, 1100)])
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True)])
def test_gemm_step_threads_bitwise(gemm, m, n, k, packed, trans_a, trans_b):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    bb = gemm.gemm_pack_b(b, trans_b) if packed else b

    def make(t):
        out = np.full((m, n), np.nan, np.float32)
        step = gemm.make_gemm_step(addr(a), addr(bb), addr(out), m, k, n, t, trans_a=trans_a,
                                   b_packed=packed, trans_b=trans_b, alpha=0.5, bias=bias,
                                   post_op=int(PostOp.RELU), keep=(a, bb, out))
        return step, out

    results = run_threads(make, (1, 2, 3, 16))
    am = (a.T if trans_a else a).astype(np.float64)
    bm = (b.T if trans_b else b).astype(np.float64)
    ref = np.maximum(0.5 * am @ bm + bias, 0)
    np.testing.assert_allclose(results[0], ref, rtol=1e-4, atol=1e-4 * (np.sqrt(k) + 1))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


@pytest.mark.parametrize("a_batch,b_batch", [((3,), (3,)), ((2, 1), (1, 3)), ((4,), (1,)),
                                             ((1,), (5,))])
@pytest.mark.parametrize("packed", [True, False])
def test_gemm_step_batched(gemm, a_batch, b_batch, packed):
    rng = np.random.default_rng(len(a_batch) + sum(b_batch))
    m, k, n = 19, 40, 37
    a = rng.standard_normal(a_batch + (m, k), dtype=np.float32)
    b = rng.standard_normal(b_batch + (k, n), dtype=np.float32)
    batch = np.broadcast_shapes(a_batch, b_batch)
    if packed:
        bb = np.stack([gemm.gemm_pack_b(e, False) for e in b.reshape(-1, k, n)])
        entry = bb[0].size
    else:
        bb, entry = b, k * n

    def offsets(dims, size):
        index = np.arange(int(np.prod(dims))).reshape(dims)
        return np.broadcast_to(index, batch).reshape(-1) * size

    def make(t):
        out = np.full(batch + (m, n), np.nan, np.float32)
        step = gemm.make_gemm_step(addr(a), addr(bb), addr(out), m, k, n, t,
                                   batch=int(np.prod(batch)), a_offsets=offsets(a_batch, m * k),
                                   b_offsets=offsets(b_batch, entry), b_packed=packed,
                                   keep=(a, bb, out))
        return step, out

    results = run_threads(make, (1, 2))
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(results[0], ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(results[1], results[0])


@pytest.mark.parametrize("c_shape", [(23, 1), (1, 31), (31,), (), (23, 31)])
@pytest.mark.parametrize("post_op,p0,p1", [(PostOp.NONE, 0, 0), (PostOp.CLIP, -1, 1),
                                           (PostOp.SIGMOID, 0, 0)])
def test_gemm_step_run_time_c(gemm, c_shape, post_op, p0, p1):
    """C computed at run time, read through broadcast strides (or as the addend)."""
    rng = np.random.default_rng(len(c_shape))
    m, n, k = 23, 31, 45
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.ascontiguousarray(rng.standard_normal(c_shape, dtype=np.float32))
    pb = gemm.gemm_pack_b(b, False)
    out = np.full((m, n), np.nan, np.float32)
    if c_shape == (m, n):
        extra = {"addend": addr(c)}
    else:
        s0, s1 = (s // 4 for s in np.broadcast_to(c, (m, n)).strides)
        extra = {"c": addr(c), "c_s0": s0, "c_s1": s1}
    step = gemm.make_gemm_step(addr(a), addr(pb), addr(out), m, k, n, 2, alpha=1.5, beta=-0.5,
                               post_op=int(post_op), p0=p0, p1=p1, keep=(a, pb, out, c),
                               **extra)
    run_steps([step], 2)
    ref = post_op_reference(1.5 * a.astype(np.float64) @ b - 0.5 * c, post_op, p0, p1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_gemm_step_rejects_bad_arguments(gemm):
    with pytest.raises(ValueError, match="m, n, batch >= 1"):
        gemm.make_gemm_step(0, 0, 0, 0, 4, 4, 1)
    with pytest.raises(ValueError, match="a_offsets"):
        gemm.make_gemm_step(1, 1, 1, 2, 4, 4, 1, batch=2, a_offsets=[0])
    with pytest.raises(ValueError, match="post_op"):
        gemm.make_gemm_step(1, 1, 1, 2, 4, 4, 1, post_op=99)
