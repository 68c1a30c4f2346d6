"""Helpers the spatial sampling op files (GridSample, AffineGrid, Col2Im, DeformConv) share:
input type checks and the sliding-window geometry.  No op is declared here."""

from pplpy.common.data_type import DataType
from pplpy.oputils.onnx.pool_geometry import pool_window

# Family of the compiled kernels (impls/_spatial_fp32.pxi), one module per ISA tier.
SPATIAL_FAMILY = "spatial_fp32"


def check_float32(op, in_types, names):
    """Every present input listed in ``names`` (index -> ONNX input name) must be float32:
    the kernels compute in float32 only."""
    for index, name in names.items():
        if op.input_present(index) and in_types[index] is not DataType.FLOAT32:
            raise op.unsupported(f"input {index} ({name}) is {in_types[index]}; pplpy runs "
                                 f"{op.node.op_type} on float32 only")


def window(op, in_shapes, spatial, kernel, param):
    """The PoolWindow (output size, kernel, strides, pads, dilations) of a window of
    ``kernel`` sliding over ``spatial`` with the param's strides, dilations and pads, or a
    ShapeError naming the node."""
    try:
        return pool_window(spatial, kernel, param.strides, param.dilations, param.pads,
                           "NOTSET")
    except ValueError as exc:
        raise op.shape_error(str(exc), in_shapes) from exc
