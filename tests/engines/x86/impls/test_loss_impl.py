"""The _loss steps against a numpy statement of NegativeLogLikelihoodLoss: every reduction,
weights, ignore_index, int32/int64 targets, sample counts around the chunk size and past the
parallel threshold, 1 and 2 threads; bad targets are skipped and reported, one per chunk."""

import numpy as np
import pytest

from pplpy.engines.x86.impls import _loss

RNG = np.random.default_rng(7)


def _numpy_nll(x, target, weight, reduction, ignore_index):
    n, c = x.shape[:2]
    xs = x.reshape(n, c, -1)
    t = target.reshape(n, -1).astype(np.int64)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    safe = np.where(keep, t, 0)
    picked = np.take_along_axis(xs, safe[:, None, :], axis=1)[:, 0, :].astype(np.float64)
    w = (weight[safe] if weight is not None else np.ones(t.shape)).astype(np.float64) * keep
    loss = -picked * w
    if reduction == "none":
        return loss.reshape(target.shape).astype(np.float32)
    if reduction == "sum":
        return np.float32(loss.sum())
    with np.errstate(invalid="ignore"):
        return np.float32(loss.sum() / w.sum())


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_matches_numpy(reduction, threads, weighted):
    for shape in [(3, 4), (2, 5, 7), (1, 3, 4095), (1, 3, 4097), (3, 2, 80, 300)]:
        for ignore_index in (None, 0, -1):
            x = RNG.standard_normal(shape).astype(np.float32)
            c = shape[1]
            target = RNG.integers(0, c, (shape[0],) + shape[2:])
            if ignore_index == -1:
                target[RNG.random(target.shape) < 0.3] = -1
            target = target.astype(np.int32 if shape[0] == 2 else np.int64)
            weight = RNG.random(c).astype(np.float32) if weighted else None
            got, bad = _loss.nll_loss(x, target, weight, reduction, ignore_index, threads)
            assert bad.size == 0
            np.testing.assert_allclose(got, _numpy_nll(x, target, weight, reduction,
                                                       ignore_index), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_bad_targets_are_skipped_and_reported(threads):
    x = RNG.standard_normal((2, 3, 5000)).astype(np.float32)
    target = RNG.integers(0, 3, (2, 5000))
    target[0, 10] = 3        # chunk 0
    target[0, 20] = -2       # chunk 0 again: only its first is reported
    target[1, 4999] = 99     # chunk 2
    got, bad = _loss.nll_loss(x, target, None, "none", None, threads)
    assert list(bad) == [10, 9999]
    assert got[0, 10] == 0 and got[0, 20] == 0 and got[1, 4999] == 0
    clean = np.where((target < 0) | (target > 2), 0, target)
    want = _numpy_nll(x, clean, None, "none", None)
    mask = np.ones(target.shape, bool)
    mask[0, 10] = mask[0, 20] = mask[1, 4999] = False
    np.testing.assert_array_equal(got[mask], want[mask])


def test_every_sample_ignored_and_no_classes():
    x = np.zeros((2, 0, 3), np.float32)  # C = 0: only ignored samples are valid
    target = np.full((2, 3), -5, np.int64)
    assert np.isnan(_loss.nll_loss(x, target, None, "mean", -5)[0])
    assert _loss.nll_loss(x, target, None, "sum", -5)[0] == 0
    assert list(_loss.nll_loss(x, target, None, "none", None)[1]) == [0]


def test_make_step_checks_its_arguments():
    partial, bad = np.zeros((1, 2)), np.full(1, -1, np.int64)
    with pytest.raises(ValueError, match="reduction code"):
        _loss.make_nll_step(8, 8, True, 0, 8, 1, 1, 1, 7, None, partial, bad)
    with pytest.raises(ValueError, match="partial"):
        _loss.make_nll_step(8, 8, True, 0, 8, 1, 1, 1, 1, None, np.zeros((2, 2)), bad)
    with pytest.raises(ValueError, match="bad"):
        _loss.make_nll_step(8, 8, True, 0, 8, 1, 1, 1, 1, None, partial, bad.astype(np.int32))
    with pytest.raises(ValueError, match="valid addresses"):
        _loss.make_nll_step(0, 8, True, 0, 8, 1, 1, 1, 1, None, partial, bad)
    with pytest.raises(ValueError, match="finish step"):
        _loss.make_nll_finish_step(partial, _loss.REDUCTIONS["none"], 8)
