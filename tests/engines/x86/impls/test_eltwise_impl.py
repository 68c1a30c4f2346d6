"""The eltwise_fp32 impl family against numpy, for every ISA variant this CPU can run."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, variant_fixture
from pplpy.engines.x86.impls.dispatch import load_variant
from hypothesis import given, settings
from hypothesis import strategies as st

from pplpy.common.isa import supported_isas
from pplpy.engines.x86.impls.broadcast import broadcast_strides

FAMILY = "eltwise_fp32"


m = variant_fixture(FAMILY)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _x(n, seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 4
    if n > 3:
        x[:3] = [0.0, -0.0, np.nan]
    return x


# Sizes around the vector widths and the 65536-element parallel chunk.
SIZES = [0, 1, 7, 17, 1000, 65536 + 5, 200_003]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_relu_leaky_clip(m, n, num_threads):
    x = _x(n)
    y = np.empty_like(x)
    m.relu_fp32(x, y, num_threads)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    m.leaky_relu_fp32(x, y, 0.1, num_threads)
    np.testing.assert_array_equal(y, np.where(x >= 0, x, np.float32(0.1) * x))
    m.clip_fp32(x, y, -1.5, 2.0, num_threads)
    np.testing.assert_array_equal(y, np.clip(x, np.float32(-1.5), np.float32(2.0)))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_sigmoid(m, n, num_threads):
    x = _x(n) * 8
    y = np.empty_like(x)
    m.sigmoid_fp32(x, y, num_threads)
    want = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-37)


def test_sigmoid_extremes(m):
    x = np.array([-np.inf, -1000, -88, -80, -1e-8, 0, 1e-8, 20, 88, 1000, np.inf, np.nan],
                 np.float32)
    y = np.empty_like(x)
    m.sigmoid_fp32(x, y, 1)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-37)


def test_activations_in_place(m):
    x = _x(70_001)
    for call, want in [
        (lambda a: m.relu_fp32(a, a, 2), np.maximum(x, 0)),
        (lambda a: m.leaky_relu_fp32(a, a, 0.2, 2), np.where(x >= 0, x, np.float32(0.2) * x)),
        (lambda a: m.clip_fp32(a, a, 0.0, 6.0, 2), np.clip(x, 0, 6)),
    ]:
        a = x.copy()
        call(a)
        np.testing.assert_array_equal(a, want)
    a = x.copy()
    m.sigmoid_fp32(a, a, 2)
    np.testing.assert_allclose(a, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


def test_size_mismatch_is_an_error(m):
    with pytest.raises(ValueError, match="elements"):
        m.relu_fp32(np.zeros(4, np.float32), np.zeros(5, np.float32), 1)


# ---------------------------------------------------------------------------------------
# Broadcasting binary ops.

NUMPY_OPS = {"ADD": np.add, "MUL": np.multiply, "SUB": np.subtract}


def _reference(opname, a, b):
    if opname != "DIV":
        return NUMPY_OPS[opname](a, b)
    if a.dtype.kind == "f":
        return a / b
    # ONNX Div truncates integers toward zero; onnx.reference gives 0 for x / 0.
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(divide="ignore", over="ignore"):
        q = np.floor_divide(a, b)
        adjust = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
    return (q + adjust).astype(a.dtype)


def _values(rng, shape, dtype):
    if dtype == np.float32:
        return rng.standard_normal(shape).astype(np.float32)
    v = rng.integers(-50, 50, shape).astype(dtype)
    return v


def _run_binary(m, opname, a, b, num_threads=1):
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    y = np.empty(out_shape, a.dtype)
    m.binary(getattr(m, opname), a.ravel(), b.ravel(), y.ravel(),
             np.array(out_shape, np.int64), broadcast_strides(a.shape, out_shape),
             broadcast_strides(b.shape, out_shape), num_threads)
    return y


SHAPE_PAIRS = [
    ((5, 7), (5, 7)),              # same shape
    ((3, 4, 5), ()),               # b scalar
    ((), (6,)),                    # a scalar
    ((2, 3, 33), (33,)),           # inner dim contiguous in both
    ((2, 33, 1), (2, 1, 9)),       # outer product
    ((4, 1, 6), (1, 5, 1)),        # strided inner for b
    ((1, 17, 1, 1), (3, 17, 8, 8)),  # per-channel bias
    ((2, 1, 3, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2, 1, 2)),  # 8 dims
    ((0, 3), (1, 3)),              # empty
    ((300, 300), (300, 1)),        # larger than one parallel chunk
    ((1, 70000), (1,)),            # one long row, split in chunks
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("opname", ["ADD", "MUL", "SUB", "DIV"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_broadcast(m, dtype, opname, shapes):
    rng = np.random.default_rng(1)
    a, b = (_values(rng, s, dtype) for s in shapes)
    for nt in (1, 2):
        y = _run_binary(m, opname, a, b, nt)
        if dtype == np.float32:
            np.testing.assert_allclose(y, _reference(opname, a, b), rtol=1e-6)
        else:
            np.testing.assert_array_equal(y, _reference(opname, a, b))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=0, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.sampled_from(["ADD", "MUL", "SUB", "DIV"]),
)
def test_binary_random_broadcasts(shape, keep_a, keep_b, opname):
    m = load_variant(FAMILY, supported_isas()[0])
    a_shape = tuple(d if k else 1 for d, k in zip(shape, keep_a))
    b_shape = tuple(d if k else 1 for d, k in zip(shape, keep_b))[1:]  # b may have fewer dims
    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    np.testing.assert_allclose(_run_binary(m, opname, a, b), _reference(opname, a, b), rtol=1e-6)


def test_int_division_edge_cases(m):
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        a = np.array([7, -7, 7, -7, 5, info.min, info.min, 3], dtype)
        b = np.array([2, 2, -2, -2, 0, -1, 1, 7], dtype)
        y = _run_binary(m, "DIV", a, b)
        np.testing.assert_array_equal(y, np.array([3, -3, -3, 3, 0, info.min, info.min, 0],
                                                  dtype))


def test_binary_in_place(m):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 100_000)).astype(np.float32)
    b = rng.standard_normal((1, 100_000)).astype(np.float32)
    want = a * b
    flat = a.ravel()
    m.binary(m.MUL, flat, b.ravel(), flat, np.array(a.shape, np.int64),
             broadcast_strides(a.shape, a.shape), broadcast_strides(b.shape, a.shape), 2)
    np.testing.assert_array_equal(a, want)


def test_binary_bad_arguments(m):
    a = np.zeros(6, np.float32)
    shape = np.array([2, 3], np.int64)
    strides = np.array([3, 1], np.int64)
    with pytest.raises(ValueError, match="op 7"):
        m.binary(7, a, a, a, shape, strides, strides, 1)
    with pytest.raises(ValueError, match="reaches"):
        m.binary(m.ADD, a, a[:5], a, shape, strides, strides, 1)
    with pytest.raises(ValueError, match="needs 6"):
        m.binary(m.ADD, a, a, a[:4], shape, strides, strides, 1)


def test_broadcast_strides():
    np.testing.assert_array_equal(broadcast_strides((3, 1, 5), (2, 3, 4, 5)), [0, 5, 0, 1])
    np.testing.assert_array_equal(broadcast_strides((), (2, 3)), [0, 0])
    with pytest.raises(ValueError, match="broadcast"):
        broadcast_strides((3,), (4,))


# ---------------------------------------------------------------------------------------
# Per-channel op on N16CX.

def _to_n16cx(x):
    n, c = x.shape[:2]
    cb = -(-c // 16)
    xp = np.zeros((n, cb * 16) + x.shape[2:], np.float32)
    xp[:, :c] = x
    return np.ascontiguousarray(xp.reshape(n, cb, 16, -1).transpose(0, 1, 3, 2))


@pytest.mark.parametrize("shape", [(1, 3, 1, 1), (2, 17, 5, 7), (1, 32, 70, 70), (3, 40, 1, 1)],
                         ids=str)
@pytest.mark.parametrize("opname", ["ADD", "MUL", "SUB", "DIV"])
@pytest.mark.parametrize("vec_first", [False, True])
@pytest.mark.parametrize("num_threads", [1, 2])
def test_channel_binary_n16cx(m, shape, opname, vec_first, num_threads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32) + 3
    vec = rng.standard_normal(shape[1]).astype(np.float32) + 3
    xb = _to_n16cx(x)
    cb = xb.shape[1]
    vec_padded = np.zeros(cb * 16, np.float32)
    vec_padded[: shape[1]] = vec
    y = np.full_like(xb, np.nan)
    m.channel_binary_n16cx_fp32(getattr(m, opname), xb, vec_padded, y, num_threads, vec_first,
                                shape[1])
    v = vec.reshape(1, -1, 1, 1)
    want = _reference(opname, v, x) if vec_first else _reference(opname, x, v)
    np.testing.assert_allclose(y, _to_n16cx(want), rtol=1e-6)   # padding lanes are 0
    # In place.
    m.channel_binary_n16cx_fp32(getattr(m, opname), xb, vec_padded, xb, num_threads,
                                vec_first, shape[1])
    np.testing.assert_allclose(xb, _to_n16cx(want), rtol=1e-6)
