"""The pass manager runs an explicit, ordered pipeline of passes.

A pipeline is data: a list of ``(pass name, mode)`` where mode is "once" or
"fixed_point" (repeat until the pass reports no change), as Glow's pass configs are.
Users may supply their own pipeline as a YAML file::

    - {pass: constant_to_initializer, mode: once}
    - {pass: constant_folding, mode: fixed_point}
"""

import yaml

from pplpy.errors import PplError
from pplpy.optimizer.passes.basic_rules import (
    ConstantToInitializer,
    RemoveIdentity,
    RemoveInferenceDropout,
)
from pplpy.optimizer.passes.constant_folding import ConstantFolding
from pplpy.optimizer.passes.dead_code_elimination import DeadCodeElimination
from pplpy.optimizer.passes.fold_into_conv import FoldIntoConv, FoldIntoGemm

PASSES = {
    cls.name: cls
    for cls in (
        ConstantToInitializer,
        RemoveIdentity,
        RemoveInferenceDropout,
        DeadCodeElimination,
        ConstantFolding,
        FoldIntoConv,
        FoldIntoGemm,
    )
}

DEFAULT_PIPELINE = (
    # Constants first, so folding sees Constant nodes' values as graph constants.
    ("constant_to_initializer", "once"),
    ("remove_identity", "fixed_point"),
    ("remove_inference_dropout", "once"),
    # DCE before folding: never compute constants nobody reads.
    ("dead_code_elimination", "once"),
    ("constant_folding", "fixed_point"),
    # After constant folding: weights and BatchNormalization statistics built by constant
    # subgraphs are plain constants by now.  A fold can expose another (Conv-BN-Mul), hence
    # fixed point.  Before the engine's post-op fusion, which then finds Conv -> Relu.
    ("fold_into_conv", "fixed_point"),
    ("fold_into_gemm", "fixed_point"),
    # Folding leaves its inputs (shape constants, the weights replaced by folded ones)
    # unread.
    ("dead_code_elimination", "once"),
)

MAX_FIXED_POINT_ROUNDS = 100


def load_pipeline(path):
    """Read a YAML pipeline: a list of {pass: name, mode: once|fixed_point}."""
    try:
        with open(path) as f:
            entries = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise PplError(f"cannot read pass pipeline {path!r}: {exc}") from exc
    if not isinstance(entries, list):
        raise PplError(f"pass pipeline {path!r} must be a YAML list of {{pass, mode}} entries")
    pipeline = []
    for entry in entries:
        if not isinstance(entry, dict) or "pass" not in entry:
            raise PplError(f"pass pipeline {path!r}: entry {entry!r} needs a 'pass' key")
        pipeline.append((entry["pass"], entry.get("mode", "once")))
    check_pipeline(pipeline)
    return tuple(pipeline)


def check_pipeline(pipeline):
    for name, mode in pipeline:
        if name not in PASSES:
            raise PplError(f"unknown pass {name!r}; known passes: {sorted(PASSES)}")
        if mode not in ("once", "fixed_point"):
            raise PplError(f"pass {name!r}: mode must be 'once' or 'fixed_point', got {mode!r}")


class PassManager:
    def __init__(self, pipeline=DEFAULT_PIPELINE):
        check_pipeline(pipeline)
        self.pipeline = tuple(pipeline)
        self.log = []  # (pass name, changes) per run, for --dump-graph and tests
        # (pass name, {what: count}) per run of a pass that says what it changed (the folds:
        # "BatchNormalization->Conv": 20).
        self.details = []

    def run(self, graph, ctx):
        for name, mode in self.pipeline:
            pass_ = PASSES[name]()
            rounds = 0
            while True:
                changes = pass_.run(graph, ctx)
                self.log.append((name, changes))
                folded = getattr(pass_, "folded", None)
                if changes and folded:
                    self.details.append((name, dict(folded)))
                    folded.clear()
                rounds += 1
                if mode == "once" or changes == 0 or rounds >= MAX_FIXED_POINT_ROUNDS:
                    break
        return graph
