"""Params of the x86 engine's own nodes (not ONNX ops)."""

import dataclasses
import json
from dataclasses import dataclass

from pplpy.common.data_format import DataFormat
from pplpy.params.onnx import AttentionParam


@dataclass(frozen=True, slots=True)
class ReorderParam:
    """Convert a tensor from ``src`` to ``dst`` layout (NDARRAY <-> N16CX).

    ``channels_last`` 0: the NDARRAY side is channels-first, (N, C, spatial...).  3 or 4:
    it is channels-last, of that rank: (N, L, C) with the N16CX side (N, C, H, W), L = H * W
    (H and W from a second input, the shape of the Reshape the fold took), or (N, H, W, C);
    made by passes/layout_folding.py from a Reorder and the Transpose (and Reshape) next to
    it; ``allowzero`` is that Reshape's."""

    src: DataFormat
    dst: DataFormat
    channels_last: int = 0
    allowzero: int = 0


@dataclass(frozen=True, slots=True)
class ChannelShuffleParam:
    """ShuffleNet's channel shuffle: channels as (group, C / group), transposed."""

    group: int


@dataclass(frozen=True, slots=True)
class FusedParam:
    """A pplpy-domain twin of a standard op, as a saved optimised model writes it
    (ops/pplpy/standard_twins.py): ``op`` is the standard op's own param (None for an op
    without attributes) and ``post_ops`` the post-ops fused into its epilogue, in the form
    op contexts hold them (``op.post_ops``)."""

    op: object
    post_ops: tuple = ()
    opset: int = None  # the ai.onnx opset the twin stands for (None: its TWINS opset)


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One step of an element-wise chain, named by the ONNX op it came from.

    ``op_type`` is an activation (Relu, Clip, Tanh ... with its attribute dataclass in
    ``param``; Clip always as ClipParam(min, max) with float bounds) or a binary op (Add,
    Sub, Mul, Div, Max, Min, Pow, PRelu).  A binary entry reads the chain node's input
    ``operand`` (0 is the chain's own input x; -1 the running value itself, as in t * t);
    ``chain_left`` says the running value is the left operand (t - b), else the right
    (b - t)."""

    op_type: str
    param: object = None
    operand: int | None = None
    chain_left: bool = True


@dataclass(frozen=True, slots=True)
class EltwiseChainParam:
    """pplpy::EltwiseChain: ``entries`` (ChainEntry) applied in order to input 0, element
    by element, in one pass (made by the optimiser's fuse_eltwise_chains)."""

    entries: tuple = ()

    def onnx_attributes(self):
        """How a saved optimised model writes the chain: ``entries``, one JSON string per
        entry (op, its attribute dataclass's name and fields, operand, side), which
        pplpy::EltwiseChain's parser reads back (ops/pplpy/eltwise_chain.py)."""
        return {"entries": [json.dumps(_entry_json(e)) for e in self.entries]}


def _entry_json(entry):
    param = entry.param
    fields = None if param is None else {f.name: getattr(param, f.name)
                                         for f in dataclasses.fields(param)}
    return {"op": entry.op_type, "param": None if param is None else type(param).__name__,
            "fields": fields, "operand": entry.operand, "chain_left": entry.chain_left}


@dataclass(frozen=True, slots=True)
class AddLayerNormalizationParam:
    """LayerNormalization over the last axis of a residual sum A + B (recognize_add_layer_norm)."""

    epsilon: float = 1e-5


@dataclass(frozen=True, slots=True)
class PackedAttentionParam(AttentionParam):
    """Attention (opset 23's attributes) over Q, K and V packed side by side in one 3-D
    tensor (B, S, Q width + K width + V width), as one projection GEMM writes them
    (pack_qkv): ``qkv_hidden_sizes`` are the three widths, in that order.  With
    ``heads_interleaved`` 1 the row holds head after head, each head's q, k and v side by
    side (LeViT's view (B, S, H, dq + dk + dv) split along its last axis); with 0, all of
    Q, then K, then V."""

    qkv_hidden_sizes: tuple = ()
    heads_interleaved: int = 0
