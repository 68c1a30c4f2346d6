"""Canned inference and format functions that many op contexts share.

Assign them as class attributes::

    class ReluOp(X86OptKernel):
        infer_shape = same_shape_as_input
        select_format = follow_input_format
"""

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.oputils.onnx.shape_functions import broadcast_shapes

NUMERIC_TYPES = (DataType.FLOAT32, DataType.INT32, DataType.INT64)
ANY_TYPE = tuple(DataType)


def same_shape_as_input(op, in_shapes, in_values):
    """Every output has input 0's shape."""
    return [in_shapes[0]] * len(op.node.outputs)


def broadcast_inputs_shape(op, in_shapes, in_values):
    """numpy broadcasting of all present inputs."""
    try:
        return [broadcast_shapes(*[s for s in in_shapes if s is not None])]
    except ValueError as exc:
        raise op.shape_error(str(exc), in_shapes) from exc


def ndarray_only(op, in_formats, in_shapes):
    return [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY] * len(op.node.outputs)


def follow_input_format(op, in_formats, in_shapes):
    """Input 0 stays in whatever format it arrives in (NDARRAY or N16CX); the outputs take
    that format; other inputs are read as NDARRAY."""
    fmt = in_formats[0]
    if fmt is DataFormat.N16CX and (in_shapes[0] is None or len(in_shapes[0]) < 2):
        fmt = DataFormat.NDARRAY
    wanted = [fmt] + [DataFormat.NDARRAY] * (len(in_formats) - 1)
    return wanted, [fmt] * len(op.node.outputs)
