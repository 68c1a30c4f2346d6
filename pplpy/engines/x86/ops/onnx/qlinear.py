"""Integer and quantized linear ops: MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv
and DynamicQuantizeLinear.

    MatMulInteger   Y (int32) = (A - a_zero_point) @ (B - b_zero_point)
    QLinearMatMul   y = saturate(rint(((a - a_zp) @ (b - b_zp)) * a_scale * b_scale / y_scale)
                                 + y_zp)
    ConvInteger     Y (int32) = conv(x - x_zero_point, w - w_zero_point)
    QLinearConv     y = saturate(rint((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale
                                      / y_scale) + y_zp)
    DynamicQuantizeLinear  y, y_scale, y_zp = uint8 quantization of x over its range and 0

Integer data is int8 or uint8, a zero point has its tensor's type, scales are float32 (the
float16 scales QLinearMatMul-21 allows raise UnsupportedOpError).  Quantization is per
tensor, except per row of A (a scale or zero point of M values), per column of B (N values)
and per output channel of W (M values).  Products accumulate in int32 (``_quant_int``'s
GEMM); a convolution is im2col of ``x - x_zp`` (so the padding is the zero point) then one
GEMM per image and group with the weight as A.  The requantization follows onnx.reference
bit for bit: the scale ``s_a * s_b / s_y`` in float32, its product with the int32 in
float64, rounding half to even, saturation (the rounding helpers of QuantizeLinear).
1-D and 2-D convolutions; NDARRAY.
"""

import math

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _quant_int, _quantize
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.shape import keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.pool_geometry import resolve_pads
from pplpy.oputils.onnx.shape_functions import matmul_shape
from pplpy.params.onnx import ConvParam

_INT8_TYPES = (DataType.INT8, DataType.UINT8)


class _QuantOp(X86OptKernel):
    """Type and shape checks shared by the integer ops.

    ``data`` lists (input, name) of the integer tensors, ``zero_points`` (input, of which
    data input or None for the output's, name), ``scales`` the float32 scale inputs.
    """

    supported_types = _INT8_TYPES  # of the integer data (checked in infer_type)
    data = ()
    zero_points = ()
    scales = ()
    out_zero_point = None  # the input whose type is the output's (QLinear*), else int32

    def infer_type(self, in_types):
        for index, name in self.data:
            if in_types[index] not in _INT8_TYPES:
                raise self.unsupported(f"{name} is {in_types[index]}: pplpy takes int8 and "
                                       "uint8")
        for index, of, name in self.zero_points:
            given = in_types[index] if index < len(in_types) else None
            if given is None:
                continue
            want = in_types[of] if of is not None else given
            if given is not want or given not in _INT8_TYPES:
                raise self.unsupported(f"{name} is {given}: it must have its tensor's type "
                                       f"({want}), int8 or uint8")
        for index, name in self.scales:
            if in_types[index] is not DataType.FLOAT32:
                raise self.unsupported(f"{name} is {in_types[index]}: pplpy takes float32 "
                                       "scales")
        if self.out_zero_point is None:
            return [DataType.INT32]
        return [in_types[self.out_zero_point]]

    def check_counts(self, in_shapes, rules):
        """rules: (input, name, allowed element counts); absent inputs are skipped."""
        for index, name, allowed in rules:
            shape = in_shapes[index] if index < len(in_shapes) else None
            if shape is None:
                continue
            count = math.prod(shape)
            if len(shape) > 1 or count not in allowed:
                shown = " or ".join(str(a) for a in sorted(set(allowed)))
                raise self.shape_error(f"{name} must be a scalar or 1-D with {shown} "
                                       f"element(s), got shape {list(shape)}", in_shapes)

    def slot_count(self, io, index):
        slot = io.inputs[index] if index < len(io.inputs) else None
        return (slot.address, slot.shape.element_count) if slot is not None else (0, 1)


# -- MatMul ----------------------------------------------------------------------------------


class _MatMulIntegerBase(_QuantOp):
    """(a - za) @ (b - zb): inputs ``a_index``, ``b_index``; numpy matmul shapes."""

    a_index, b_index = 0, 1

    def infer_shape(self, in_shapes, in_values):
        a, b = in_shapes[self.a_index], in_shapes[self.b_index]
        try:
            out = matmul_shape(a, b)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        m = a[-2] if len(a) > 1 else 1
        n = b[-1] if len(b) > 1 else 1
        self.check_counts(in_shapes, self.count_rules(m, n))
        return [out]

    def create_kernel(self):
        return IntegerMatMulKernel(self)


class IntegerMatMulKernel(X86Kernel):
    """A GEMM step (int32, straight into Y or into a scratch accumulator) and, for
    QLinearMatMul, a requantization step; the batch dims broadcast as numpy's matmul."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        op = self.op
        a, b, y = io.inputs[op.a_index], io.inputs[op.b_index], io.outputs[0]
        a_dims, b_dims = tuple(a.shape.dims), tuple(b.shape.dims)
        a2 = (1,) + a_dims if len(a_dims) == 1 else a_dims
        b2 = b_dims + (1,) if len(b_dims) == 1 else b_dims
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        count = math.prod(batch)

        def offsets(dims, size):
            index = np.arange(math.prod(dims), dtype=np.int64).reshape(dims)
            return np.broadcast_to(index, batch).reshape(-1) * size

        requant = op.out_zero_point is not None
        acc = np.empty(count * m * n, np.int32) if requant else y.array
        za, za_count = op.slot_count(io, op.a_zero_point)
        zb, zb_count = op.slot_count(io, op.b_zero_point)
        keep = keep_arrays(io)
        steps = [_quant_int.make_igemm_step(
            a.shape.data_type.numpy, a.address, a.array.size, b.shape.data_type.numpy,
            b.address, b.array.size, acc.ctypes.data, acc.size, m, n, k,
            offsets(a2[:-2], m * k), offsets(b2[:-2], k * n),
            np.arange(count, dtype=np.int64) * (m * n), za, za_count, None, zb, zb_count,
            (keep, acc))]
        if requant:
            s_a, s_b, s_y = (io.inputs[i] for i in op.scales_abY)
            zy, _ = op.slot_count(io, op.out_zero_point)
            steps.append(_quant_int.make_requant_step(
                y.shape.data_type.numpy, acc.ctypes.data, y.address, count * m, n, m,
                s_a.address, s_a.shape.element_count, s_b.address, s_b.shape.element_count,
                s_y.address, zy, 0, (keep, acc)))
        for step in steps:
            step.label = self.node.name
        return steps if len(steps) > 1 else steps[0]


@op("", "MatMulInteger", since=10)
class MatMulIntegerOp(_MatMulIntegerBase):
    """Y (int32) = (A - a_zero_point) @ (B - b_zero_point); zero points per tensor, per row
    of A, per column of B."""

    data = ((0, "A"), (1, "B"))
    zero_points = ((2, 0, "a_zero_point"), (3, 1, "b_zero_point"))
    a_zero_point, b_zero_point = 2, 3

    def count_rules(self, m, n):
        return ((2, "a_zero_point", (1, m)), (3, "b_zero_point", (1, n)))


@op("", "QLinearMatMul", since=10)
@op("", "QLinearMatMul", since=21)  # float16/bfloat16 scales and float8 data allowed
class QLinearMatMulOp(_MatMulIntegerBase):
    """y = quantized (a @ b): a per tensor or per row, b per tensor or per column, y per
    tensor."""

    a_index, b_index = 0, 3
    data = ((0, "a"), (3, "b"))
    zero_points = ((2, 0, "a_zero_point"), (5, 3, "b_zero_point"), (7, None, "y_zero_point"))
    scales = ((1, "a_scale"), (4, "b_scale"), (6, "y_scale"))
    scales_abY = (1, 4, 6)
    a_zero_point, b_zero_point, out_zero_point = 2, 5, 7

    def count_rules(self, m, n):
        return ((1, "a_scale", (1, m)), (2, "a_zero_point", (1, m)), (4, "b_scale", (1, n)),
                (5, "b_zero_point", (1, n)), (6, "y_scale", (1,)), (7, "y_zero_point", (1,)))


# -- Conv ------------------------------------------------------------------------------------


class _ConvIntegerBase(_QuantOp):
    """conv(x - x_zp, w - w_zp), 1-D or 2-D, groups, ConvParam's attributes."""

    x_index, w_index = 0, 1

    def geometry(self, x, w):
        p = self.param
        kernel = p.kernel_shape if p.kernel_shape is not None else w[2:]
        return resolve_pads(x[2:], kernel, p.strides, p.dilations, p.pads, p.auto_pad)

    def infer_shape(self, in_shapes, in_values):
        x, w = in_shapes[self.x_index], in_shapes[self.w_index]
        group = self.param.group
        if len(x) not in (3, 4):
            raise self.unsupported(f"{len(x) - 2}-D convolution is not supported (1-D, 2-D)")
        if len(w) != len(x):
            raise self.shape_error("w must have the rank of x", in_shapes)
        if group < 1 or x[1] != w[1] * group or w[0] % group:
            raise self.shape_error(
                f"channels do not match: x has {x[1]}, w expects {w[1]} x group {group} and "
                f"its {w[0]} outputs must divide by group", in_shapes)
        p = self.param
        if p.kernel_shape is not None and tuple(p.kernel_shape) != tuple(w[2:]):
            raise self.shape_error(f"kernel_shape {list(p.kernel_shape)} differs from w's "
                                   f"{list(w[2:])}", in_shapes)
        self.check_counts(in_shapes, self.count_rules(w[0]))
        try:
            out_spatial, _, _ = self.geometry(x, w)
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc
        return [(x[0], w[0]) + tuple(out_spatial)]

    def create_kernel(self):
        return IntegerConvKernel(self)


class IntegerConvKernel(X86Kernel):
    """im2col of x - x_zp into an int32 scratch, one GEMM per (image, group) into Y or an
    accumulator, then (QLinearConv) the requantization with the bias."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        op = self.op
        x, w, y = io.inputs[op.x_index], io.inputs[op.w_index], io.outputs[0]
        x_dims, w_dims = tuple(x.shape.dims), tuple(w.shape.dims)
        out_spatial, pads, _ = op.geometry(x_dims, w_dims)
        p = op.param
        strides = p.strides if p.strides is not None else (1,) * len(out_spatial)
        dilations = p.dilations if p.dilations is not None else (1,) * len(out_spatial)
        if len(x_dims) == 3:  # 1-D: a 2-D conv of height 1
            x_dims, w_dims = x_dims[:2] + (1,) + x_dims[2:], w_dims[:2] + (1,) + w_dims[2:]
            out_spatial, pads = (1,) + tuple(out_spatial), (0,) + tuple(pads)
            strides, dilations = (1,) + tuple(strides), (1,) + tuple(dilations)
        n_img, c, h, wd = x_dims
        m, cg, kh, kw = w_dims
        oh, ow = out_spatial
        g = p.group
        mg, kk, pix = m // g, cg * kh * kw, oh * ow
        col = np.empty(n_img * c * kh * kw * pix, np.int32)
        requant = op.out_zero_point is not None
        acc = np.empty(n_img * m * pix, np.int32) if requant else y.array
        keep = keep_arrays(io)
        zx, _ = op.slot_count(io, op.x_zero_point)
        zw, zw_count = op.slot_count(io, op.w_zero_point)
        steps = [_quant_int.make_im2col_step(
            x.shape.data_type.numpy, x.address, col.ctypes.data, zx, n_img, c, h, wd, oh, ow,
            kh, kw, strides[0], strides[1], pads[0], pads[1], dilations[0], dilations[1],
            (keep, col))]
        images, groups = np.divmod(np.arange(n_img * g, dtype=np.int64), g)
        steps.append(_quant_int.make_igemm_step(
            w.shape.data_type.numpy, w.address, w.array.size, np.int32, col.ctypes.data,
            col.size, acc.ctypes.data, acc.size, mg, pix, kk, groups * (mg * kk),
            (images * c + groups * cg) * (kh * kw * pix), (images * m + groups * mg) * pix,
            zw, zw_count, groups * mg if zw_count > 1 else None, 0, 1, (keep, col, acc)))
        if requant:
            s_x, s_w, s_y = (io.inputs[i] for i in op.scales_xwY)
            zy, _ = op.slot_count(io, op.out_zero_point)
            bias, _ = op.slot_count(io, op.bias)
            steps.append(_quant_int.make_requant_step(
                y.shape.data_type.numpy, acc.ctypes.data, y.address, n_img * m, pix, m,
                s_w.address, s_w.shape.element_count, s_x.address, 1, s_y.address, zy, bias,
                (keep, acc)))
        for step in steps:
            step.label = self.node.name
        return steps


@op("", "ConvInteger", since=10, param=ConvParam)
class ConvIntegerOp(_ConvIntegerBase):
    """Y (int32) = conv(x - x_zero_point, w - w_zero_point); w's zero point per tensor or
    per output channel."""

    data = ((0, "x"), (1, "w"))
    zero_points = ((2, 0, "x_zero_point"), (3, 1, "w_zero_point"))
    x_zero_point, w_zero_point = 2, 3

    def count_rules(self, m):
        return ((2, "x_zero_point", (1,)), (3, "w_zero_point", (1, m)))


@op("", "QLinearConv", since=10, param=ConvParam)
class QLinearConvOp(_ConvIntegerBase):
    """y = quantized conv(x, w) + B: x and y per tensor, w per tensor or per output
    channel, B int32 per output channel."""

    x_index, w_index = 0, 3
    data = ((0, "x"), (3, "w"))
    zero_points = ((2, 0, "x_zero_point"), (5, 3, "w_zero_point"), (7, None, "y_zero_point"))
    scales = ((1, "x_scale"), (4, "w_scale"), (6, "y_scale"))
    scales_xwY = (1, 4, 6)
    x_zero_point, w_zero_point, out_zero_point, bias = 2, 5, 7, 8

    def infer_type(self, in_types):
        if len(in_types) > 8 and in_types[8] not in (None, DataType.INT32):
            raise self.unsupported(f"B is {in_types[8]}: QLinearConv's bias is int32")
        return super().infer_type(in_types)

    def count_rules(self, m):
        return ((1, "x_scale", (1,)), (2, "x_zero_point", (1,)), (4, "w_scale", (1, m)),
                (5, "w_zero_point", (1, m)), (6, "y_scale", (1,)), (7, "y_zero_point", (1,)))

    def infer_shape(self, in_shapes, in_values):
        out = super().infer_shape(in_shapes, in_values)
        if len(in_shapes) > 8 and in_shapes[8] is not None and \
                tuple(in_shapes[8]) != (out[0][1],):
            raise self.shape_error(f"B must have shape [{out[0][1]}]", in_shapes)
        return out


# -- DynamicQuantizeLinear -------------------------------------------------------------------


class DynamicQuantizeKernel(X86Kernel):
    """A serial pass for the scale and zero point, then QuantizeLinear's step reading them."""

    def make_step(self, io):
        x = io.inputs[0]
        outs = [s.array if s is not None else np.empty(shape, dtype) for s, shape, dtype in
                zip(io.outputs, (x.shape.dims, (), ()), (np.uint8, np.float32, np.uint8))]
        y, scale, zp = outs
        n = x.shape.element_count
        keep = (keep_arrays(io), outs)
        steps = [_quant_int.make_minmax_step(x.address, n, scale.ctypes.data, zp.ctypes.data,
                                             keep)]
        if n:
            steps.append(_quantize.make_quantize_step(True, np.uint8, x.address,
                                                      y.ctypes.data, scale.ctypes.data,
                                                      zp.ctypes.data, 1, 1, n, keep))
        for step in steps:
            step.label = self.node.name
        return steps


@op("", "DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinearOp(X86OptKernel):
    """float32 x -> uint8 y, float32 scalar y_scale, uint8 scalar y_zero_point, from x's
    range widened to include 0."""

    def infer_type(self, in_types):
        if in_types[0] is not DataType.FLOAT32:
            raise self.unsupported(f"x is {in_types[0]}: pplpy quantizes float32")
        return [DataType.UINT8, DataType.FLOAT32, DataType.UINT8][:len(self.node.outputs)]

    def infer_shape(self, in_shapes, in_values):
        return [tuple(in_shapes[0]), (), ()][:len(self.node.outputs)]

    def create_kernel(self):
        return DynamicQuantizeKernel(self)
