"""Helpers the data-movement and index op files share: reading small value inputs (a pad
list, a depth, k) and checking index types.  No op is declared here."""

import math

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.errors import ShapeError
from pplpy.models.onnx.registry import generic_parse

INDEX_TYPES = (DataType.INT32, DataType.INT64)
# Lane runs per N16CX output block above which a float channel map runs as permutes.
FRAGMENTED_RUNS = 2
# Element types the typed kernels (cast, reductions, comparisons) handle.
NUMERIC_TYPES = (DataType.FLOAT32, DataType.FLOAT64, DataType.INT8, DataType.UINT8,
                 DataType.INT16, DataType.UINT16, DataType.INT32, DataType.UINT32,
                 DataType.INT64, DataType.UINT64)


def parse_with(param_cls):
    """A parse function filling ``param_cls`` from whatever attributes this opset has (one
    param class across several encodings; see params/onnx/movement_param.py)."""

    def parse(node_proto, opset):
        return generic_parse(param_cls, node_proto)

    parse.__name__ = f"parse_{param_cls.__name__}"
    return parse


def check_index_type(op, in_types, index, what, allowed=INDEX_TYPES):
    if op.input_present(index) and in_types[index] not in allowed:
        names = " or ".join(str(t) for t in allowed)
        raise ShapeError(f"{op.node.describe()}: input {index} ({what}) must be {names}, got "
                         f"{in_types[index]}")


def value_of(op, in_values, index, what):
    """The value of input ``index`` known when the plan is made, or a ValueRequired error."""
    value = in_values[index] if index < len(in_values) else None
    if value is None:
        raise op.value_required(index, what)
    return value


def scalar_of(op, in_shapes, in_values, index, what):
    """A one-element input (rank 0, or [1]) as a Python number."""
    value = value_of(op, in_values, index, what)
    if value.size != 1:
        raise op.shape_error(f"input {index} ({what}) must hold one value, got shape "
                             f"{list(value.shape)}", in_shapes)
    return value.reshape(-1)[0].item()


def ints_of(op, in_shapes, in_values, index, what):
    value = value_of(op, in_values, index, what)
    if value.ndim != 1:
        raise op.shape_error(f"input {index} ({what}) must be 1-D, got shape "
                             f"{list(value.shape)}", in_shapes)
    return [int(v) for v in value]


def prod(dims):
    return math.prod(dims)


def contiguous_strides(dims, es):
    strides, s = [0] * len(dims), es
    for k in range(len(dims) - 1, -1, -1):
        strides[k] = s
        s *= dims[k]
    return strides


def n16cx_channel_step(kernel, y, x, sources):
    """Step: channel c of the N16CX slot ``y`` = channel ``sources[c]`` of the N16CX slot
    ``x`` (a channel slice, a split part, a shuffle), without leaving the blocked layout.

    A float map whose output blocks break into many lane runs (a shuffle, a strided slice:
    runs of one lane) runs as per-pixel permutes where ``kernel``'s ISA has them (AVX-512:
    2-3x faster on ShuffleNet's shuffles); long runs (a split or slice off the 16-lane
    grid), other element sizes and the lane-by-lane tiers (measured no faster) stay with
    _copy's lane-run copies."""
    dims = x.shape.dims
    es, batch, pixels = x.shape.data_type.itemsize, dims[0], prod(dims[2:])
    sources = [(0, c) for c in sources]
    permutes = kernel.impl("chmap_fp32") if es == 4 else None
    if permutes is not None and permutes.PERMUTES and fragmented(sources):
        step = permutes.make_channel_map_fp32_step(y.address, [x.address], [dims[1]],
                                                   sources, batch, pixels)
    else:
        step = _copy.make_channel_map_n16cx_step(y.address, [x.address], [dims[1]], sources,
                                                 batch, pixels, es)
    step.keep = (step.keep, x.array, y.array)
    return step


def fragmented(sources):
    """True when a channel map's output blocks average more than FRAGMENTED_RUNS lane runs:
    then a permute per source block beats a copy per run."""
    runs = _copy.n16cx_lane_runs(sources)
    return sum(len(r) for r in runs) > FRAGMENTED_RUNS * len(runs)
