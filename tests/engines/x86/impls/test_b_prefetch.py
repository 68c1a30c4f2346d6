"""The brgemm tiles' B prefetch (_brgemm_fp32.h): which ops get it, PPLPY_B_PREFETCH_BLOCKS,
and that it never changes a result (every distance gives the same bits, on every ISA cap)."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from pplpy.engines.x86.impls.b_prefetch import DEFAULT_BLOCKS, MIN_BYTES, b_prefetch_blocks
from pplpy.errors import PplError

RNG = np.random.default_rng(5)


def test_distance_only_for_weights_of_a_megabyte_or_more(monkeypatch):
    monkeypatch.delenv("PPLPY_B_PREFETCH_BLOCKS", raising=False)
    assert MIN_BYTES == 1 << 20 and DEFAULT_BLOCKS == 4
    assert b_prefetch_blocks(MIN_BYTES - 4) == 0
    assert b_prefetch_blocks(MIN_BYTES) == 4
    monkeypatch.setenv("PPLPY_B_PREFETCH_BLOCKS", "8")
    assert b_prefetch_blocks(MIN_BYTES) == 8
    assert b_prefetch_blocks(MIN_BYTES - 4) == 0
    monkeypatch.setenv("PPLPY_B_PREFETCH_BLOCKS", "0")
    assert b_prefetch_blocks(64 * MIN_BYTES) == 0


@pytest.mark.parametrize("value", ["x", "-1", "65", "1.5"])
def test_bad_distance_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("PPLPY_B_PREFETCH_BLOCKS", value)
    with pytest.raises(PplError, match="PPLPY_B_PREFETCH_BLOCKS.*0..64"):
        b_prefetch_blocks(MIN_BYTES)


def test_a_bad_distance_fails_the_load_not_the_process(tmp_path, monkeypatch):
    model, _ = big_weight_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    monkeypatch.setenv("PPLPY_B_PREFETCH_BLOCKS", "many")
    with pytest.raises(PplError, match="PPLPY_B_PREFETCH_BLOCKS"):
        pplpy.load(path).run({"x": np.zeros((1, 256, 14, 14), np.float32)})


def big_weight_model():
    """Ops whose weights pass the threshold, one per kind of step that prefetches: a
    256 -> 256 3x3 conv at 14x14 (2.4 MB; Winograd), a 1x1 conv 256 -> 1024 (1 MB; direct,
    a GEMM over pixels), a 3x3 stride-2 conv (direct taps), and a MatMul by a constant
    1024 x 512 (2 MB; the GEMM step)."""
    def w(*shape):
        return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["b"]),
        helper.make_node("Conv", ["r", "w3"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["bt", "w4"], ["y"]),
    ]
    inits = [("w1", w(256, 256, 3, 3)), ("w2", w(1024, 256, 1, 1)),
             ("w3", w(256, 256, 3, 3)), ("w4", w(1024, 512))]
    model = make_model(nodes, [("x", FLOAT, [1, 256, 14, 14])],
                       [("y", FLOAT, None), ("c", FLOAT, None)], inits)
    return model, {"x": RNG.standard_normal((1, 256, 14, 14)).astype(np.float32)}


@pytest.mark.parametrize("isa", ISAS)
def test_every_distance_gives_the_same_bits(tmp_path, monkeypatch, isa):
    model, feeds = big_weight_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    want = ReferenceEvaluator(model).run(None, feeds)
    outs = {}
    for blocks in ("0", "4", "64"):  # 64: 128 KB ahead, past the end of every weight
        monkeypatch.setenv("PPLPY_B_PREFETCH_BLOCKS", blocks)
        outs[blocks] = pplpy.load(path, max_isa=isa, num_threads=2).run(feeds)
    for name, ref in zip(("y", "c"), want):
        scale = np.abs(ref).max()
        np.testing.assert_allclose(outs["4"][name], ref, rtol=1e-4, atol=1e-4 * scale)
        for blocks in ("0", "64"):
            np.testing.assert_array_equal(outs[blocks][name], outs["4"][name])
