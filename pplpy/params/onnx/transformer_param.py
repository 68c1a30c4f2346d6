"""Attributes of the transformer ops (Attention, RotaryEmbedding), Einsum, the linear
(de)quantizers and the random generators.

One dataclass per op covers every opset it exists in: a field an older opset lacks keeps
its ONNX default there (Attention's window sizes before 25, QuantizeLinear's saturate
before 19).  ``None`` stands for an attribute ONNX gives no default (``scale``: derived from
the head size; ``seed``: draw one; ``dtype`` of the ``*Like`` ops: the input's type).
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AttentionParam:
    is_causal: int = 0
    kv_num_heads: int | None = None
    q_num_heads: int | None = None
    qk_matmul_output_mode: int = 0
    scale: float | None = None
    softcap: float = 0.0
    softmax_precision: int | None = None
    left_window_size: int = -1   # from opset 25
    right_window_size: int = -1  # from opset 25


@dataclass(frozen=True, slots=True)
class RotaryEmbeddingParam:
    interleaved: int = 0
    num_heads: int = 0
    rotary_embedding_dim: int = 0


@dataclass(frozen=True, slots=True)
class EinsumParam:
    equation: str  # required


@dataclass(frozen=True, slots=True)
class QuantizeLinearParam:
    axis: int = 1           # from opset 13
    saturate: int = 1       # from opset 19 (float8 outputs only)
    output_dtype: int = 0   # from opset 21
    block_size: int = 0     # from opset 21
    precision: int = 0      # from opset 23


@dataclass(frozen=True, slots=True)
class DequantizeLinearParam:
    axis: int = 1           # from opset 13
    block_size: int = 0     # from opset 21
    output_dtype: int = 0   # from opset 23


@dataclass(frozen=True, slots=True)
class RandomUniformParam:
    shape: tuple  # required
    dtype: int = 1
    high: float = 1.0
    low: float = 0.0
    seed: float | None = None


@dataclass(frozen=True, slots=True)
class RandomNormalParam:
    shape: tuple  # required
    dtype: int = 1
    mean: float = 0.0
    scale: float = 1.0
    seed: float | None = None


@dataclass(frozen=True, slots=True)
class RandomUniformLikeParam:
    dtype: int | None = None
    high: float = 1.0
    low: float = 0.0
    seed: float | None = None


@dataclass(frozen=True, slots=True)
class RandomNormalLikeParam:
    dtype: int | None = None
    mean: float = 0.0
    scale: float = 1.0
    seed: float | None = None


@dataclass(frozen=True, slots=True)
class BernoulliParam:
    dtype: int | None = None
    seed: float | None = None
