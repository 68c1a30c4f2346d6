"""Work items handed out as a parallel step runs (pplpy_step.h, ppl_next_items): every item
runs once in every run whatever the team, a slow share takes fewer items, and the kernels
that claim their items (GEMM, dense, depthwise and Winograd convolution) give the bits of
fixed shares and of one thread (PPLPY_STATIC_SHARES turns claiming off)."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, ISAS, make_model

import pplpy
from models import graph_builders as gb
from pplpy.engines.x86.impls.item_claims import items_claimed
from pplpy.errors import PplError
from pplpy.runtime.step import Plan, claim_probe, claim_sizes, shared_pool

RNG = np.random.default_rng(11)


def run_on(step, threads):
    Plan([step], threads, shared_pool(threads) if threads > 1 else None).run()


@pytest.mark.parametrize("chunk", [0, 1, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 100])
def test_every_item_runs_once_in_every_run_on_any_team(n, chunk):
    step, runs, _ = claim_probe(n, chunk)
    teams = [2, 3, 16, 1, 2, 3, 2, 16]  # a serial run between claimed ones keeps the queue
    for done, threads in enumerate(teams, start=1):
        run_on(step, threads)
        assert (runs == done).all(), (threads, runs)


def test_a_slow_share_takes_fewer_items_than_a_fixed_half():
    step, runs, share = claim_probe(64, 1, slow_us=500.0)
    run_on(step, 2)
    assert (runs == 1).all()
    assert np.count_nonzero(share == 1) < 16, np.bincount(share, minlength=2)
    fixed, runs, share = claim_probe(64, 0, slow_us=500.0)
    run_on(fixed, 2)
    assert (runs == 1).all()
    assert (share[:32] == 0).all() and (share[32:] == 1).all()


def test_claims_shrink_as_the_items_run_out():
    """Claims of the chunk while half an even split of what is left is larger, then smaller
    ones down to single items, so the last claim a slow thread makes is short."""
    assert claim_sizes(64, 8, 2) == [8, 8, 8, 8, 8, 6, 5, 4, 3, 2, 1, 1, 1, 1]
    assert claim_sizes(5, 3, 4) == [1, 1, 1, 1, 1]
    assert claim_sizes(1000, 1, 16) == [1] * 1000
    for n, chunk, threads in [(64, 8, 2), (113, 7, 3), (3, 5, 16)]:
        sizes = claim_sizes(n, chunk, threads)
        assert sum(sizes) == n and max(sizes) <= chunk
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1


def test_claim_probe_checks_its_size():
    with pytest.raises(ValueError, match="n must be >= 0"):
        claim_probe(-1, 1)


def test_static_shares_switch(monkeypatch):
    monkeypatch.delenv("PPLPY_STATIC_SHARES", raising=False)
    assert items_claimed()
    monkeypatch.setenv("PPLPY_STATIC_SHARES", "0")
    assert items_claimed()
    monkeypatch.setenv("PPLPY_STATIC_SHARES", "1")
    assert not items_claimed()


def claiming_model():
    """Every kernel that claims its items: a Winograd 3x3 conv (256 channels at 14x14), a
    depthwise 3x3, a 1x1 and a strided 3x3 (direct), a MatMul by a constant with one K chunk
    and one with three (K = 2100)."""
    def w(*shape):
        return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "wd"], ["d"], pads=[1, 1, 1, 1], group=256),
        helper.make_node("Conv", ["d", "w2"], ["b"]),
        helper.make_node("Conv", ["r", "w3"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Reshape", ["b", "shape"], ["b2"]),
        helper.make_node("MatMul", ["b2", "w4"], ["m"]),
        helper.make_node("MatMul", ["m", "w5"], ["y"]),
    ]
    inits = [("w1", w(256, 256, 3, 3)), ("wd", w(256, 1, 3, 3)), ("w2", w(48, 256, 1, 1)),
             ("w3", w(64, 256, 3, 3)), ("shape", np.array([48, 196], np.int64)),
             ("w4", w(196, 2100)), ("w5", w(2100, 40))]
    model = make_model(nodes, [("x", FLOAT, [1, 256, 14, 14])],
                       [("y", FLOAT, None), ("c", FLOAT, None)], inits)
    return model


@pytest.mark.parametrize("isa", ISAS)
def test_claimed_items_give_the_bits_of_fixed_shares_and_one_thread(tmp_path, monkeypatch,
                                                                    isa):
    model = claiming_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    monkeypatch.delenv("PPLPY_STATIC_SHARES", raising=False)
    claimed = pplpy.load(path, max_isa=isa, num_threads=3)
    one = pplpy.load(path, max_isa=isa, num_threads=1)
    monkeypatch.setenv("PPLPY_STATIC_SHARES", "1")
    fixed = pplpy.load(path, max_isa=isa, num_threads=3)
    reference = ReferenceEvaluator(model)
    for _ in range(3):  # new inputs each run: the queue starts over every time
        feeds = {"x": RNG.standard_normal((1, 256, 14, 14)).astype(np.float32)}
        got = claimed.run(feeds)
        for other in (fixed.run(feeds), one.run(feeds)):
            for name in ("y", "c"):
                np.testing.assert_array_equal(got[name], other[name])
        for name, ref in zip(("y", "c"), reference.run(None, feeds)):
            scale = np.abs(ref).max()
            np.testing.assert_allclose(got[name] / scale, ref / scale, atol=2e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_claimed_attention_and_gemms_of_a_decoder_give_the_same_bits(tmp_path, monkeypatch,
                                                                     isa):
    """Causal attention (query blocks of unequal cost), packed Q/K/V and the MLP's GEMMs."""
    path = tmp_path / "gpt2.onnx"
    onnx.save(gb.gpt2_decoder_layer(hidden=256, heads=8, vocab=100, max_pos=64), path)
    monkeypatch.delenv("PPLPY_STATIC_SHARES", raising=False)
    claimed = pplpy.load(path, max_isa=isa, num_threads=3)
    one = pplpy.load(path, max_isa=isa, num_threads=1)
    monkeypatch.setenv("PPLPY_STATIC_SHARES", "1")
    fixed = pplpy.load(path, max_isa=isa, num_threads=3)
    for seq in (64, 37, 64):
        feeds = {"input_ids": RNG.integers(0, 100, (2, seq)).astype(np.int64)}
        got = claimed.run(feeds)["output"]
        np.testing.assert_array_equal(got, fixed.run(feeds)["output"])
        np.testing.assert_array_equal(got, one.run(feeds)["output"])


def test_a_bad_switch_fails_the_load_not_the_process(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(claiming_model(), path)
    monkeypatch.setenv("PPLPY_STATIC_SHARES", "yes")
    with pytest.raises(PplError, match="PPLPY_STATIC_SHARES='yes': expected 0"):
        pplpy.load(path, num_threads=2).run({"x": np.zeros((1, 256, 14, 14), np.float32)})
