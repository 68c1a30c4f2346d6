"""The rnn_fp32 impl family (the recurrence of RNN, GRU and LSTM, R^T packing, the gate
activations) against the numpy oracle of the spec, for every ISA variant this CPU can run,
at 1 and 2 threads."""

import numpy as np
import pytest
from impl_variants import assert_variants_export_the_same_names, variant_fixture
from rnn_oracle import ACTIVATIONS, ARGUMENTS, DEFAULT_ACTIVATIONS, GATES, rnn_oracle

FAMILY = "rnn_fp32"

m = variant_fixture(FAMILY)
RNG = np.random.default_rng(8)


def test_variants_export_the_same_names():
    assert_variants_export_the_same_names(FAMILY)


def _randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("clip", [None, 3.0])
def test_activations(m, name, clip):
    x = np.concatenate([np.linspace(-30, 30, 2001), [0.0, 1e-6, -1e-6, 100, -100]])
    x = x.astype(np.float32)
    alpha, beta = ARGUMENTS.get(name, (0.0, 0.0))
    alpha, beta = alpha or 0.0, beta or 0.0
    got = x.copy()
    m.activate_fp32(got, name, alpha, beta, clip)
    ref = np.clip(x.astype(np.float64), -clip, clip) if clip is not None else x
    want = ACTIVATIONS[name](ref.astype(np.float64), alpha, beta)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


# (op, seq, batch, input, hidden, direction)
CASES = [(op, seq, batch, size, hidden, direction)
         for op in ("RNN", "GRU", "LSTM")
         for seq, batch, size, hidden in ((1, 1, 3, 2), (5, 3, 6, 7), (4, 9, 17, 33))
         for direction in ("forward", "reverse", "bidirectional")]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("num_threads", [1, 2])
def test_recurrence(m, case, num_threads):
    op, seq, batch, size, hidden, direction = case
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = _randn(seq, batch, size)
    w = _randn(dirs, g * hidden, size, scale=0.4)
    r = _randn(dirs, g * hidden, hidden, scale=0.4)
    b = _randn(dirs, 2 * g * hidden, scale=0.4)
    h0 = _randn(dirs, batch, hidden)
    c0 = _randn(dirs, batch, hidden) if op == "LSTM" else None
    p = _randn(dirs, 3 * hidden) if op == "LSTM" else None
    lens = RNG.integers(0, seq + 1, batch).astype(np.int32)
    lens[0] = seq
    acts = [[(n, 0.0, 0.0) for n in DEFAULT_ACTIVATIONS[op]]] * dirs
    for lbr in ((0, 1) if op == "GRU" else (0,)):
        want = rnn_oracle(op, x, w, r, b, lens, h0, c0, p, direction=direction,
                          linear_before_reset=lbr)
        got = m.rnn_fp32(op, x, w, r, b, lens, h0, c0, p, direction=direction,
                         activations=acts, linear_before_reset=bool(lbr),
                         pack_r_step=num_threads == 2, num_threads=num_threads)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)


def test_threads_give_the_same_bits(m):
    x, w, r = _randn(6, 8, 10), _randn(2, 64, 10, scale=0.3), _randn(2, 64, 16, scale=0.3)
    acts = [[(n, 0.0, 0.0) for n in DEFAULT_ACTIVATIONS["LSTM"]]] * 2
    one = m.rnn_fp32("LSTM", x, w, r, direction="bidirectional", activations=acts)
    two = m.rnn_fp32("LSTM", x, w, r, direction="bidirectional", activations=acts,
                     num_threads=2)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)


def test_bad_arguments_raise(m):
    with pytest.raises(ValueError, match="kind"):
        m.make_recurrence_step("CELL", 1, 1, 1, 1, 1, 1, 1, 1, activations=[[(0, 0, 0)]])
    with pytest.raises(ValueError, match="activations"):
        m.make_recurrence_step("GRU", 1, 1, 1, 1, 1, 1, 1, 1, activations=[[(0, 0, 0)]])
    with pytest.raises(ValueError, match="cell state"):
        m.make_recurrence_step("RNN", 1, 1, 1, 1, 1, 1, 1, 1, c0=8, s_b=1,
                               activations=[[(0, 0, 0)]])
    with pytest.raises(ValueError):
        m.make_pack_r_step(0, 8, 1, 1, 1)
