"""A BERT-style encoder layer and a GPT-2-style decoder layer in the forms the PyTorch exporter
writes (see graph_builders.py), against ``onnx.reference.ReferenceEvaluator``.

Each model has a symbolic batch and sequence axis; one runtime runs it at two input shapes and
back at the first (a new plan per shape, then the cached one), every ISA tier the CPU has.
"""

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import pplpy
from models import graph_builders as gb

SHAPES = [(1, 7), (3, 12), (1, 7)]  # (batch, seq); the last returns to a cached plan


def assert_close(got, want):
    """~1e-4 relative to the output's scale."""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def bert_feeds(rng, batch, seq):
    """Padding mask: sample i has its last 2*i tokens padded (sample 0 none)."""
    mask = np.ones((batch, seq), np.int64)
    for i in range(1, batch):
        mask[i, seq - 2 * i:] = 0
    return {"hidden_states": rng.standard_normal((batch, seq, 64)).astype(np.float32),
            "attention_mask": mask}


def gpt2_feeds(rng, batch, seq):
    return {"input_ids": rng.integers(0, 100, (batch, seq), dtype=np.int64)}


def run_shapes(model, make_feeds, isa, num_threads=2):
    rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=num_threads)
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for batch, seq in SHAPES:
        feeds = make_feeds(rng, batch, seq)
        (want,) = ref.run(None, feeds)
        got = rt.run(feeds)["output"]
        assert got.shape == (batch, seq, 64)
        assert_close(got, want)
    return rt


@pytest.mark.parametrize("ln, gelu, mask", [
    ("fused", "erf", "cast"),
    ("decomposed", "tanh", "where"),
    ("fused", "tanh", "where"),
    ("decomposed", "erf", "cast"),
])
def test_bert_encoder_layer(ln, gelu, mask, isa):
    model = gb.bert_encoder_layer(ln=ln, gelu=gelu, mask=mask)
    rt = run_shapes(model, bert_feeds, isa)
    assert tuple(rt.input_shapes["hidden_states"]) == ("batch", "seq", 64)


@pytest.mark.parametrize("causal", ["trilu", "range"])
def test_gpt2_decoder_layer(causal, isa):
    run_shapes(gb.gpt2_decoder_layer(causal=causal), gpt2_feeds, isa)


@pytest.mark.parametrize("build, make_feeds", [
    (gb.bert_encoder_layer, bert_feeds),
    (gb.gpt2_decoder_layer, gpt2_feeds),
])
def test_transformer_layer_threads(build, make_feeds):
    """One thread and a team of two give the same result."""
    model = build()
    feeds = make_feeds(np.random.default_rng(1), 3, 12)
    one = pplpy.load(model.SerializeToString(), num_threads=1).run(feeds)["output"]
    two = pplpy.load(model.SerializeToString(), num_threads=2).run(feeds)["output"]
    assert_close(two, one)


def hf_gpt2_feeds(rng, batch, seq):
    """Left padding, as batched generation pads: sample i's first i tokens are padding
    (its first queries see no key at all: rows masked whole)."""
    mask = np.ones((batch, seq), np.int64)
    for i in range(1, batch):
        mask[i, :i] = 0
    return {"input_ids": rng.integers(0, 100, (batch, seq), dtype=np.int64),
            "attention_mask": mask}


def test_hf_gpt2_as_the_torchscript_exporter_writes_it(isa):
    """Every spelling of HF transformers 5's GPT-2 export fuses (graph_builders.
    hf_gpt2_model): one causal PackedAttention per layer with the padding as its mask,
    four MatMulBias per layer (the tanh GELU in the third's epilogue), nothing of the
    Conv1D Reshapes, the head split, the mask's triangle or the NaN guard left."""
    rt = run_shapes(gb.hf_gpt2_model(), hf_gpt2_feeds, isa)
    nodes = [n for n in rt.graph.nodes if n.op_type not in ("Reorder",)]
    types = [n.op_type for n in nodes]
    attention = [n for n in nodes if n.op_type == "PackedAttention"]
    assert len(attention) == 2 and all(n.param.is_causal == 1 and len(n.inputs) == 2
                                       for n in attention)
    assert types.count("MatMulBias") == 8
    left = {"Gemm", "Softmax", "IsNaN", "Transpose", "Split", "LessOrEqual", "MatMul"}
    assert not left & set(types), left & set(types)
    epilogues = [rt.result.ops[n].__dict__.get("post_ops") for n in nodes
                 if n.op_type == "MatMulBias"]
    assert sum(bool(e) for e in epilogues) == 2
