"""ONNX node conformance cases for every op pplpy supports, through the public API.

The cases come from ``onnx.backend.test.case.node.collect_testcases`` (generated in memory
from the onnx package).  A case runs when every node of its model is an op pplpy registers;
each must pass, or be listed in EXCLUDES with the reason it cannot.
"""

import warnings

import numpy as np
import onnx
import pytest

import pplpy
from onnx_builders import ISAS
from pplpy.engines.x86.ops.declare import find_op
from pplpy.models.onnx.registry import find_parser, normalize_domain

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    ALL_CASES = collect_testcases(None)

# case name -> why pplpy does not run it.
EXCLUDES = {
    "test_clip_default_int8_min": "Clip runs on float32 only",
    "test_clip_default_int8_max": "Clip runs on float32 only",
    "test_clip_default_int8_inbounds": "Clip runs on float32 only",
    "test_maxpool_2d_uint8": "MaxPool runs on float32 only",
    "test_identity_sequence": "sequence types are not supported (tensors only)",
    "test_identity_opt": "optional types are not supported (tensors only)",
    "test_batchnorm_epsilon_training_mode": "training mode (batch statistics) is not supported",
    "test_batchnorm_example_training_mode": "training mode (batch statistics) is not supported",
    "test_training_dropout": "training mode Dropout (random masks) is not supported",
    "test_training_dropout_default": "training mode Dropout (random masks) is not supported",
    "test_training_dropout_default_mask": "training mode Dropout (random masks) is not supported",
    "test_training_dropout_mask": "training mode Dropout (random masks) is not supported",
    "test_training_dropout_zero_ratio": "training mode Dropout is not supported",
    "test_training_dropout_zero_ratio_mask": "training mode Dropout is not supported",
    **{f"test_reduce_log_sum_exp_{v}": "float64 input: reductions run on float32 (and ints)"
       for v in ("do_not_keepdims_example", "do_not_keepdims_random", "keepdims_example",
                 "keepdims_random", "default_axes_keepdims_example",
                 "default_axes_keepdims_random", "negative_axes_keepdims_example",
                 "negative_axes_keepdims_random")},
    # Attention, RotaryEmbedding, Einsum, QuantizeLinear/DequantizeLinear, random ops.
    **{f"test_attention_{v}": "float16/bfloat16 Attention: pplpy's Attention runs on float32"
       for v in ("4d_fp16", "4d_gqa_with_past_and_present_fp16", "4d_causal_bf16",
                 "4d_causal_fp16", "4d_padded_kv_bf16", "4d_causal_padded_kv_bf16",
                 "4d_attn_mask_causal_bf16", "3d_causal_bf16",
                 "4d_gqa_causal_nonpad_decode_fp16", "24_qk_matmul_output_mode3_softmax_precision",
                 "local_window_ext_cache_float16_mask")},
    **{f"test_einsum_{v}_bfloat16": "bfloat16 is no pplpy element type"
       for v in ("batch_matmul", "sum", "transpose")},
    **{f"test_{op}_{t}": "float8/int4/int2/float4 element types are no pplpy types"
       for op in ("quantizelinear", "dequantizelinear")
       for t in ("e4m3fn", "e5m2", "uint4", "int4", "uint2", "int2", "float4e2m1")},
    "test_dequantizelinear_e4m3fn_float16": "float8 and float16 are no pplpy math types",
    "test_dequantizelinear_e4m3fn_zero_point": "float8 is no pplpy element type",
    "test_dequantizelinear_blocked": "blocked (block_size) quantization is not supported",
    "test_quantizelinear_blocked_asymmetric": "blocked (block_size) quantization is not "
                                              "supported",
    "test_quantizelinear_blocked_symmetric": "blocked (block_size) quantization is not "
                                             "supported",
    **{f"test_qlinearmatmul_{d}_{t}_float16": "float16 scales: pplpy computes in float32"
       for d in ("2D", "3D") for t in ("uint8", "int8")},
}

# Control flow (If, Loop, Scan) on sequences and optionals.
EXCLUDES.update({
    name: "sequence/optional types are not supported"
    for name in ("test_if_seq", "test_if_opt", "test_loop13_seq", "test_loop16_seq_none")
})
EXCLUDES.update({
    "test_range_bfloat16_type_positive_delta_expanded": "bfloat16 tensors are not supported",
})

# Cases the unary ops (Exp, Cos, Floor, Celu ...) bring in whose other parts pplpy cannot run.
EXCLUDES.update({
    **{f"test_celu_{t}{v}": f"{t} is no pplpy math type"
       for t in ("float16", "bfloat16") for v in ("", "_expanded")},
    **{f"test_causal_conv_with_state{v}_fp16_expanded": "float16 is no pplpy math type"
       for v in ("", "_silu")},
    "test_flexattention_fp16_expanded_ver26": "float16 is no pplpy math type",
    "test_flexattention_double_expanded_ver26": "float64 input: pplpy computes in float32",
    **{f"test_attention_{v}_expanded": "float16/bfloat16 Attention: pplpy computes in float32"
       for v in ("4d_fp16", "4d_gqa_with_past_and_present_fp16", "4d_causal_bf16",
                 "4d_causal_fp16", "4d_padded_kv_bf16", "4d_causal_padded_kv_bf16",
                 "4d_attn_mask_causal_bf16", "3d_causal_bf16",
                 "4d_gqa_causal_nonpad_decode_fp16", "24_qk_matmul_output_mode3_softmax_precision",
                 "local_window_ext_cache_float16_mask")},
    "test_attention_local_window_gqa_rank4_mask_expanded": "its Softmax runs in float64: pplpy "
                                                           "computes in float32",
    **{f"test_reduce_log_sum_exp_{v}_expanded": "float64 input: pplpy computes in float32"
       for v in ("do_not_keepdims_example", "do_not_keepdims_random", "keepdims_example",
                 "keepdims_random", "default_axes_keepdims_example",
                 "default_axes_keepdims_random", "negative_axes_keepdims_example",
                 "negative_axes_keepdims_random", "empty_set")},
})

# case name -> why its values are not compared: the reference draws them at random (ONNX
# fixes the distribution, not the generator), so only the dtype, the shape and the values'
# range are checked.
SHAPE_ONLY = {
    **{name: "Bernoulli's values are random; checked: dtype, shape, values in {0, 1}"
       for name in ("test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed")},
    **{f"{name}_expanded": "RandomUniformLike's values are random; checked: dtype, shape, "
                           "values in {0, 1}"
       for name in ("test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed")},
}
# Comparisons, logic, Where, Min/Max, Mod, IsNaN/IsInf (compare_logic.py, binary_math.py).
EXCLUDES.update({
    **{name: "float16 math is not supported (float32/float64 and the integer types are)"
       for name in ("test_isinf_float16", "test_isnan_float16", "test_max_float16",
                    "test_min_float16", "test_mod_mixed_sign_float16",
                    "test_mod_float16_mixed_sign_fmod_0",
                    "test_mod_float_edge_cases_fmod_0_float16")},
    "test_equal_string": "string tensors are not supported",
    "test_equal_string_broadcast": "string tensors are not supported",
})
# Element types pplpy has no tensors of: a model using them fails to load with a pplpy error.
_NO_SUCH_TYPE = ("BFLOAT16", "FLOAT8", "INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
EXCLUDES.update({
    name: "bfloat16, float8, float4, int4 and int2 tensors are not supported"
    for name in (c.name for c in ALL_CASES if c.kind == "node")
    if name.startswith(("test_cast_", "test_castlike_")) and any(t in name for t in _NO_SUCH_TYPE)
})
EXCLUDES.update({
    "test_onehot_with_bfloat16_values": "bfloat16 tensors are not supported",
    "test_range_bfloat16_type_positive_delta": "bfloat16 tensors are not supported",
    "test_reversesequence_bfloat16": "bfloat16 tensors are not supported",
    "test_compress_bfloat16": "bfloat16 tensors are not supported",
    "test_unique_bfloat16_sorted_without_axis": "bfloat16 tensors are not supported",
})
# Transformer ops (Swish, SwiGLU, LinearAttention, CausalConvWithState, FlexAttention,
# TensorScatter): pplpy runs them in float32.
EXCLUDES.update({
    "test_swiglu_float16": "float16 is no pplpy math type",
    "test_swiglu_float16_expanded": "float16 is no pplpy math type",
    **{f"test_{v}_fp16": "float16 is no pplpy math type"
       for v in ("causal_conv_with_state", "causal_conv_with_state_silu", "linear_attention",
                 "flexattention")},
    "test_flexattention_double": "float64 input: pplpy computes in float32",
})


def _supported(model):
    opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    for node in model.graph.node:
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain)
        if opset is None or find_parser(domain, node.op_type, opset) is None:
            return False
        if find_op(domain, node.op_type, opset) is None:
            return False
    return True


CASES = [c for c in ALL_CASES if c.kind == "node" and _supported(c.model)]


def test_cases_were_collected():
    names = {c.name for c in CASES}
    for expected in ("test_conv_with_strides_padding", "test_maxpool_2d_pads", "test_relu",
                     "test_gemm_default_single_elem_vector_bias", "test_softmax_axis_1"):
        assert expected in names


def _array(value):
    """A case's input or output as numpy (some cases, Cast's, store TensorProtos)."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def _feeds(model, inputs):
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return {name: _array(value) for name, value in zip(names, inputs)}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance(case, isa, tmp_path):
    if case.name in EXCLUDES:
        # Excluded cases must still fail loudly rather than return wrong numbers.
        path = tmp_path / "model.onnx"
        onnx.save(case.model, path)
        with pytest.raises(pplpy.PplError):
            rt = pplpy.load(path, max_isa=isa)
            for inputs, _ in case.data_sets:
                rt.run(_feeds(case.model, inputs))
        return
    path = tmp_path / "model.onnx"
    onnx.save(case.model, path)
    rt = pplpy.load(path, max_isa=isa)
    for inputs, expected in case.data_sets:
        outputs = rt.run(_feeds(case.model, inputs))
        for name, want in zip(rt.output_names, expected):
            got = outputs[name]
            want = _array(want)
            assert got.dtype == want.dtype, name
            assert got.shape == want.shape, name
            if case.name in SHAPE_ONLY:
                assert np.isin(got, [0, 1]).all(), name
                continue
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=max(case.atol, 1e-6),
                                       err_msg=f"{case.name}: output {name}")
