"""Output size and padding of a sliding window (Conv, MaxPool, AveragePool), ONNX's rules.

ONNX gives a window op a kernel, strides, dilations and either explicit ``pads`` or an
``auto_pad`` mode, plus ``ceil_mode`` for pooling.  Every engine needs the same three
answers from them: the output's spatial shape and how much padding lies before and after
the input along each axis.  ``resolve_pads`` computes them once, following ONNX's shape
inference (``convPoolShapeInference`` in ``onnx/defs/nn``) and the operator docs:

* effective kernel ``ek = (k - 1) * dilation + 1``;
* ``NOTSET``: pads as given, ``out = floor((in + pb + pe - ek) / s) + 1``, or ``ceil``
  with ``ceil_mode``, then one fewer if the last window would start past the input and its
  left padding (the window must see at least the left pad or the image);
* ``VALID``: no pads, the same formula;
* ``SAME_UPPER`` / ``SAME_LOWER``: total pad ``max(0, (ceil(in / s) - 1) * s + ek - in)``,
  split in half with the odd cell at the end (UPPER) or the beginning (LOWER), then the
  same formula, which gives ``out = ceil(in / s)``.

ceil_mode with auto_pad: the operator docs give VALID the floor-mode size either way, but
shape inference and ONNX Runtime apply ceil_mode to VALID as to explicit pads; a model's
declared shapes come from shape inference, so we follow it.  (onnx.reference rejects or
mis-sizes that combination.)

ceil_mode can make the last window run past the end padding; those extra cells are not
padding in ONNX's sense (AveragePool's ``count_include_pad`` never counts them), so they
are not added to ``pads_end``: kernels clip windows at ``in + pads_end`` themselves.

``pool_window`` bundles those answers with the defaulted kernel, strides and dilations:
everything a pooling kernel needs, for every pool kind and layout, from one call.
"""

from typing import NamedTuple

AUTO_PAD_MODES = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _ints(name, values, rank, default, minimum):
    """``values`` as a tuple of ``rank`` ints >= minimum, or ``default`` repeated if None."""
    if values is None:
        return (default,) * rank
    out = tuple(int(v) for v in values)
    if len(out) != rank:
        raise ValueError(f"{name}: expected {rank} values, one per spatial axis, got {list(out)}")
    if any(v < minimum for v in out):
        raise ValueError(f"{name}: every value must be >= {minimum}, got {list(out)}")
    return out


def _ceil_div(a, b):
    return -(-a // b)


def resolve_pads(in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode=False):
    """Return ``(out_spatial, pads_begin, pads_end)`` for a window op under ONNX's rules.

    ``in_spatial`` and ``kernel`` list one size per spatial axis; ``strides`` and
    ``dilations`` default to 1 and ``pads`` (ONNX order: all begins, then all ends) to 0
    when None.  ``auto_pad`` is one of NOTSET, VALID, SAME_UPPER, SAME_LOWER (str or
    bytes; None or "" means NOTSET).  Raises ValueError for inconsistent attributes or an
    empty output.
    """
    in_spatial = tuple(int(v) for v in in_spatial)
    rank = len(in_spatial)
    if any(v < 0 for v in in_spatial):
        raise ValueError(f"input spatial shape must be non-negative, got {list(in_spatial)}")
    if kernel is None:
        raise ValueError("kernel_shape is required: one kernel size per spatial axis")
    kernel = _ints("kernel_shape", kernel, rank, None, 1)
    strides = _ints("strides", strides, rank, 1, 1)
    dilations = _ints("dilations", dilations, rank, 1, 1)

    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    auto_pad = auto_pad or "NOTSET"
    if auto_pad not in AUTO_PAD_MODES:
        raise ValueError(f"auto_pad: expected one of {', '.join(AUTO_PAD_MODES)}, got {auto_pad!r}")

    if pads is not None:
        pads = tuple(int(v) for v in pads)
        if len(pads) != 2 * rank:
            raise ValueError(
                f"pads: expected {2 * rank} values (all begins, then all ends), got {list(pads)}"
            )
        if any(v < 0 for v in pads):
            raise ValueError(f"pads: negative padding is not supported, got {list(pads)}")
        # ONNX forbids pads together with auto_pad.  All-zero pads beside auto_pad are
        # common in exported models and harmless; ONNX Runtime ignores them, and so do we.
        if auto_pad != "NOTSET" and any(pads):
            raise ValueError(
                f"pads {list(pads)} cannot be used with auto_pad={auto_pad}: "
                "set auto_pad to NOTSET or drop pads"
            )

    eff_kernel = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    if auto_pad == "NOTSET":
        pads = pads if pads is not None else (0,) * (2 * rank)
        pads_begin, pads_end = pads[:rank], pads[rank:]
    elif auto_pad == "VALID":
        pads_begin = pads_end = (0,) * rank
    else:
        pads_begin, pads_end = [], []
        for n, s, ek in zip(in_spatial, strides, eff_kernel):
            total = max(0, (_ceil_div(n, s) - 1) * s + ek - n)
            small, big = total // 2, total - total // 2
            pads_begin.append(small if auto_pad == "SAME_UPPER" else big)
            pads_end.append(big if auto_pad == "SAME_UPPER" else small)
        pads_begin, pads_end = tuple(pads_begin), tuple(pads_end)

    out = []
    for axis in range(rank):
        n, s, ek = in_spatial[axis], strides[axis], eff_kernel[axis]
        pb, pe = pads_begin[axis], pads_end[axis]
        span = n + pb + pe - ek
        # With ceil_mode a window larger than the padded input still has a first position
        # (ONNX's ceil((in + pads - ek) / s) + 1 is 1 for -s < span < 0): it sees the
        # whole input, as in ONNX Runtime and onnx.reference.
        if span < 0 and not (ceil_mode and span > -s):
            raise ValueError(
                f"spatial axis {axis}: input size {n} + pads ({pb}, {pe}) is smaller than the "
                f"effective kernel {ek} (kernel {kernel[axis]}, dilation {dilations[axis]}): "
                "the output would be empty"
            )
        size = (_ceil_div(span, s) if ceil_mode else span // s) + 1
        # With ceil_mode the last window must start inside the input or its left padding
        # (ONNX shape inference, onnx.reference and PyTorch all drop a window that starts
        # in the right padding).
        if ceil_mode and (size - 1) * s >= n + pb:
            size -= 1
        if size <= 0:
            raise ValueError(
                f"spatial axis {axis}: input size {n} with pads ({pb}, {pe}), kernel "
                f"{kernel[axis]}, stride {s}, dilation {dilations[axis]} gives an empty output"
            )
        out.append(size)
    return tuple(out), tuple(pads_begin), tuple(pads_end)


class PoolWindow(NamedTuple):
    """A pooling's geometry per spatial axis, every attribute resolved (no None)."""

    out: tuple
    kernel: tuple
    strides: tuple
    pads_begin: tuple
    pads_end: tuple
    dilations: tuple


def pool_window(in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode=False):
    """``resolve_pads`` plus the defaulted attributes, as a PoolWindow (same arguments)."""
    out, pads_begin, pads_end = resolve_pads(in_spatial, kernel, strides, dilations, pads,
                                             auto_pad, ceil_mode)
    rank = len(out)
    return PoolWindow(out, tuple(int(k) for k in kernel),
                      _ints("strides", strides, rank, 1, 1), pads_begin, pads_end,
                      _ints("dilations", dilations, rank, 1, 1))
