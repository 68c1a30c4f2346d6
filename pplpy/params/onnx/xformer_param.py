"""Attributes of the recurrent and cache ops of recent transformer models: LinearAttention
and CausalConvWithState (opset 27), FlexAttention (ai.onnx.preview 1) and TensorScatter
(opset 24).

``None`` stands for an attribute ONNX gives no default (FlexAttention's ``scale``: derived
from the head size).  FlexAttention's modifier subgraphs are held as serialized GraphProto
bytes, so that the param stays hashable and comparable like every other.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorScatterParam:
    axis: int = -2
    mode: str = "linear"


@dataclass(frozen=True, slots=True)
class CausalConvWithStateParam:
    activation: str = "none"


@dataclass(frozen=True, slots=True)
class LinearAttentionParam:
    q_num_heads: int  # required
    kv_num_heads: int  # required
    chunk_size: int = 64  # a tuning hint for chunked prefill; the result does not depend on it
    scale: float = 0.0  # 0: 1 / sqrt(d_k)
    update_rule: str = "gated_delta"


@dataclass(frozen=True, slots=True)
class FlexAttentionParam:
    scale: float | None = None
    softmax_precision: int | None = None
    score_mod: bytes | None = None  # a serialized GraphProto: (scores) -> scores
    prob_mod: bytes | None = None  # a serialized GraphProto: (probs) -> probs
