"""Op contexts of Resize (opsets 10, 11, 18) and Upsample (7, 9).

Resize is separable: along each resized axis an output position o reads ``taps`` source
positions index[o, k] with weights w[o, k], and the output is their tensor product.  When a
plan is made, ``axis_taps`` computes index and weight for each axis from the mode (nearest /
linear / cubic, with antialias), the coordinate transformation, nearest_mode, cubic_coeff_a,
exclude_outside and the roi, following onnx.reference's ``_interpolate_1d_along_axis``; the
steps (``impls/_resize_fp32.pxi``) then only gather and multiply-add, one pass per axis.

Scales, sizes and roi must be known when the plan is made (constants, host-computed shape
values, or model inputs, whose values then join the plan's signature: ``value_inputs``).

Resize-10 and Upsample have no coordinate modes: like ONNX Runtime, they map output o to
o / scale (asymmetric); nearest takes floor (ceil when the axis shrinks), linear interpolates
between the clamped neighbours.

A 4-D resize that keeps the channel axis runs in N16CX when its input arrives blocked (a CNN
decoder's or FPN's upsampling): on the physical (N, C/16, H, W, 16) layout it is the same
passes with 16 lanes innermost.  tf_crop_and_resize, whose extrapolation would write the
padding lanes, stays NDARRAY.

Element-wise nodes after a Resize may run in its last pass as a post-op chain applied to each
output row as it is stored (passes/fuse_post_ops.py, ``op.post_ops``; oneDNN Graph's Resize +
[Unary|Binary]*); per-channel operands broadcast along the output's axis 1, and the operands
are inputs after roi, scales and sizes.
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.post_chain import ChainedKernel
from pplpy.errors import ShapeError
from pplpy.params.onnx import (
    Resize10Param,
    Resize18Param,
    ResizeParam,
    Upsample9Param,
    UpsampleParam,
)

_FAMILY = "resize_fp32"
_MODES = ("nearest", "linear", "cubic")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
_POLICIES = ("stretch", "not_larger", "not_smaller")


# ---------------------------------------------------------------------------------------
# Per-axis taps (numpy, when a plan is made)

def _source_coordinates(transform, out_int, in_size, scale, roi):
    """x_ori for each output position, and a mask of positions outside the crop (or None)."""
    y = np.arange(out_int, dtype=np.float64)
    # The spec's length_resized is scale * in_size, fractional for a scale that does not
    # give a whole length (onnx.reference and the conformance case
    # resize_downsample_scales_linear_align_corners; onnx/onnx#2462 keeps it); ONNX Runtime
    # and PyTorch use the whole output length there (README: where results differ).
    out_width = scale * in_size
    outside = None
    if transform == "align_corners":
        x = (np.zeros(out_int) if out_width == 1
             else y * (in_size - 1) / (out_width - 1))
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "tf_crop_and_resize":
        start, end = float(roi[0]), float(roi[1])
        if out_width == 1:
            x = np.full(out_int, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (out_width - 1)
        x = x + start * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif transform == "pytorch_half_pixel":
        x = np.full(out_int, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif transform == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_int / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    elif transform == "tf_half_pixel_for_nn":  # Resize-11 only
        x = (y + 0.5) / scale
    else:
        raise ValueError(f"coordinate_transformation_mode {transform!r}")
    return x, outside


def _coefficients(mode, ratio, scale, nearest_mode, cubic_a, antialias):
    """Filter weights (out, taps) at each position's ratio in (0, 1], and the tap offset of
    the first weight relative to the window onnx.reference picks."""
    r = ratio[:, None]
    if mode == "nearest":
        if nearest_mode == "round_prefer_floor":
            upper = ratio > 0.5
        elif nearest_mode == "round_prefer_ceil":
            upper = ratio >= 0.5
        elif nearest_mode == "floor":
            upper = ratio == 1.0   # an integer x keeps itself
        else:
            upper = np.ones_like(ratio, dtype=bool)
        return np.stack([~upper, upper], axis=1).astype(np.float64)
    if mode == "linear":
        if antialias:
            s = min(scale, 1.0)
            start = int(np.floor(-1 / s) + 1)
            args = (np.arange(start, 2 - start)[None, :] - r) * s
            c = np.clip(1 - np.abs(args), 0, 1)
            return c / c.sum(axis=1, keepdims=True)
        return np.concatenate([1 - r, r], axis=1)
    a = cubic_a
    if antialias:
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        t = np.abs(s * (np.arange(start, 2 - start)[None, :] - r))
        c = np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                     np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
        return c / c.sum(axis=1, keepdims=True)
    q = 1 - r
    return np.concatenate([
        ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1,
        ((a + 2) * q - (a + 3)) * q * q + 1,
        ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a,
    ], axis=1)


def axis_taps(mode, transform, in_size, out_int, scale, roi=None, nearest_mode="round_prefer_floor",
              cubic_a=-0.75, exclude_outside=False, antialias=False, legacy=False):
    """(index int64 (out, taps), weight float32 (out, taps), outside bool (out,) or None) of
    one resized axis."""
    if legacy:
        x = np.arange(out_int, dtype=np.float64) / scale
        if mode == "nearest":
            index = np.floor(x) if scale >= 1 else np.ceil(x)
            index = np.clip(index, 0, in_size - 1).astype(np.int64)
            return index[:, None], np.ones((out_int, 1), np.float32), None
        outside = None
    else:
        x, outside = _source_coordinates(transform, out_int, in_size, scale, roi)
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)
    coeffs = _coefficients(mode, ratio, scale, nearest_mode, cubic_a,
                           antialias and mode != "nearest")
    n = coeffs.shape[1]
    # The n source positions nearest x, ties to the lower one (onnx.reference's window).
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    index = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((index < 0) | (index >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    index = np.clip(index, 0, in_size - 1)
    if mode == "nearest":
        # One tap: the chosen neighbour (weight 1, or 0 where exclude_outside dropped it).
        pick = np.argmax(coeffs, axis=1)[:, None]
        index = np.take_along_axis(index, pick, axis=1)
        coeffs = np.take_along_axis(coeffs, pick, axis=1)
    return index.astype(np.int64), coeffs.astype(np.float32), outside


# ---------------------------------------------------------------------------------------
# Geometry: output dims, per-axis scales and roi

def _vector(value):
    """A value input as a flat numpy array, or None where absent or empty."""
    if value is None:
        return None
    value = np.asarray(value).reshape(-1)
    return value if value.size else None


class ResizeKernel(ChainedKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        values = [s.array if s is not None else None for s in io.inputs]
        dims = tuple(x.shape.dims)
        out, scales, roi = self.op.geometry(dims, values, [s.shape.dims if s else None
                                                           for s in io.inputs])
        passes = self.op.passes(dims, out, scales, roi)
        physical = dims
        if x.shape.data_format is DataFormat.N16CX:
            if any(axis < 2 for axis, *_ in passes):
                raise ShapeError(f"{self.node.describe()}: N16CX resize must keep N and C")
            physical = tuple(x.shape.physical_dims)
        keep = [x.array, y.array]
        chain = self.post_chain.run_kwargs(io, keep) if self.post_chain.entries else {}
        return self.impl(_FAMILY).make_resize_steps(x.address, y.address, physical, passes,
                                                    keep=tuple(keep), **chain)


class ResizeOp(X86OptKernel):
    """y = separable interpolation of x to the size given by scales or sizes."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    legacy = False          # Resize-10 / Upsample semantics
    roi_input = None        # input indices (None: not an input of this version)
    scales_input = None
    sizes_input = None

    def attr(self, name, default=None):
        return getattr(self.param, name, default)

    @property
    def mode(self):
        return self.attr("mode", "nearest")

    @property
    def transform(self):
        return "asymmetric" if self.legacy else self.attr("coordinate_transformation_mode")

    def check_attributes(self):
        mode = self.mode
        allowed = ("nearest", "linear") if self.legacy else _MODES
        if mode not in allowed:
            raise self.unsupported(f"mode {mode!r} (expected one of {list(allowed)})")
        if self.legacy:
            return
        if self.transform not in _TRANSFORMS:
            raise self.unsupported(f"coordinate_transformation_mode {self.transform!r} "
                                   f"(expected one of {list(_TRANSFORMS)})")
        if mode == "nearest" and self.attr("nearest_mode") not in _NEAREST_MODES:
            raise self.unsupported(f"nearest_mode {self.attr('nearest_mode')!r} (expected one "
                                   f"of {list(_NEAREST_MODES)})")
        if self.attr("keep_aspect_ratio_policy", "stretch") not in _POLICIES:
            raise self.unsupported(f"keep_aspect_ratio_policy "
                                   f"{self.attr('keep_aspect_ratio_policy')!r} (expected one of "
                                   f"{list(_POLICIES)})")

    def infer_type(self, in_types):
        self.check_attributes()
        for index, what, types in ((self.scales_input, "scales", (DataType.FLOAT32,)),
                                   (self.sizes_input, "sizes", (DataType.INT64,)),
                                   (self.roi_input, "roi", (DataType.FLOAT32, DataType.FLOAT64,
                                                            DataType.FLOAT16))):
            if index is not None and self.input_present(index) and in_types[index] not in types:
                raise self.unsupported(f"input {index} ({what}) of type {in_types[index]} "
                                       f"(expected {', '.join(str(t) for t in types)})")
        return [super().infer_type(in_types)[0]]

    def _value(self, values, index, what):
        if index is None or not self.input_present(index):
            return None
        value = values[index] if index < len(values) else None
        if value is None:
            raise self.value_required(index, what)
        return _vector(value)

    def given_scales(self, values):
        return self._value(values, self.scales_input, "scales")

    def resolved_axes(self, rank, in_shapes):
        axes = self.attr("axes")
        if axes is None:
            return list(range(rank))
        out = []
        for a in axes:
            if not -rank <= a < rank:
                raise self.shape_error(f"axis {a} is out of range for rank {rank}", in_shapes)
            out.append(a % rank)
        if len(set(out)) != len(out):
            raise self.shape_error(f"axes {list(axes)} repeat an axis", in_shapes)
        return out

    def geometry(self, dims, values, in_shapes):
        """(output dims, scale per axis, roi as (start, end) per axis or None)."""
        rank = len(dims)
        axes = self.resolved_axes(rank, in_shapes)
        scales = self.given_scales(values)
        sizes = self._value(values, self.sizes_input, "sizes")
        if (scales is None) == (sizes is None):
            raise self.shape_error("give exactly one of scales and sizes (non-empty)", in_shapes)
        given = scales if scales is not None else sizes
        if len(given) != len(axes):
            raise self.shape_error(f"{'scales' if scales is not None else 'sizes'} has "
                                   f"{len(given)} values for {len(axes)} axes", in_shapes)
        axis_scales = [1.0] * rank
        out = list(dims)
        if scales is not None:
            for a, s in zip(axes, scales):
                s = float(s)
                if not s > 0 or not math.isfinite(s):
                    raise self.shape_error(f"scale {s} for axis {a}: expected > 0", in_shapes)
                axis_scales[a] = s
                out[a] = int(math.floor(s * dims[a]))
        else:
            for a, n in zip(axes, sizes):
                n = int(n)
                if n < 0 or (dims[a] == 0 and n > 0):
                    raise self.shape_error(f"size {n} for axis {a} of extent {dims[a]}",
                                           in_shapes)
                out[a] = n
                axis_scales[a] = n / dims[a] if dims[a] else 1.0
            policy = self.attr("keep_aspect_ratio_policy", "stretch")
            if policy != "stretch":
                pick = min if policy == "not_larger" else max
                s = pick(axis_scales[a] for a in axes)
                for a in axes:
                    axis_scales[a] = s
                    out[a] = int(s * dims[a] + 0.5)
        roi = None
        if self.transform == "tf_crop_and_resize":
            given_roi = self._value(values, self.roi_input, "roi")
            if given_roi is None or len(given_roi) != 2 * len(axes):
                raise self.shape_error(f"tf_crop_and_resize needs roi with {2 * len(axes)} "
                                       f"values (start and end per axis)", in_shapes)
            roi = [(0.0, 1.0)] * rank
            for i, a in enumerate(axes):
                roi[a] = (float(given_roi[i]), float(given_roi[len(axes) + i]))
        return tuple(out), axis_scales, roi

    def infer_shape(self, in_shapes, in_values):
        return [self.geometry(tuple(in_shapes[0]), in_values, in_shapes)[0]]

    def passes(self, dims, out, scales, roi):
        """[(axis, index, weight, outside, fill)] of the axes that change."""
        passes = []
        for axis, (n_in, n_out) in enumerate(zip(dims, out)):
            s = scales[axis]
            crop = roi[axis] if roi is not None else (0.0, 1.0)
            if (n_in == n_out and math.isclose(s, 1.0) and math.isclose(crop[0], 0.0)
                    and math.isclose(crop[1], 1.0)):
                continue
            index, weight, outside = axis_taps(
                self.mode, self.transform, n_in, n_out, s, crop,
                nearest_mode=self.attr("nearest_mode", "round_prefer_floor"),
                cubic_a=float(self.attr("cubic_coeff_a", -0.75)),
                exclude_outside=bool(self.attr("exclude_outside", 0)),
                antialias=bool(self.attr("antialias", 0)), legacy=self.legacy)
            passes.append((axis, index, weight, outside,
                           float(self.attr("extrapolation_value", 0.0))))
        return passes

    def keeps_channels(self, shape):
        """True when the channel axis is never resized, for every input shape."""
        if self.attr("axes") is not None:
            return 1 not in [a % len(shape) for a in self.attr("axes")]
        if self.scales_input is None:  # Upsample-7: scales attribute
            return self.param.scales is not None and float(self.param.scales[1]) == 1.0
        if self.input_present(self.scales_input) and self.constant(self.scales_input) is not None:
            scales = _vector(self.constant(self.scales_input))
            if scales is not None:
                return len(scales) == len(shape) and float(scales[1]) == 1.0
        if self.sizes_input is not None and self.input_present(self.sizes_input):
            sizes = self.constant(self.sizes_input)
            sizes = _vector(sizes) if sizes is not None else None
            return (sizes is not None and len(sizes) == len(shape)
                    and self.attr("keep_aspect_ratio_policy", "stretch") == "stretch"
                    and isinstance(shape[1], int) and int(sizes[1]) == shape[1])
        return False

    def select_format(self, in_formats, in_shapes):
        shape = in_shapes[0]
        rest = [DataFormat.NDARRAY] * (len(in_formats) - 1)
        if (in_formats[0] is DataFormat.N16CX and shape is not None and len(shape) == 4
                and self.transform != "tf_crop_and_resize" and self.keeps_channels(shape)):
            return [DataFormat.N16CX] + rest, [DataFormat.N16CX]
        return [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY]

    def create_kernel(self):
        return ResizeKernel(self)


@op("", "Resize", since=10, param=Resize10Param)
class Resize10Op(ResizeOp):
    legacy = True
    scales_input = 1
    value_inputs = (1,)
    own_inputs = 2  # x, scales: inputs before fused post-op operands


@op("", "Resize", since=11, param=ResizeParam)
@op("", "Resize", since=18, param=Resize18Param)  # antialias, axes, keep_aspect_ratio_policy
class Resize11Op(ResizeOp):
    roi_input = 1
    scales_input = 2
    sizes_input = 3
    value_inputs = (1, 2, 3)


@op("", "Upsample", since=7, param=UpsampleParam)
class Upsample7Op(ResizeOp):
    """Upsample-7: the scales attribute."""

    legacy = True

    def given_scales(self, values):
        if self.param.scales is None:
            raise self.unsupported("the scales attribute is required")
        return np.asarray(self.param.scales, dtype=np.float32)


@op("", "Upsample", since=9, param=Upsample9Param)
class Upsample9Op(ResizeOp):
    legacy = True
    scales_input = 1
    value_inputs = (1,)
