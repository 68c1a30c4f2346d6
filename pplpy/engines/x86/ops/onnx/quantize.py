"""QuantizeLinear and DequantizeLinear (opsets 10, 13, 19, 21, 23, ...): linear (de)quantization.

    QuantizeLinear     y = saturate(round_half_even(x / y_scale) + y_zero_point)
    DequantizeLinear   y = (x - x_zero_point) * x_scale

The scale is per tensor (a scalar or one value) or, from opset 13, per axis (a 1-D tensor
along ``axis``).  The integer side is int8, uint8, int16 or uint16 (int32 for
DequantizeLinear); the float side float32.  Blocked quantization (``block_size``), the
float8/int4/int2/float4 types and other float precisions raise UnsupportedOpError.  One
compiled step (``_quantize``).
"""

import math


from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _quantize
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import DequantizeLinearParam, QuantizeLinearParam

_QUANT_TYPES = (DataType.INT8, DataType.UINT8, DataType.INT16, DataType.UINT16)
_DEQUANT_TYPES = _QUANT_TYPES + (DataType.INT32,)


class QuantizeKernel(X86Kernel):
    def __init__(self, op_ctx, quantize):
        super().__init__(op_ctx)
        self.quantize = quantize

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, scale, y = io.inputs[0], io.inputs[1], io.outputs[0]
        zp = io.inputs[2] if len(io.inputs) > 2 else None
        dims = tuple(x.shape.dims)
        count = scale.shape.element_count
        if count == 1:
            outer, c, inner = 1, 1, math.prod(dims)
        else:
            axis = normalize_axis(getattr(self.param, "axis", 1), len(dims))
            outer, c, inner = math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:])
        keep = [x.array, scale.array, y.array] + ([zp.array] if zp is not None else [])
        if self.quantize:
            qtype, fx, q = y.shape.data_type, x.address, y.address
        else:
            qtype, fx, q = x.shape.data_type, y.address, x.address
        return _quantize.make_quantize_step(
            self.quantize, qtype.numpy, fx, q, scale.address,
            zp.address if zp is not None else 0, outer, c, inner, tuple(keep))


class _LinearQuantOp(X86OptKernel):
    quantize = True

    def _check_block(self):
        if getattr(self.param, "block_size", 0):
            raise self.unsupported(f"block_size={self.param.block_size}: blocked "
                                   "quantization is not supported (per tensor and per axis are)")

    def infer_shape(self, in_shapes, in_values):
        x, scale = tuple(in_shapes[0]), tuple(in_shapes[1])
        zp = in_shapes[2] if len(in_shapes) > 2 else None
        count = math.prod(scale)
        if len(scale) > 1 or (len(scale) == 1 and count != 1 and self.node.opset < 13):
            raise self.shape_error("the scale must be a scalar (or, from opset 13, 1-D per "
                                   "axis); blocked scales are not supported", in_shapes)
        if count != 1:
            try:
                axis = normalize_axis(getattr(self.param, "axis", 1), len(x))
            except ValueError as exc:
                raise self.shape_error(str(exc), in_shapes) from exc
            if count != x[axis]:
                raise self.shape_error(f"the per-axis scale has {count} values, axis {axis} of "
                                       f"x {x[axis]}", in_shapes)
        if zp is not None and tuple(zp) != scale and math.prod(zp) != count:
            raise self.shape_error("the zero point must have the scale's shape", in_shapes)
        return [x]

    def create_kernel(self):
        return QuantizeKernel(self, self.quantize)


@op("", "QuantizeLinear", since=10, param=QuantizeLinearParam)
class QuantizeLinearOp(_LinearQuantOp):
    """float32 -> int8/uint8/int16/uint16, per tensor or per axis; NDARRAY."""

    def infer_type(self, in_types):
        p = self.param
        self._check_block()
        if in_types[0] is not DataType.FLOAT32 or in_types[1] is not DataType.FLOAT32:
            raise self.unsupported(f"x {in_types[0]} and y_scale {in_types[1]}: pplpy's "
                                   "QuantizeLinear takes float32 x and scale")
        if p.precision not in (0, DataType.FLOAT32.value):
            raise self.unsupported(f"precision={p.precision}: pplpy computes in float32 only")
        out = in_types[2] if len(in_types) > 2 and self.input_present(2) else None
        if p.output_dtype:
            wanted = DataType.from_onnx(p.output_dtype)
            if out is not None and wanted is not out:
                raise self.unsupported(f"output_dtype={p.output_dtype} differs from the zero "
                                       f"point's type {out}")
            out = wanted
        if out is None:
            out = DataType.UINT8
        if out not in _QUANT_TYPES:
            name = out if out is not None else f"ONNX type {p.output_dtype}"
            raise self.unsupported(f"quantizing to {name}: pplpy quantizes to int8, uint8, "
                                   "int16 and uint16")
        return [out]


@op("", "DequantizeLinear", since=10, param=DequantizeLinearParam)
class DequantizeLinearOp(_LinearQuantOp):
    """int8/uint8/int16/uint16/int32 -> float32, per tensor or per axis; NDARRAY."""

    quantize = False

    def infer_type(self, in_types):
        p = self.param
        self._check_block()
        if in_types[0] not in _DEQUANT_TYPES:
            raise self.unsupported(f"x is {in_types[0]}: pplpy dequantizes int8, uint8, int16, "
                                   "uint16 and int32")
        if in_types[1] is not DataType.FLOAT32:
            raise self.unsupported(f"x_scale is {in_types[1]}: pplpy dequantizes to float32")
        if len(in_types) > 2 and self.input_present(2) and in_types[2] is not in_types[0]:
            raise self.unsupported(f"x_zero_point is {in_types[2]}, x {in_types[0]}")
        if p.output_dtype not in (0, DataType.FLOAT32.value):
            raise self.unsupported(f"output_dtype={p.output_dtype}: pplpy dequantizes to "
                                   "float32 (the scale's type)")
        return [DataType.FLOAT32]


