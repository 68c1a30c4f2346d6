"""The pass manager runs an explicit, ordered pipeline of passes.

A pipeline is data, configured as Glow configures its graph optimiser (reference/001): a
list of ``PassConfig`` entries, each naming a pass by its id and saying

- ``convergence``: "once", or "fixed_point" (repeat until the pass reports no change);
- ``dce_after``: whether dead-code elimination runs right after it (a pass that bypasses
  nodes leaves them unread; the next pass then sees exact reader counts);
- ``modes``: the build modes the entry runs in: "fusion" (the default build) and/or
  "no_fusion" (``pplnn --disable-fusion``, ``pplpy.load(fusion=False)``), so the passes that
  merge layers can be left out of an unfused build without a second pipeline.

The default pipeline is ``DEFAULT_PIPELINE``; users may give their own as YAML
(``pplnn --passes p.yaml``, ``pplpy.load(..., passes="p.yaml")``)::

    - {pass: constant_to_initializer}
    - {pass: constant_folding, convergence: fixed_point, dce_after: true}
    - {pass: fold_into_conv, convergence: fixed_point, modes: [fusion]}

Every run of a pass is logged (``PassManager.log``: one ``PassRecord`` per entry, with
rounds, changes, node counts and what the pass says it did), so ``pplnn --pass-log`` can
say what each pass changed.
"""

import os
from collections import Counter
from dataclasses import dataclass, field

import yaml

from pplpy.errors import PplError
from pplpy.optimizer.passes.basic_rules import (
    ConstantToInitializer,
    RemoveIdentity,
    RemoveInferenceDropout,
)
from pplpy.optimizer.passes.channel_shuffle import RecognizeChannelShuffle
from pplpy.optimizer.passes.concat import OptimizeConcats
from pplpy.optimizer.passes.concat_activation import (
    HoistActivationAboveConcat,
    HoistActivationAboveReshape,
)
from pplpy.optimizer.passes.constant_folding import ConstantFolding
from pplpy.optimizer.passes.cse import CommonSubexpressionElimination
from pplpy.optimizer.passes.dead_code_elimination import DeadCodeElimination
from pplpy.optimizer.passes.einsum_to_matmul import EinsumToMatMul
from pplpy.optimizer.passes.expand_to_broadcast import ExpandToBroadcast
from pplpy.optimizer.passes.fold_into_conv import FoldIntoBatchNorm, FoldIntoConv, FoldIntoGemm
from pplpy.optimizer.passes.fuse_eltwise_chains import FuseEltwiseChains
from pplpy.optimizer.passes.fuse_matmul_bias import FuseMatMulBias
from pplpy.optimizer.passes.gather_rows_early import GatherRowsEarly
from pplpy.optimizer.passes.pack_qkv import PackQKV
from pplpy.optimizer.passes.recognize_add_layer_norm import RecognizeAddLayerNorm
from pplpy.optimizer.passes.recognize_attention import RecognizeAttention
from pplpy.optimizer.passes.recognize_gelu import RecognizeGelu
from pplpy.optimizer.passes.recognize_group_norm import RecognizeGroupNorm
from pplpy.optimizer.passes.recognize_layer_norm import RecognizeLayerNorm
from pplpy.optimizer.passes.reduce_mean_to_pool import ReduceMeanToGlobalPool
from pplpy.optimizer.passes.relu_maxpool import SwapReluMaxPool
from pplpy.optimizer.passes.reshape_cast_chains import MergeReshapes, SimplifyCasts
from pplpy.optimizer.passes.split_grouped_conv import SplitGroupedConv
from pplpy.optimizer.passes.split_projection import SplitGatedProjection
from pplpy.optimizer.passes.sum_to_add import SumToAdd
from pplpy.optimizer.passes.transposes import OptimizeTransposes, SinkTransposes
from pplpy.optimizer.passes.unflatten_gemm import UnflattenGemm

PASSES = {
    cls.name: cls
    for cls in (
        ConstantToInitializer,
        RemoveIdentity,
        RemoveInferenceDropout,
        SumToAdd,
        SplitGatedProjection,
        DeadCodeElimination,
        ConstantFolding,
        CommonSubexpressionElimination,
        SimplifyCasts,
        MergeReshapes,
        ExpandToBroadcast,
        EinsumToMatMul,
        SinkTransposes,
        OptimizeTransposes,
        OptimizeConcats,
        ReduceMeanToGlobalPool,
        SwapReluMaxPool,
        HoistActivationAboveConcat,
        HoistActivationAboveReshape,
        RecognizeChannelShuffle,
        FoldIntoBatchNorm,
        FoldIntoConv,
        FoldIntoGemm,
        SplitGroupedConv,
        RecognizeGelu,
        RecognizeLayerNorm,
        RecognizeGroupNorm,
        RecognizeAddLayerNorm,
        RecognizeAttention,
        FuseMatMulBias,
        UnflattenGemm,
        GatherRowsEarly,
        PackQKV,
        FuseEltwiseChains,
    )
}

CONVERGENCE = ("once", "fixed_point")
MODES = ("fusion", "no_fusion")
MAX_FIXED_POINT_ROUNDS = 100


@dataclass(frozen=True)
class PassConfig:
    """One pipeline entry (Glow's FunctionPassConfig)."""

    pass_id: str
    convergence: str = "once"
    dce_after: bool = False
    modes: frozenset = frozenset(MODES)

    def __post_init__(self):
        if not isinstance(self.pass_id, str) or self.pass_id not in PASSES:
            raise PplError(f"unknown pass {self.pass_id!r}; known passes: {sorted(PASSES)}")
        if self.convergence not in CONVERGENCE:
            raise PplError(f"pass {self.pass_id!r}: convergence must be 'once' or "
                           f"'fixed_point', got {self.convergence!r}")
        if not isinstance(self.dce_after, bool):
            raise PplError(f"pass {self.pass_id!r}: dce_after must be true or false, got "
                           f"{self.dce_after!r}")
        try:  # a name, or a list of names (not 5, not [[fusion]])
            modes = frozenset([self.modes] if isinstance(self.modes, str) else self.modes)
        except TypeError:
            modes = None
        if not modes or not modes <= set(MODES):
            raise PplError(f"pass {self.pass_id!r}: modes must be a non-empty list of "
                           f"{', '.join(MODES)}; got {self.modes!r}")
        object.__setattr__(self, "modes", modes)


def P(pass_id, convergence="once", dce_after=False, modes=MODES):  # noqa: N802 (a table row)
    return PassConfig(pass_id, convergence, dce_after, frozenset(modes))


DEFAULT_PIPELINE = (
    # Constants first, so folding sees Constant nodes' values as graph constants.
    P("constant_to_initializer"),
    P("remove_identity", "fixed_point"),
    # DCE before folding: never compute constants nobody reads.
    P("remove_inference_dropout", dce_after=True),
    # Sum of one or two inputs to its input or Add (Glow's canonical binary form), so the
    # later rules and the engine's post-op fusion see one spelling of a residual add.
    P("sum_to_add"),
    P("constant_folding", "fixed_point", dce_after=True),
    # Glow's graph passes.  CSE after folding (equal constants are folded by then) and
    # before the rules that look for single readers (a duplicate is a second reader).
    P("cse", dce_after=True),
    P("simplify_casts", "fixed_point"),
    P("merge_reshapes", "fixed_point"),
    P("expand_to_broadcast", "fixed_point", dce_after=True),
    # Attention written as einsum (CvT) in the MatMul spelling recognize_attention knows.
    P("einsum_to_matmul", modes=("fusion",)),
    # Projections written through 2-D (HF GPT-2's Conv1D, the dynamo exporter's head merge)
    # back to N-D MatMul + Add, before the recognizers look for the attention's head merge
    # and the activations after the projections.
    P("unflatten_gemm", dce_after=True, modes=("fusion",)),
    # Decomposed activations, norms and attention back to one op each (oneDNN Graph-style
    # patterns, reference/004); after folding, whose constants (sqrt(2), eps, gamma) they
    # match; before the transposes sink (a scale on Q and K would move above their
    # Transposes, out of the attention pattern) and before reduce_mean_to_global_pool (which
    # would take a LayerNorm's ReduceMean over the last two axes of a 4-D tensor).
    # The Attention kernel (brgemm tiles, online softmax) beats the MatMul/Softmax/MatMul it
    # replaces (0.7-0.9x its time at S=128-512, 1 and 2 threads).
    P("recognize_gelu", dce_after=True, modes=("fusion",)),
    # After GELU / SiLU are one op each: Phi-3's gate-and-up projection split by a Split
    # becomes two MatMuls, whose gate then takes the activation and the product as
    # post-ops, as Llama's separate projections do.
    P("split_gated_projection", dce_after=True, modes=("fusion",)),
    P("recognize_layer_norm", dce_after=True, modes=("fusion",)),
    # PyTorch's GroupNorm (Reshape / InstanceNormalization / Reshape / Mul / Add) as one op
    # that runs on N16CX, so the CNN around it stays blocked.
    P("recognize_group_norm", dce_after=True, modes=("fusion",)),
    # A residual Add into the norm: one pass over each row (the sum written only when read).
    P("recognize_add_layer_norm", modes=("fusion",)),
    P("recognize_attention", dce_after=True, modes=("fusion",)),
    # Sinking brings transposes together; combining then cancels them.
    P("sink_transposes", "fixed_point"),
    P("optimize_transposes", "fixed_point", dce_after=True),
    # optimize_transposes turns data-free Transposes into Reshapes: merge them with their
    # neighbours (else a saved optimised model merges them on reload).
    P("merge_reshapes", "fixed_point", dce_after=True),
    P("optimize_concats", "fixed_point", dce_after=True),
    P("reduce_mean_to_global_pool"),
    P("swap_relu_maxpool"),
    # oneDNN Graph-style recognition of multi-node spellings as one op (reference/004).
    P("recognize_channel_shuffle", dce_after=True),
    P("fold_into_batchnorm", "fixed_point", modes=("fusion",)),
    # After constant folding: weights and BatchNormalization statistics built by constant
    # subgraphs are plain constants by now.  A fold can expose another (Conv-BN-Mul), hence
    # fixed point.  Before the engine's post-op fusion, which then finds Conv -> Relu.
    P("fold_into_conv", "fixed_point", modes=("fusion",)),
    # Folding leaves its inputs (shape constants, the weights replaced by folded ones)
    # unread.
    P("fold_into_gemm", "fixed_point", dce_after=True, modes=("fusion",)),
    # After the folds into Conv (a BN after a grouped conv is in its W and B by then) and
    # before the activation after the Concat moves onto the per-group convs.
    P("split_grouped_conv", dce_after=True, modes=("fusion",)),
    # The 3-D projections fold_into_gemm leaves as MatMul + Add: one node, so the engine can
    # fuse the activation after them.
    P("fuse_matmul_bias", dce_after=True, modes=("fusion",)),
    # Again, now into those MatMulBias nodes: a scale after the bias (BART's and Whisper's
    # query projection times 1/sqrt(d)) goes into W and b, and pack_qkv sees three plain
    # projections of one input.
    P("fold_into_gemm", "fixed_point", dce_after=True, modes=("fusion",)),
    # A Gather of a few rows (a classifier's class token) moved above the row-wise ops that
    # compute them, so the last layer computes those rows only; before pack_qkv, so that
    # layer's queries are projected apart from its keys and values.
    P("gather_rows_early", "fixed_point", dce_after=True),
    # Self-attention's Q, K, V from one packed tensor: the Split after GPT-2's one
    # projection goes, BERT's and ViT's three projections become one GEMM.
    P("pack_qkv", dce_after=True, modes=("fusion",)),
    # An activation after a Concat moves onto the Concat's parts, where post-op fusion puts
    # it in their producers' epilogues (fixed point: a chain of activations moves one by one).
    P("hoist_activations_above_concat", "fixed_point", modes=("fusion",)),
    # Likewise above a Reshape (SegFormer's Mix-FFN: depthwise Conv, Reshape, GELU).
    P("hoist_activations_above_reshapes", "fixed_point", modes=("fusion",)),
    # Last: runs of element-wise nodes the recognizers and folds left, as one pass over
    # memory each (oneDNN Graph's unary/binary chains, reference/004).  A lone activation
    # after a Conv/Gemm/MatMul stays for the engine's post-op fusion.
    P("fuse_eltwise_chains", modes=("fusion",)),
)


def as_config(entry):
    """A pipeline entry from a PassConfig, a (pass, convergence[, dce_after]) tuple or a
    YAML-style dict {pass, convergence, dce_after, modes}."""
    if isinstance(entry, PassConfig):
        return entry
    if isinstance(entry, str):
        return PassConfig(entry)
    if isinstance(entry, (tuple, list)) and 1 <= len(entry) <= 3:
        return PassConfig(*entry)
    if isinstance(entry, dict):
        unknown = sorted(set(entry) - {"pass", "convergence", "dce_after", "modes"})
        if "pass" not in entry or unknown:
            raise PplError(f"pass pipeline entry {entry!r}: needs a 'pass' key and may have "
                           f"'convergence', 'dce_after', 'modes'"
                           + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
        # PassConfig checks the modes (a name, or a list of names) and makes them a set.
        return PassConfig(entry["pass"], entry.get("convergence", "once"),
                          entry.get("dce_after", False), entry.get("modes", MODES))
    raise PplError(f"pass pipeline entry {entry!r}: expected a pass id, a (pass, convergence"
                   f"[, dce_after]) tuple or a {{pass, convergence, dce_after, modes}} mapping")


def load_pipeline(source):
    """A pipeline from a YAML file path, or from a list of entries (see ``as_config``)."""
    if isinstance(source, (list, tuple)):
        return tuple(as_config(e) for e in source)
    if not isinstance(source, (str, os.PathLike)):  # an int would be read as a file descriptor
        raise PplError(f"passes must be a YAML file's path or a list of entries, got "
                       f"{type(source).__name__} {source!r}")
    try:
        with open(source, encoding="utf-8") as f:
            entries = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PplError(f"cannot read pass pipeline {str(source)!r}: {exc}") from exc
    if not isinstance(entries, list):
        raise PplError(f"pass pipeline {str(source)!r} must be a YAML list of entries like "
                       f"{{pass: constant_folding, convergence: fixed_point}}")
    return tuple(as_config(e) for e in entries)


@dataclass
class PassRecord:
    """What one pipeline entry did: rounds run, changes reported, nodes before and after,
    and the pass's own account (``details``: e.g. {"folded Shape": 3})."""

    pass_id: str
    rounds: int = 0
    changes: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    details: Counter = field(default_factory=Counter)

    def describe(self):
        text = (f"{self.pass_id}: {self.changes} change(s) in {self.rounds} round(s), "
                f"{self.nodes_before} -> {self.nodes_after} nodes")
        if self.details:
            text += "; " + ", ".join(f"{what} {n}" for what, n in sorted(self.details.items()))
        return text


class PassManager:
    def __init__(self, pipeline=DEFAULT_PIPELINE):
        self.pipeline = load_pipeline(pipeline)
        self.log = []  # PassRecord per entry run, in order

    def run(self, graph, ctx, on_pass=None):
        """Run every entry enabled in ``ctx``'s mode; ``on_pass(pass_id, graph)`` after
        each.  Returns the graph."""
        mode = "fusion" if ctx.fusion else "no_fusion"
        for entry in self.pipeline:
            if mode not in entry.modes:
                continue
            self._run_entry(entry.pass_id, entry.convergence, graph, ctx)
            if entry.dce_after:
                self._run_entry(DeadCodeElimination.name, "once", graph, ctx)
            if on_pass is not None:
                on_pass(entry.pass_id, graph)
        return graph

    def _run_entry(self, pass_id, convergence, graph, ctx):
        pass_ = PASSES[pass_id]()
        record = PassRecord(pass_id, nodes_before=len(graph))
        while True:
            changes = pass_.run(graph, ctx)
            record.rounds += 1
            record.changes += changes
            if convergence == "once" or changes == 0 or record.rounds >= MAX_FIXED_POINT_ROUNDS:
                break
        if record.changes:
            graph.topological_sort()  # rewrites append their new nodes at the end
        record.nodes_after = len(graph)
        record.details.update(getattr(pass_, "details", None) or {})
        self.log.append(record)
        return record
