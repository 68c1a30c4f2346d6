"""Params of the control-flow ops.  The body fields hold pplpy Graphs: the model parser
parses each GRAPH attribute into the field of the same name (the generic parse fills the
other attributes).  Graphs compare by identity, so two control-flow nodes are never merged
by CSE unless they share a body."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IfParam:
    then_branch: object = None
    else_branch: object = None


@dataclass(frozen=True, slots=True)
class LoopParam:
    body: object = None


@dataclass(frozen=True, slots=True)
class Scan8Param:
    """Scan 8: a batch axis 0 on every input, the scan axis 1, optional sequence_lens."""

    num_scan_inputs: int
    body: object = None
    directions: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ScanParam:
    """Scan 9 and later: no batch axis; per-input and per-output scan axes and directions."""

    num_scan_inputs: int
    body: object = None
    scan_input_axes: tuple[int, ...] | None = None
    scan_input_directions: tuple[int, ...] | None = None
    scan_output_axes: tuple[int, ...] | None = None
    scan_output_directions: tuple[int, ...] | None = None
