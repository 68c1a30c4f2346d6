"""The Attention kernel that recognize_attention's fused nodes run (brgemm score tiles, online
softmax over key blocks, K/V packed per KV head and thread), through pplpy.load against
onnx.reference on every ISA tier with 1 and 2 threads.

The shapes are the ones the fusion was measured on (B1 H12 S128/S512, B2 H4 S128, d 64) and
odd ones that exercise each edge of the blocking: query rows not a multiple of a block or of
a register tile, keys not a multiple of a key block or of a panel, head sizes 40/64/80 (and
Dv != D), masks (float, bool, shorter than the keys, fully masked rows), causal with and
without a past cache, sliding windows that skip leading key blocks, grouped-query attention,
nonpad_kv_seqlen, softcap, every qk_matmul_output mode, masks that close leading or trailing
keys to every row (padding, PyTorch's float-minimum causal masks: those keys are not scored),
and a key count large enough that K and V are packed one key block at a time instead of
whole.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pplpy
from onnx_builders import ISAS, make_model

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
_RNG = np.random.default_rng(11)
_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
_OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")
_ELEM = {np.float32: FLOAT, np.bool_: BOOL, np.int64: INT64}


def _f(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _qkv(B, Hq, Hkv, Sq, T, D, Dv=None):
    return dict(Q=_f(B, Hq, Sq, D), K=_f(B, Hkv, T, D), V=_f(B, Hkv, T, Dv or D))


def _rows_masked(Sq, T):
    """A float mask with -inf on some keys and one fully masked row."""
    m = np.where(_RNG.random((1, 1, Sq, T)) < 0.2, -np.inf, 0).astype(np.float32)
    m[0, 0, Sq // 2] = -np.inf
    return m


_MIN = np.finfo(np.float32).min


def _exporter_mask(Sq, T, pads, causal=True, bool_mask=False):
    """PyTorch's exporters' mask: (B, 1, Sq, T), 0 where a query may read a key and the float
    minimum where not (False as bool): key j open to query i iff j is past the entry's left
    padding (pads[b] keys) and, with ``causal``, j <= i + T - Sq."""
    i = np.arange(Sq)[:, None] + T - Sq
    j = np.arange(T)[None, :]
    open_ = np.stack([(j >= pad) & ((j <= i) | (not causal)) for pad in pads])[:, None]
    return open_ if bool_mask else np.where(open_, 0, _MIN).astype(np.float32)


def _closed_row_and_nan():
    """Right padding (the last 90 keys closed), one query row closed everywhere with the float
    minimum (softmax then averages V over every key) in entry 0, and a NaN among entry 1's
    closed keys (it must reach that row's output)."""
    m = _exporter_mask(40, 300, [0, 0], causal=False)
    m[:, :, :, 210:] = _MIN
    m[0, 0, 7] = _MIN
    m[1, 0, 3, 250] = np.nan
    return m


def _nan_rows():
    """Two rows whose output is NaN: row 0 opens keys 96 and 200 and has a NaN at 250 (a key
    block of its own after the closed keys before 96 are dropped), row 1's only key that is
    not -inf is a NaN."""
    m = np.full((1, 1, 2, 300), -np.inf, np.float32)
    m[0, 0, 0, [96, 200]] = 0
    m[0, 0, 0, 250] = np.nan
    m[0, 0, 1, 130] = np.nan
    return m


CASES = {
    # name: (opset, attributes, feeds, number of outputs)
    "b1h12s128d64": (23, {}, _qkv(1, 12, 12, 128, 128, 64), 1),
    "b2h4s128d64_mask": (23, {}, dict(_qkv(2, 4, 4, 128, 128, 64), attn_mask=_f(2, 1, 128, 128)),
                         1),
    "b1h12s512d64_causal": (23, {"is_causal": 1}, _qkv(1, 12, 12, 512, 512, 64), 1),
    "odd_d40_causal": (23, {"is_causal": 1}, _qkv(1, 3, 3, 67, 131, 40), 1),
    "d80_gqa_bool": (23, {}, dict(_qkv(2, 6, 2, 45, 100, 80),
                                  attn_mask=_RNG.random((2, 6, 45, 100)) > 0.3), 1),
    "dv_differs_short_mask": (23, {}, dict(_qkv(1, 2, 1, 33, 150, 64, 40),
                                           attn_mask=_RNG.random((33, 97)) > 0.2), 1),
    "fully_masked_rows": (23, {}, dict(_qkv(1, 2, 2, 30, 140, 16),
                                       attn_mask=_rows_masked(30, 140)), 1),
    "3d_gqa_past_causal": (23, {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1},
                           dict(Q=_f(2, 5, 4 * 64), K=_f(2, 5, 2 * 64), V=_f(2, 5, 2 * 48),
                                past_key=_f(2, 2, 140, 64), past_value=_f(2, 2, 140, 48)), 3),
    "softcap_scale": (23, {"softcap": 3.0, "scale": 0.2}, _qkv(1, 2, 2, 70, 200, 32), 1),
    "window_skips_blocks": (25, {"is_causal": 1, "left_window_size": 50,
                                 "right_window_size": 0}, _qkv(1, 2, 2, 300, 300, 24), 1),
    "nonpad_causal": (24, {"is_causal": 1}, dict(_qkv(2, 2, 2, 40, 300, 16),
                                                 nonpad_kv_seqlen=np.array([170, 300])), 1),
    "qk_mode0_causal": (23, {"qk_matmul_output_mode": 0, "is_causal": 1, "softcap": 2.0},
                        _qkv(1, 2, 2, 70, 200, 32), 4),
    "qk_mode2_mask": (23, {"qk_matmul_output_mode": 2},
                      dict(_qkv(1, 2, 2, 70, 200, 32), attn_mask=_f(70, 200)), 4),
    "qk_mode3_causal": (23, {"qk_matmul_output_mode": 3, "is_causal": 1},
                        _qkv(1, 2, 2, 70, 200, 32), 4),
    "decode_one_row": (23, {}, _qkv(3, 8, 2, 1, 260, 64), 1),
    # Masks that close whole runs of keys to every row of an item: the closed keys are not
    # scored (_open_keys), except for an item with a float row closed everywhere.
    "exporter_causal_left_pad": (23, {}, dict(_qkv(2, 4, 4, 300, 300, 32),
                                              attn_mask=_exporter_mask(300, 300, [0, 37])), 1),
    "exporter_causal_past_bool": (23, {}, dict(_qkv(2, 2, 1, 70, 400, 32),
                                               attn_mask=_exporter_mask(70, 400, [150, 0],
                                                                        bool_mask=True)), 1),
    "right_pad_closed_row_nan": (23, {}, dict(_qkv(2, 2, 2, 40, 300, 16),
                                              attn_mask=_closed_row_and_nan()), 1),
    "bool_all_closed_entry": (23, {}, dict(_qkv(2, 2, 2, 20, 150, 16),
                                           attn_mask=_exporter_mask(20, 150, [150, 9],
                                                                    bool_mask=True)), 1),
    "nan_scores": (23, {}, dict(_qkv(1, 1, 1, 2, 300, 16), attn_mask=_nan_rows()), 1),
    # 8300 keys of D = Dv = 64 are more than one KV head's packing budget: K and V are then
    # packed one key block at a time.
    "keys_packed_per_block": (23, {}, dict(_qkv(1, 2, 1, 3, 8300, 64),
                                           attn_mask=_f(1, 1, 3, 8300)), 1),
}


def _model(name):
    opset, attrs, feeds, n_out = CASES[name]
    last = max(i for i, n in enumerate(_INPUTS) if n in feeds)
    inputs = [n if n in feeds else "" for n in _INPUTS[:last + 1]]
    node = helper.make_node("Attention", inputs, list(_OUTPUTS[:n_out]), **attrs)
    model = make_model(
        [node], [(n, _ELEM[feeds[n].dtype.type], list(feeds[n].shape)) for n in inputs if n],
        [(o, FLOAT, None) for o in _OUTPUTS[:n_out]], opset=opset)
    return model, feeds


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(CASES))
def test_attention_kernel(name, isa):
    model, feeds = _model(name)
    want = ReferenceEvaluator(model).run(None, feeds)
    results = []
    for threads in (1, 2):
        rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=threads)
        got = rt.run(feeds)
        for out, w in zip(rt.output_names, want):
            assert got[out].shape == w.shape, out
            np.testing.assert_allclose(got[out], w, rtol=1e-4, atol=2e-5, err_msg=out)
        results.append(got)
    for out in results[0]:  # the split into work items does not depend on the team size
        np.testing.assert_array_equal(results[0][out], results[1][out])
