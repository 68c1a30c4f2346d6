"""ConvTranspose's op context: 1-D to 3-D transposed convolution on the deconv_fp32 impl.

The impl computes, per image and group, col = x^T . W (the brgemm microkernel over weight
panels) and scatter-adds col into the output (col2im), bias first.  A 2-D ConvTranspose keeps
N16CX when its input arrives blocked (a segmentation decoder between N16CX convs); otherwise
it runs in NDARRAY.  A constant weight is packed once when the kernel is made; a weight
computed at run time is packed by a first step of the plan.  Element-wise nodes after it
may run in its kernel as a post-op chain (passes/fuse_post_ops.py; ``op.post_ops``).

Output size and pads follow the operator's spec: with output_shape (or auto_pad SAME_*,
which asks for input * stride) the total padding
    stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - output_shape
is split in two, the odd cell at the end for SAME_UPPER and at the beginning otherwise
(without auto_pad, a negative total, an output_shape above the full size, is output padding
at the end, as ONNX Runtime and onnx.reference compute it); explicit pads are then ignored.
Without it the output is that expression minus the pads.
"""

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.post_chain import PostChain
from pplpy.params.onnx import ConvTransposeParam

_AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _ints(values, rank, default, name, op, in_shapes, minimum=None):
    if values is None:
        return (default,) * rank
    values = tuple(int(v) for v in values)
    if len(values) != rank:
        raise op.shape_error(f"{name} {list(values)} needs {rank} values, one per spatial axis",
                             in_shapes)
    if minimum is not None and any(v < minimum for v in values):
        raise op.shape_error(f"{name} {list(values)}: every value must be >= {minimum}",
                             in_shapes)
    return values


class ConvTransposeKernel(X86Kernel):
    """y = conv_transpose(x, W, group) + B, one or two compiled steps per input shape."""

    def __init__(self, op):
        super().__init__(op)
        w = op.constant(1)
        impl = self.impl("deconv_fp32")
        self.packed_w = (impl.deconv_pack_weight(np.asarray(w, np.float32), int(self.param.group))
                         if w is not None else None)
        self.packed_data = self.packed_w  # where Runtime.memory() counts kernels' weights
        b = op.constant(2) if op.input_present(2) else None
        self.bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None else None
        self.post_chain = PostChain(op)  # set by the fusion pass
        self.packed_inputs = tuple(i for i, v in ((1, self.packed_w), (2, self.bias))
                                   if v is not None) + self.post_chain.packed_inputs

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, w, y = io.inputs[0], io.inputs[1], io.outputs[0]
        b = io.inputs[2] if len(io.inputs) > 2 else None
        dims, w_dims, y_dims = x.shape.dims, w.shape.dims, y.shape.dims
        geo = self.op.geometry(dims, w_dims)
        keep = [x.array, y.array]
        kwargs = {"post_chain": self.post_chain.step_chain(io, y_dims[1], keep)}
        if self.packed_w is not None:
            kwargs["packed_w"] = self.packed_w
        else:
            kwargs["w"] = w.address
            keep.append(w.array)
        if self.bias is not None:
            kwargs["bias"] = self.bias
        elif b is not None:
            kwargs["b"] = b.address
            keep.append(b.array)
        return self.impl("deconv_fp32").make_deconv_step(
            x.address, y.address, dims[0], dims[1], y_dims[1], int(self.param.group),
            dims[2:], y_dims[2:], w_dims[2:], geo["strides"], geo["pads_begin"],
            geo["dilations"], x.shape.data_format is DataFormat.N16CX,
            y.shape.data_format is DataFormat.N16CX, io.num_threads, keep=tuple(keep),
            **kwargs)


@op("", "ConvTranspose", since=1, param=ConvTransposeParam)
class ConvTransposeOp(X86OptKernel):
    """y = conv_transpose(x, W, group) + B."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def geometry(self, x_shape, w_shape, in_shapes=None):
        """Output spatial size, pads_begin and the defaulted strides and dilations."""
        p = self.param
        in_shapes = in_shapes or [x_shape, w_shape]
        rank = len(x_shape) - 2
        kernel = tuple(int(k) for k in w_shape[2:])
        strides = _ints(p.strides, rank, 1, "strides", self, in_shapes, 1)
        dilations = _ints(p.dilations, rank, 1, "dilations", self, in_shapes, 1)
        out_pad = p.output_padding
        if out_pad is not None and len(out_pad) == 2 * rank:  # begins and ends: ends unused
            out_pad = tuple(out_pad)[:rank]
        out_pad = _ints(out_pad, rank, 0, "output_padding", self, in_shapes, 0)
        auto_pad = p.auto_pad.decode() if isinstance(p.auto_pad, bytes) else (p.auto_pad or
                                                                               "NOTSET")
        if auto_pad not in _AUTO_PADS:
            raise self.unsupported(f"auto_pad {auto_pad!r} (expected one of "
                                   f"{', '.join(_AUTO_PADS)})")
        full = [s * (n - 1) + op_ + (k - 1) * d + 1 for n, k, s, d, op_ in
                zip(x_shape[2:], kernel, strides, dilations, out_pad)]
        out_shape = p.output_shape
        if out_shape is not None:
            out_shape = tuple(int(v) for v in out_shape)
            if len(out_shape) == rank + 2:  # given with N and C
                out_shape = out_shape[2:]
            out_shape = _ints(out_shape, rank, 1, "output_shape", self, in_shapes, 1)
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_shape = tuple(int(n) * s for n, s in zip(x_shape[2:], strides))
        if out_shape is not None:
            total = [f - o for f, o in zip(full, out_shape)]
            if auto_pad == "SAME_UPPER":
                begin = tuple(t // 2 for t in total)
            elif auto_pad == "SAME_LOWER":
                begin = tuple(t - t // 2 for t in total)
            else:
                # An output_shape above the full size (total < 0) asks for output padding,
                # which goes at the end (ONNX Runtime, the reference, PyTorch's output_size).
                begin = tuple(max(t, 0) - max(t, 0) // 2 for t in total)
            out = tuple(out_shape)
        else:
            pads = p.pads if auto_pad == "NOTSET" else None
            pads = _ints(pads, 2 * rank, 0, "pads", self, in_shapes, 0)
            begin = pads[:rank]
            out = tuple(f - pads[i] - pads[i + rank] for i, f in enumerate(full))
            if any(o < 1 for o in out):
                raise self.shape_error(f"the output would be empty: spatial size {list(out)}",
                                       in_shapes)
        return {"out": out, "pads_begin": begin, "strides": strides, "dilations": dilations}

    def infer_shape(self, in_shapes, in_values):
        x, w = in_shapes[0], in_shapes[1]
        group = int(self.param.group)
        if len(x) < 3:
            raise self.shape_error("X must be (N, C, spatial...)", in_shapes)
        if len(x) > 5:
            raise self.unsupported(f"{len(x) - 2}-D ConvTranspose is not supported (1-D to 3-D)")
        if len(w) != len(x):
            raise self.shape_error("W must have the rank of X", in_shapes)
        if group < 1 or x[1] != w[0] or w[0] % group:
            raise self.shape_error(
                f"channels do not match: X has {x[1]}, W (C, M/group, ...) has {w[0]} input "
                f"channels, which must divide by group {group}", in_shapes)
        kernel_shape = self.param.kernel_shape
        if kernel_shape is not None and tuple(kernel_shape) != tuple(w[2:]):
            raise self.shape_error(f"kernel_shape {list(kernel_shape)} differs from W's "
                                   f"{list(w[2:])}", in_shapes)
        out_c = w[1] * group
        if len(in_shapes) > 2 and in_shapes[2] is not None and tuple(in_shapes[2]) != (out_c,):
            raise self.shape_error(f"B must have shape [{out_c}]", in_shapes)
        geo = self.geometry(x, w, in_shapes)
        return [(x[0], out_c) + geo["out"]]

    def select_format(self, in_formats, in_shapes):
        fmt = in_formats[0]
        if fmt is DataFormat.N16CX and (in_shapes[0] is None or len(in_shapes[0]) != 4):
            fmt = DataFormat.NDARRAY
        return [fmt] + [DataFormat.NDARRAY] * (len(in_formats) - 1), [fmt]

    def create_kernel(self):
        return ConvTransposeKernel(self)
