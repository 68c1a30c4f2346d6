"""Conv's op context: 1-D and 2-D convolution in N16CX on the brgemm-based conv impl.

Conv asks for its input in N16CX, so a CNN stays blocked from its first Conv on; the engine
inserts a Reorder in front when the producer is NDARRAY.  The exception is a network's first
conv (group 1, fewer than 16 input channels, input NDARRAY already: an RGB or grayscale
image, an audio waveform): it reads the NCHW planes itself (a brgemm batch element per
kernel row, or tap, and channel), since a Reorder would write a 16-channel copy that is mostly
padding (3 of 16 channels for RGB, 1 for audio) and the conv would read it back.  A
constant weight is packed once, when the kernel is made (every runtime shares it, the raw
weight is dropped); a weight computed at run time is packed inside the step, each panel by
the work item that uses it.

Algorithms, chosen per layer when the kernel is made (``ConvKernel.algorithm``, shown by
``pplnn --dump-graph`` and the profiler):

- ``"winograd_f4x3"``: Winograd F(4x4, 3x3) (impls/_winograd_fp32.pxi), for a 2-D 3x3 conv
  with stride 1, dilation 1, group 1, a constant weight, at least 16 input and output
  channels (ic * oc at most WINOGRAD_MAX_WEIGHT) and an output of at least 6x6 (14x14 past
  128x128 channels), where known when the kernel is made (see choose_algorithm), and where
  the thread team does not finish the direct conv first (winograd_pays_for_team: a layer
  with few tiles and one output panel is one or two Winograd work items, while direct cuts
  its rows for the team).  4x fewer multiply-adds; measured 2.5x faster than direct on
  ResNet's 64->64 56x56 layer (one thread, avx512).  Its packed weight is 4x the raw one (36
  instead of 9 values per channel pair).
- ``"direct"``: direct N16CX convolution on brgemm (impls/_conv_fp32.pxi), everything else.
  A depthwise conv (one input channel per group) is direct too, on its own kernel: for
  square 3x3 / 5x5, stride 1 / 2, undilated ones impls/_dwconv_fp32.h (tiles of pixels in
  registers, the activation, swish included, applied before the store, narrow planes
  through a zero-padded slab so that no pixel checks bounds), else a general row kernel.

``PPLPY_CONV_ALGO=direct|winograd|auto`` (read when the kernel is made; default auto) forces
an algorithm for tests and benchmarks; "winograd" still falls back to direct where Winograd
cannot run (a conv that is not 3x3 stride-1 group-1, or a weight computed at run time).
"""

import math
import os

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.engines.x86.impls.post_ops import PostOpKind
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.post_chain import PostChain
from pplpy.errors import PplError
from pplpy.params.onnx import ConvParam
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.oputils.onnx.pool_geometry import resolve_pads


def _as_2d(shape_dims, values, fill):
    """Spatial attribute values of a 1-D or 2-D conv as (h, w)."""
    values = tuple(values)
    return values if len(shape_dims) == 4 else (fill,) + values


ALGORITHMS = ("direct", "winograd", "auto")
# Input channels below which a Conv reads an NDARRAY input as NCHW planes (one 16-block).
PLANAR_MAX_C = 16
# Where Winograd pays (one thread, avx512, vs direct): it needs channels to feed its 36 GEMMs
# and tiles to amortise its 4x larger weight, which each work item streams.  Measured:
# 64->64 at 56x56 2.5x, 128->128 at 28x28 3.1x, 256->256 at 14x14 1.75x but at 7x7 1.1x,
# 512->512 at 7x7 0.45-0.93x (its 38 MB weight streams from memory).  Wider layers pay on
# larger outputs (session 25, weights evicted before each run): 512->512 at 14x14 2.0x, at
# 28x28 3.0x, 1024->1024 at 28x28 3.1x, 2048->512 at 56x56 3.3x (UperNet's bottleneck);
# 2.7-2.8x at two threads, 1.5-2.7x on the fma and sse tiers.  The cap bounds the packed
# weight's memory (151 MB for one layer at the cap, against 38 MB raw).
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_OUTPUT = 6            # output height and width
WINOGRAD_MAX_WEIGHT = 1024 * 1024  # ic * oc
WINOGRAD_LARGE_WEIGHT = 128 * 128  # ic * oc above which the output needs ...
WINOGRAD_LARGE_MIN_PIXELS = 14 * 14  # ... this many pixels


# Winograd's one-thread speedup over direct that winograd_pays_for_team assumes: the layers
# it is chosen for measured 1.75-3.1x (above).
WINOGRAD_SPEEDUP = 2.0


def winograd_pays_for_team(winograd_items, direct_items, num_threads):
    """Whether Winograd still finishes first on a team of num_threads.  With work items of
    equal cost a step takes ceil(items / T) / items of its one-thread time, and Winograd's
    one-thread time is 1 / WINOGRAD_SPEEDUP of direct's.  DenseNet-121's 128 -> 32 convs at
    14x14 are two Winograd items (16 tiles, one panel) against 14 direct ones (rows): at 16
    threads direct wins, at one or two Winograd does."""
    def share(items):
        return math.ceil(items / num_threads) / items
    return share(winograd_items) / WINOGRAD_SPEEDUP <= share(direct_items)


def choose_algorithm(param, x_dims, w_dims, weight_constant, out_spatial=None, forced=None):
    """"winograd_f4x3" or "direct" for a conv of these attributes and shapes (dims may be
    None where unknown); ``forced`` is PPLPY_CONV_ALGO's value (default auto)."""
    forced = (forced or os.environ.get("PPLPY_CONV_ALGO") or "auto").lower()
    if forced not in ALGORITHMS:
        raise PplError(f"PPLPY_CONV_ALGO={forced!r}: expected one of {', '.join(ALGORITHMS)}")
    if forced == "direct" or w_dims is None or len(w_dims) != 4:
        return "direct"
    ones = (1, 1)
    if (tuple(w_dims[2:]) != (3, 3) or param.group != 1 or not weight_constant
            or tuple(param.strides or ones) != ones or tuple(param.dilations or ones) != ones):
        return "direct"
    if forced == "winograd":
        return "winograd_f4x3"
    oc, ic = w_dims[0], w_dims[1]
    if min(ic, oc) < WINOGRAD_MIN_CHANNELS or ic * oc > WINOGRAD_MAX_WEIGHT:
        return "direct"
    if out_spatial is not None:  # else unknown when the kernel is made: assume large
        oh, ow = out_spatial
        if min(oh, ow) < WINOGRAD_MIN_OUTPUT or (
                ic * oc > WINOGRAD_LARGE_WEIGHT and oh * ow < WINOGRAD_LARGE_MIN_PIXELS):
            return "direct"
    return "winograd_f4x3"


def conv_geometry(param, x_dims, w_dims):
    """The output's spatial dims for input dims ``x_dims`` (None where they are not all
    known ints, or where they do not fit the kernel)."""
    if x_dims is None or not all(isinstance(d, (int, np.integer)) for d in x_dims[2:]):
        return None
    kernel = param.kernel_shape if param.kernel_shape is not None else w_dims[2:]
    try:
        return tuple(resolve_pads(x_dims[2:], kernel, param.strides, param.dilations,
                                  param.pads, param.auto_pad)[0])
    except ValueError:
        # Dims that follow a free input dim hold its build-time probe value (64 and up): a
        # stack of strided convs (wav2vec2's feature encoder) can take that below a kernel's
        # size.  Real inputs are checked when a run plans its shapes; for the choice here
        # the size is unknown.
        return None


def algorithm_for_team(param, x_dims, w_dims, weight_constant, out_spatial, isa,
                       num_threads):
    """choose_algorithm, and then direct where Winograd was chosen for a known batch and
    output but the thread team finishes direct first (winograd_pays_for_team; only when the
    algorithm is not forced).  What ConvKernel picks, and what the graph optimiser asks
    before it splits a grouped conv (X86Engine.conv_algorithm)."""
    algorithm = choose_algorithm(param, x_dims, w_dims, weight_constant, out_spatial)
    if (algorithm != "winograd_f4x3" or out_spatial is None
            or not isinstance(x_dims[0], (int, np.integer))
            or (os.environ.get("PPLPY_CONV_ALGO") or "auto").lower() != "auto"):
        return algorithm
    batch, (oc, ic), (oh, ow) = int(x_dims[0]), (int(w_dims[0]), int(w_dims[1])), out_spatial
    wino = load_variant("winograd_fp32", isa).winograd_work_items(batch, oh, ow, ic, oc,
                                                                  num_threads)
    direct = load_variant("conv_fp32", isa).conv_dense_work_items(batch, ic, oc, oh, ow, 3, 3,
                                                                  1, 1, 1, 1, num_threads)
    return "winograd_f4x3" if winograd_pays_for_team(wino, direct, num_threads) else "direct"


class ConvKernel(X86Kernel):
    """N16CX convolution, direct or Winograd (``algorithm``): one compiled step per
    input-shape signature."""

    def __init__(self, op):
        super().__init__(op)
        w = op.constant(1)
        x_dims = getattr(op, "x_dims", None)  # as seen when formats were selected
        out_spatial = None if w is None else conv_geometry(self.param, x_dims, w.shape)
        if getattr(op, "x_planar", False):  # only the direct kernel reads NCHW planes
            self.algorithm = "direct"
        else:
            self.algorithm = algorithm_for_team(
                self.param, x_dims, None if w is None else w.shape, w is not None,
                out_spatial, self.isa, self.op.options.num_threads)
        if self.algorithm == "winograd_f4x3":
            self.packed_w = self.impl("winograd_fp32").winograd_pack_weight(w)
        else:
            self.packed_w = self.pack(w) if w is not None else None
        # The packed array itself, where Runtime.memory() counts kernels' weights.
        self.packed_data = self.packed_w["data"] if self.packed_w is not None else None
        b = op.constant(2) if op.input_present(2) else None
        self.bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None else None
        self.post_chain = PostChain(op)  # set by the fusion pass
        # The dense direct conv adds a leading sum on the accumulators as it stores each
        # output element, once (one brgemm over every tap and input block per tile):
        # Winograd and the depthwise kernels add it over the stored tile instead.
        entries = self.post_chain.entries
        if (self.algorithm == "direct" and w is not None and entries
                and entries[0].kind is PostOpKind.SUM
                and not self.impl("conv_fp32")._is_depthwise(
                    w.shape[0], w.shape[1], int(self.param.group))):
            self.sum_in_place = entries[0].operand
        # The packed weight, the bias copy and constant post-op operands replace the raw
        # constants.
        self.packed_inputs = tuple(i for i, v in ((1, self.packed_w), (2, self.bias))
                                   if v is not None) + self.post_chain.packed_inputs

    def pack(self, w):
        w = np.ascontiguousarray(w, np.float32)
        if w.ndim == 3:
            w = w[:, :, None, :]
        return self.impl("conv_fp32").conv_pack_weight(w, int(self.param.group))

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, w, y = io.inputs[0], io.inputs[1], io.outputs[0]
        b = io.inputs[2] if len(io.inputs) > 2 else None
        dims, w_dims, y_dims = x.shape.dims, w.shape.dims, y.shape.dims
        p = self.param
        _, begin, _ = self.op.geometry(dims, w_dims)
        rank = len(dims) - 2
        strides = _as_2d(dims, p.strides or (1,) * rank, 1)
        dilations = _as_2d(dims, p.dilations or (1,) * rank, 1)
        pads = _as_2d(dims, begin, 0)
        kernel = _as_2d(dims, w_dims[2:], 1)
        in_hw = _as_2d(dims, dims[2:], 1)
        out_hw = _as_2d(dims, y_dims[2:], 1)
        keep = [x.array, y.array]
        kwargs = {"post_chain": self.post_chain.step_chain(io, w_dims[0], keep)}
        if self.packed_w is not None:
            kwargs["packed_w"] = self.packed_w
        else:  # a weight computed at run time: the step packs it (1-D: (OC, IC/g, 1, KW))
            kwargs["w"] = w.address
            keep.append(w.array)
        if self.bias is not None:
            kwargs["bias"] = self.bias
        elif b is not None:
            kwargs["b"] = b.address
            keep.append(b.array)
        if self.algorithm == "winograd_f4x3":
            return self.impl("winograd_fp32").make_winograd_conv_step(
                x.address, y.address, dims[0], dims[1], w_dims[0], in_hw[0], in_hw[1],
                out_hw[0], out_hw[1], pads[0], pads[1], 0, 0.0, 0.0,
                io.num_threads, keep=tuple(keep), **kwargs)
        return self.impl("conv_fp32").make_conv2d_n16cx_step(
            x.address, y.address, dims[0], dims[1], w_dims[0], int(p.group), in_hw[0],
            in_hw[1], out_hw[0], out_hw[1], kernel[0], kernel[1], strides[0], strides[1],
            pads[0], pads[1], dilations[0], dilations[1], 0, 0.0, 0.0,
            io.num_threads, keep=tuple(keep),
            x_planar=x.shape.data_format is DataFormat.NDARRAY, **kwargs)


@op("", "Conv", since=1, param=ConvParam)
class ConvOp(X86OptKernel):
    """y = conv(x, W, group) + B."""

    formats = (DataFormat.N16CX,)

    def geometry(self, x_shape, w_shape):
        """(out_spatial, pads_begin, pads_end) for these input and weight shapes."""
        p = self.param
        kernel = p.kernel_shape if p.kernel_shape is not None else w_shape[2:]
        return resolve_pads(x_shape[2:], kernel, p.strides, p.dilations, p.pads, p.auto_pad)

    def infer_shape(self, in_shapes, in_values):
        x, w = in_shapes[0], in_shapes[1]
        group = self.param.group
        if len(x) not in (3, 4):
            raise self.unsupported(f"{len(x) - 2}-D convolution is not supported (1-D, 2-D)")
        if len(w) != len(x):
            raise self.shape_error("W must have the rank of X", in_shapes)
        if group < 1 or x[1] != w[1] * group or w[0] % group:
            raise self.shape_error(
                f"channels do not match: X has {x[1]}, W expects {w[1]} x group {group} and "
                f"{w[0]} outputs must divide by group", in_shapes)
        if self.param.kernel_shape is not None and tuple(self.param.kernel_shape) != tuple(w[2:]):
            raise self.shape_error(f"kernel_shape {list(self.param.kernel_shape)} differs from "
                                   f"W's {list(w[2:])}", in_shapes)
        if len(in_shapes) > 2 and in_shapes[2] is not None and tuple(in_shapes[2]) != (w[0],):
            raise self.shape_error(f"B must have shape [{w[0]}]", in_shapes)
        if x[1] == 0:  # (ONNX: B alone; no kernel sums over nothing)
            raise self.unsupported("a convolution over 0 input channels is not supported")
        out_spatial, _, _ = self.geometry(x, w)
        return [(x[0], w[0]) + tuple(out_spatial)]

    def reads_planar(self, in_format, x_dims, w_dims):
        """True when the kernel reads x as NCHW (see the module docstring): group 1, 1 to 15
        input channels (known), x produced in NDARRAY.  One input channel into one output
        channel is the depthwise kernel's (N16CX), so one input channel needs a constant W
        with several outputs: a W fed at run time may have a free output dim, whose value
        here is only a probe."""
        if not (in_format is DataFormat.NDARRAY and self.param.group == 1
                and x_dims is not None and len(x_dims) >= 3
                and isinstance(x_dims[1], (int, np.integer)) and 0 < x_dims[1] < PLANAR_MAX_C):
            return False
        return x_dims[1] > 1 or (self.constant(1) is not None and w_dims is not None
                                 and w_dims[0] > 1)

    def select_format(self, in_formats, in_shapes):
        # The input dims as known now (entries may be None or symbolic): the kernel's choice
        # of algorithm looks at the spatial size.
        self.x_dims = tuple(in_shapes[0]) if in_shapes and in_shapes[0] is not None else None
        w_dims = tuple(in_shapes[1]) if len(in_shapes) > 1 and in_shapes[1] is not None else None
        # Only the direct kernel reads planes (PPLPY_CONV_ALGO=winograd keeps N16CX).
        self.x_planar = (self.reads_planar(in_formats[0], self.x_dims, w_dims)
                         and choose_algorithm(self.param, self.x_dims, w_dims,
                                              self.constant(1) is not None) == "direct")
        x_format = DataFormat.NDARRAY if self.x_planar else DataFormat.N16CX
        wanted = [x_format] + [DataFormat.NDARRAY] * (len(in_formats) - 1)
        return wanted, [DataFormat.N16CX]

    def create_kernel(self):
        return ConvKernel(self)
