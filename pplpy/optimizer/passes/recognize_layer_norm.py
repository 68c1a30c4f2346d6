"""LayerNorm and RMSNorm written out as reductions, back to one normalisation op.

    d = x - ReduceMean(x);  d / Sqrt(ReduceMean(d^2) + eps) [* gamma] [+ beta]
                                        ==>  LayerNormalization(x, gamma, beta, axis, eps)
    x / Sqrt(ReduceMean(x^2) + eps) [* gamma]
                                        ==>  RMSNormalization(x, gamma, axis, eps)

over the last k axes (ReduceMean's axes an attribute before opset 18, a constant input
from 18; keepdims 1), the square written Pow(d, 2) or Mul(d, d), the division Div or
Mul by Reciprocal.  The normalisation is one pass over each row instead of eight
element-wise and reduction steps.  gamma and beta must be constants that broadcast over
the normalised dims only (they are stored expanded to those dims); a gamma or beta computed
at run time stays a separate Mul / Add after the fused node.  LayerNormalization carries
opset 17, RMSNormalization opset 23, whatever the model imports.
"""

import numpy as np

from pplpy.optimizer.passes.pattern_rule import (
    PatternRule,
    close,
    dims_of,
    is_float32,
    only_reader,
    other,
    producer,
    scalar,
)
from pplpy.params.onnx import LayerNormalizationParam, RMSNormalizationParam

LAYER_NORM_OPSET = 17
RMS_NORM_OPSET = 23


def _mean_axes(graph, node, rank):
    """The axes a keepdims ReduceMean averages, as a sorted tuple of non-negative ints, or
    None (unknown, not kept, or not constant)."""
    p = node.param
    if not getattr(p, "keepdims", 1):
        return None
    if hasattr(p, "axes"):  # before opset 18: an attribute
        axes = p.axes
    elif len(node.inputs) > 1 and node.inputs[1]:
        value = graph.constants.get(node.inputs[1])
        if value is None:
            return None
        axes = [int(a) for a in value.reshape(-1)]
    else:
        axes = None
    if axes is None or len(axes) == 0:
        return None  # every axis (or a no-op): not a per-row normalisation
    if any(not -rank <= a < rank for a in axes):
        return None
    return tuple(sorted({a % rank for a in axes}))


def _last_axes(axes, rank):
    """The first axis when ``axes`` are the last k axes, else None."""
    if axes is None or axes != tuple(range(rank - len(axes), rank)):
        return None
    return rank - len(axes)


def _square_of(graph, name):
    """(x, node) when ``name`` is Pow(x, 2) or Mul(x, x)."""
    node = producer(graph, name, "Pow", "Mul")
    if node is None:
        return None
    a, b = node.inputs
    if node.op_type == "Pow":
        return (a, node) if close(scalar(graph, b), 2.0) else None
    return (a, node) if a == b else None


def _divided(graph, num, std):
    """(nodes, output) of ``num`` / ``std``: Div(num, std), Mul(num, Reciprocal(std)), or
    Mul(num, Div(1, std)) (T5's RMSNorm as the TorchScript exporter writes
    torch.rsqrt)."""
    for reader in graph.consumers(std):
        if reader.domain != "":
            continue
        if reader.op_type == "Div" and reader.inputs == (num, std):
            return [reader], reader.outputs[0]
        if reader.op_type == "Reciprocal" or (reader.op_type == "Div"
                                              and reader.inputs[1] == std
                                              and scalar(graph, reader.inputs[0]) == 1.0):
            mul = only_reader(graph, reader.outputs[0], "Mul")
            if mul is not None and other(mul, reader.outputs[0]) == num:
                return [reader, mul], mul.outputs[0]
    return None


def _affine_constant(graph, name, norm_dims, rank, axis):
    """A gamma / beta constant expanded to ``norm_dims`` when it broadcasts over the
    normalised axes only (never growing the rank), else None."""
    value = graph.constants.get(name) if name else None
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    padded = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for d in padded[:axis]):
        return None
    tail = padded[axis:]
    if any(d not in (1, n) for d, n in zip(tail, norm_dims)):
        return None
    return np.ascontiguousarray(np.broadcast_to(value.reshape(tail), norm_dims),
                                dtype=np.float32)


class RecognizeLayerNorm(PatternRule):
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul/Add] to LayerNormalization, and the
    mean-free RMS form to RMSNormalization; anchored on the Sqrt."""

    name = "recognize_layer_norm"
    op_types = {("", "Sqrt")}

    def apply(self, graph, sqrt, ctx):
        matched = [sqrt]
        src = sqrt.inputs[0]
        eps = 0.0
        add = producer(graph, src, "Add")
        if add is not None:
            for a in add.inputs:
                e = scalar(graph, other(add, a))
                if e is not None and e >= 0.0 and producer(graph, a, "ReduceMean"):
                    eps, src = e, a
                    matched.append(add)
                    break
            else:
                return False
        var = producer(graph, src, "ReduceMean")
        square = var and _square_of(graph, var.inputs[0])
        if not square:
            return False
        centred, sq = square
        dims = dims_of(graph, centred)
        if dims is None or not is_float32(graph, centred):
            return False
        rank = len(dims)
        axes = _mean_axes(graph, var, rank)
        axis = _last_axes(axes, rank)
        norm_dims = tuple(dims[axis:]) if axis is not None else ()
        if axis is None or not all(isinstance(d, int) for d in norm_dims):
            return False
        division = _divided(graph, centred, sqrt.outputs[0])
        if division is None:
            return False
        matched += [var, sq] + division[0]
        out = division[1]

        # LayerNorm when the squared value is x - mean(x) over the same axes.
        x, kind = centred, "RMSNormalization"
        sub = producer(graph, centred, "Sub")
        mean = sub and producer(graph, sub.inputs[1], "ReduceMean")
        if mean is not None and mean.inputs[0] == sub.inputs[0] and _mean_axes(
                graph, mean, rank) == axes:
            x, kind = sub.inputs[0], "LayerNormalization"
            matched += [sub, mean]

        gamma = beta = None
        mul = only_reader(graph, out, "Mul")
        if mul is not None:
            gamma = _affine_constant(graph, other(mul, out), norm_dims, rank, axis)
        if gamma is not None:
            matched.append(mul)
            out = mul.outputs[0]
            add_beta = only_reader(graph, out, "Add") if kind == "LayerNormalization" else None
            if add_beta is not None:
                beta = _affine_constant(graph, other(add_beta, out), norm_dims, rank, axis)
            if beta is not None:
                matched.append(add_beta)
                out = add_beta.outputs[0]
        if not self.can_replace(graph, matched, out, same_dims_as=x):
            return False
        if gamma is None:
            gamma = np.ones(norm_dims, np.float32)
        inputs = [x, self.new_constant(graph, "scale", gamma)]
        if kind == "LayerNormalization":
            if beta is not None:
                inputs.append(self.new_constant(graph, "bias", beta))
            node = self.new_node(graph, kind, LAYER_NORM_OPSET, inputs, [out],
                                 LayerNormalizationParam(axis=axis, epsilon=eps))
        else:
            node = self.new_node(graph, kind, RMS_NORM_OPSET, inputs, [out],
                                 RMSNormalizationParam(axis=axis, epsilon=eps))
        return self.replace(graph, matched, out, [node], kind)
