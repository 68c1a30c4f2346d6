"""Cast and CastLike: y = x converted to another element type, as one compiled step.

float32/64, int8-64, uint8-64 and bool, any pair; float -> int truncates toward zero, any ->
bool is x != 0 (see impls/_cast.pyx for out-of-range values).  Types pplpy has no kernel
for (float16, bfloat16, the float8/float4/int4 families, strings) are an UnsupportedOpError;
so ``saturate`` (19+) and ``round_mode`` (24+), which only concern float8/float4 targets,
never change a result pplpy computes.
"""

import dataclasses

from onnx import TensorProto

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _cast
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import parse_with
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ModelError
from pplpy.models.onnx.registry import attribute_values
from pplpy.params.onnx import CastParam

CAST_TYPES = tuple(DataType(code) for code in _cast.SIZES)


def parse_cast(node_proto, opset):
    """``to`` is a type name such as "FLOAT" in Cast-1, a TensorProto number later."""
    values = attribute_values(node_proto)
    to = values.get("to")
    if isinstance(to, str):
        try:
            values["to"] = TensorProto.DataType.Value(to.upper())
        except ValueError as exc:
            raise ModelError(f'node "{node_proto.name}" (Cast): unknown type name "{to}"') from exc
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(CastParam)})
    if unknown:
        raise ModelError(f'node "{node_proto.name}" (Cast): attribute(s) {unknown} are not '
                         f"supported by pplpy")
    return CastParam(**values)


class CastKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        step = _cast.make_cast_step(y.address, x.address, y.shape.element_count,
                                    x.shape.data_type.value, y.shape.data_type.value)
        step.keep = keep_arrays(io)
        return step


class CastBase(X86OptKernel):
    supported_types = ANY_TYPE
    formats = (DataFormat.NDARRAY,)

    def check(self, source, target, target_code):
        for what, t, code in (("input", source, None), ("target", target, target_code)):
            if t not in CAST_TYPES:
                name = str(t)
                if t is None and code is not None:
                    try:
                        name = TensorProto.DataType.Name(code)
                    except ValueError:  # not an ONNX type number at all
                        name = f"{code} (not an ONNX TensorProto type)"
                raise self.unsupported(f"{what} type {name} is not supported (pplpy casts "
                                       f"between {', '.join(str(c) for c in CAST_TYPES)})")
        return [target]

    def infer_shape(self, in_shapes, in_values):
        return [in_shapes[0]]

    def create_kernel(self):
        return CastKernel(self)


@op("", "Cast", since=1, param=CastParam, parse=parse_cast)  # to: a type name
@op("", "Cast", since=6, param=CastParam, parse=parse_cast)  # to: a TensorProto number
@op("", "Cast", since=19, param=CastParam, parse=parse_cast)  # saturate (float8)
@op("", "Cast", since=24, param=CastParam, parse=parse_cast)  # round_mode (float8/float4)
class CastOp(CastBase):
    """y = x as type ``to``."""

    def infer_type(self, in_types):
        to = self.param.to if self.param is not None else None
        if to is None:
            raise self.unsupported('attribute "to" is required')
        return self.check(in_types[0], DataType.from_onnx(to), to)


@op("", "CastLike", since=15)
@op("", "CastLike", since=19, param=CastParam, parse=parse_with(CastParam))  # saturate
@op("", "CastLike", since=24, param=CastParam, parse=parse_with(CastParam))  # round_mode
class CastLikeOp(CastBase):
    """y = x as the type of ``target_type``."""

    def infer_type(self, in_types):
        return self.check(in_types[0], in_types[1] if len(in_types) > 1 else None, None)
