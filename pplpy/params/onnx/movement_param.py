"""Attributes of the data-movement and index ops: Split, Pad, DepthToSpace, SpaceToDepth,
Cast, CastLike, OneHot, Trilu, EyeLike, ReverseSequence, GatherElements, GatherND, ScatterND,
ScatterElements, TopK and Range.  Ops whose attributes changed between opsets keep one class
for every encoding and parse it with a function that knows the opset (``parse=`` in the op's
declaration); attributes an opset lacks keep their ONNX defaults."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SplitParam:
    """``split`` is an attribute before 13 (an input from 13); ``num_outputs`` from 18."""

    axis: int = 0
    split: tuple | None = None
    num_outputs: int | None = None


@dataclass(frozen=True, slots=True)
class PadParam:
    """Before 11, ``pads`` (``paddings`` in opset 1) and ``value`` are attributes; from 11
    they are inputs and only ``mode`` is left."""

    mode: str = "constant"
    pads: tuple | None = None
    value: float = 0.0


@dataclass(frozen=True, slots=True)
class DepthToSpaceParam:
    """``mode`` (DCR or CRD) from DepthToSpace-11 and SpaceToDepth-28; DCR before."""

    blocksize: int
    mode: str = "DCR"


@dataclass(frozen=True, slots=True)
class CastParam:
    """``to`` is a type name (a string) in Cast-1 and a TensorProto number after;
    ``saturate`` (19) and ``round_mode`` (24) only matter for float8/float4 targets."""

    to: int | None = None
    saturate: int = 1
    round_mode: str = "up"


@dataclass(frozen=True, slots=True)
class OneHotParam:
    axis: int = -1


@dataclass(frozen=True, slots=True)
class TriluParam:
    upper: int = 1


@dataclass(frozen=True, slots=True)
class EyeLikeParam:
    dtype: int | None = None  # None: the input's type
    k: int = 0


@dataclass(frozen=True, slots=True)
class ReverseSequenceParam:
    batch_axis: int = 1
    time_axis: int = 0


@dataclass(frozen=True, slots=True)
class GatherElementsParam:
    axis: int = 0


@dataclass(frozen=True, slots=True)
class GatherNDParam:
    batch_dims: int = 0


@dataclass(frozen=True, slots=True)
class ScatterParam:
    """ScatterND and ScatterElements: ``reduction`` from 16 (none/add/mul), max/min from 18;
    ``axis`` is ScatterElements' only."""

    axis: int = 0
    reduction: str = "none"


@dataclass(frozen=True, slots=True)
class TopKParam:
    """``k`` is an attribute before 10 (an input from 10); largest and sorted from 11."""

    axis: int = -1
    k: int | None = None
    largest: int = 1
    sorted: int = 1


@dataclass(frozen=True, slots=True)
class RangeParam:
    """Range-27's ``stash_type`` (precision of the float arithmetic) does not change pplpy's
    results, which follow numpy.arange in the output type."""

    stash_type: int = 1
