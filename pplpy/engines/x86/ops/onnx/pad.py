"""Pad's op context: y = numpy.pad(x, pads, mode) for any element type; negative pads crop.

Modes constant, reflect, edge and (from opset 19) wrap.  Before opset 11 ``pads`` (opset 1:
``paddings``) and the float ``value`` are attributes; from 11 ``pads`` is an int64 input,
``constant_value`` an optional scalar input of x's type, and from 18 ``axes`` an optional
input naming the axes ``pads`` covers.  ``pads`` and ``axes`` decide the output shape and must
be known when the plan is made; ``constant_value`` is read by the step when it runs.

The kernel is a table copy: for each output dim a table gives the source index along it (or
-1 for the constant), built with numpy.pad on an index range, so every mode is one step and
no index outside x is ever read.  An N16CX input padded on spatial axes only stays blocked
(the channel blocks and lanes copy through; padded pixels get the constant in every lane).
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, ints_of, parse_with
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import PplError
from pplpy.models.onnx.registry import attribute_values
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import PadParam

MODES = ("constant", "reflect", "edge", "wrap")


def parse_pad_v1(node_proto, opset):
    """Pad-1 names its pads ``paddings``."""
    values = attribute_values(node_proto)
    if "paddings" in values:
        values["pads"] = values.pop("paddings")
    return PadParam(**values)


class PadKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        values = [s.array if s is not None else None for s in io.inputs]
        pads = self.op.pads([s.shape.dims if s else None for s in io.inputs], values)
        mode = self.op.mode()
        dims = list(x.shape.dims)
        es = x.shape.data_type.itemsize
        keep = []
        if len(io.inputs) > 2 and io.inputs[2] is not None and io.inputs[2].shape.element_count:
            value = io.inputs[2].address  # read when the step runs
        else:
            fill = np.zeros(1, x.shape.data_type.numpy)
            if self.node.opset < 11:
                fill[0] = self.param.value
            keep.append(fill)
            value = fill.ctypes.data
        if x.shape.data_format is DataFormat.N16CX:
            dims = list(x.shape.physical_dims)
            pads = pads[:2] + pads[2:] + [(0, 0)]
        try:
            tables = [_copy.pad_table(d, b, e, mode) for d, (b, e) in zip(dims, pads)]
        except ValueError as exc:
            raise self.op.shape_error(str(exc), io.input_shapes) from exc
        step = _copy.make_pad_step(y.address, x.address, value, es, dims, tables)
        step.keep = (step.keep, keep, keep_arrays(io))
        return step


@op("", "Pad", since=1, param=PadParam, parse=parse_pad_v1)  # paddings, value attributes
@op("", "Pad", since=2, param=PadParam, parse=parse_with(PadParam))  # pads, value attributes
@op("", "Pad", since=11, param=PadParam, parse=parse_with(PadParam))  # pads, value inputs
@op("", "Pad", since=18, param=PadParam, parse=parse_with(PadParam))  # axes input
@op("", "Pad", since=19, param=PadParam, parse=parse_with(PadParam))  # wrap mode
class PadOp(X86OptKernel):
    """y = numpy.pad(x, pads, mode, constant_values=value)."""

    supported_types = ANY_TYPE
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    value_inputs = (1, 3)

    def mode(self):
        mode = self.param.mode if self.param is not None else "constant"
        if mode not in MODES or (mode == "wrap" and self.node.opset < 19):
            raise self.unsupported(f'mode "{mode}" is not one of {MODES[:3]}'
                                   + (' or "wrap" (opset 19+)' if self.node.opset >= 19 else ""))
        return mode

    def infer_type(self, in_types):
        self.mode()
        if self.node.opset >= 11:
            check_index_type(self, in_types, 1, "pads", (DataType.INT64,))
            check_index_type(self, in_types, 3, "axes")
            if self.input_present(2) and in_types[2] is not in_types[0]:
                raise self.shape_error(f"constant_value must have the data's type "
                                       f"{in_types[0]}, got {in_types[2]}", [])
        return super().infer_type(in_types)[:1]

    def pads(self, in_shapes, in_values):
        """[(begin, end)] for every dim of x."""
        rank = len(in_shapes[0])
        if self.node.opset < 11:
            if self.param is None or self.param.pads is None:
                raise self.shape_error('attribute "pads" is required', in_shapes)
            pads = list(self.param.pads)
            axes = list(range(rank))
        else:
            pads = ints_of(self, in_shapes, in_values, 1, "pads")
            if self.node.opset >= 18 and self.input_present(3):
                try:
                    axes = [normalize_axis(a, rank) for a in
                            ints_of(self, in_shapes, in_values, 3, "axes")]
                except ValueError as exc:
                    raise self.shape_error(str(exc), in_shapes) from exc
            else:
                axes = list(range(rank))
        if len(pads) != 2 * len(axes):
            raise self.shape_error(f"pads {pads} must hold 2 values per padded axis "
                                   f"({len(axes)})", in_shapes)
        out = [(0, 0)] * rank
        for i, a in enumerate(axes):
            out[a] = (pads[i], pads[i + len(axes)])
        return out

    def infer_shape(self, in_shapes, in_values):
        pads = self.pads(in_shapes, in_values)
        dims = tuple(d + b + e for d, (b, e) in zip(in_shapes[0], pads))
        if any(d < 0 for d in dims):
            raise self.shape_error(f"pads {pads} crop more than the input holds", in_shapes)
        mode = self.mode()
        if mode != "constant":
            for d, (b, e) in zip(in_shapes[0], pads):
                if d == 0 and (b > 0 or e > 0):
                    raise self.shape_error(f"{mode} padding of an empty dim", in_shapes)
        return [dims]

    def select_format(self, in_formats, in_shapes):
        """N16CX when a blocked input is padded on spatial axes only (known pads)."""
        n = len(in_formats)
        plain = [DataFormat.NDARRAY] * n, [DataFormat.NDARRAY]
        dims = in_shapes[0]
        if in_formats[0] is not DataFormat.N16CX or dims is None or len(dims) < 3:
            return plain
        try:
            pads = self.pads(in_shapes, [self.constant(i) for i in range(n)])
        except (PplError, ValueError, TypeError):
            return plain
        if pads[0] != (0, 0) or pads[1] != (0, 0):
            return plain
        return [DataFormat.N16CX] + [DataFormat.NDARRAY] * (n - 1), [DataFormat.N16CX]

    def create_kernel(self):
        return PadKernel(self)
