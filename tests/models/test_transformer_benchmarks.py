"""The transformer models of the benchmark suite (benchmarks/models.py: BERT-base, GPT-2
small, ViT-B/16, built by graph_builders.py) at tiny size, pplpy against ONNX Runtime, so
the builders the benchmarks time stay correct."""

import numpy as np
import onnxruntime as ort
import pytest

import pplpy
from models import graph_builders as gb

TINY = dict(layers=2, hidden=64, heads=4)


def ids_and_mask(rng, batch, seq, vocab):
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq // 2:] = 0  # the last sample padded
    return {"input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64),
            "attention_mask": mask}


CASES = {
    "bert": (lambda: gb.bert_model(ffn=256, vocab=100, max_pos=32, **TINY),
             lambda rng: ids_and_mask(rng, 2, 11, 100)),
    "bert_decomposed_ln": (
        lambda: gb.bert_model(ffn=256, vocab=100, max_pos=32, ln="decomposed", **TINY),
        lambda rng: ids_and_mask(rng, 2, 11, 100)),
    "gpt2": (lambda: gb.gpt2_model(vocab=100, max_pos=32, **TINY),
             lambda rng: {"input_ids": rng.integers(0, 100, (2, 13), dtype=np.int64)}),
    "vit": (lambda: gb.vit_model(ffn=128, image=32, patch=8, classes=10, **TINY),
            lambda rng: {"pixel_values": rng.standard_normal((2, 3, 32, 32), np.float32)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_onnxruntime(name):
    build, make_feeds = CASES[name]
    model = build().SerializeToString()
    feeds = make_feeds(np.random.default_rng(0))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    got = pplpy.load(model, num_threads=2).run(feeds)["output"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
