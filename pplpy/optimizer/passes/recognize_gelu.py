"""Decomposed activations, as the PyTorch exporter writes them, back to one ONNX op.

    x * 0.5 * (1 + Erf(x / sqrt(2)))                                ==>  Gelu(x)
    0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))         ==>  Gelu(x, "tanh")
    0.5 * x * (1 + Tanh(x * sqrt(2/pi) * (1 + 0.044715 * x * x)))   ==>  Gelu(x, "tanh")
    x * HardSigmoid(x, 1/6, 0.5)  |  x * Clip(x + 3, 0, 6) / 6      ==>  HardSwish(x)
    x * Sigmoid(x)  (SiLU)                                          ==>  Swish(x)
    x * Sigmoid(c * x)  (CLIP's QuickGELU, c = 1.702)               ==>  Swish(x, alpha=c)

Gelu exists from opset 20; the new node carries opset 20 whatever the model imports (a node
selects its op by its own opset).  Both are activations the engine then fuses into the
MatMul / Gemm before them, where the decomposed forms were 5 to 9 passes over memory.  The
constants must match to 1e-6 relative; the products may come in any order, Div by c written
as Mul by 1/c.  SiLU becomes Swish (opset 24, alpha 1): one activation, which a Conv before it
then runs in its epilogue (EfficientNet, YOLO); with the scale inside the Sigmoid it is
Swish's alpha (CLIP's QuickGELU then runs in its MatMulBias's epilogue).
"""

import math

from pplpy.optimizer.passes.pattern_rule import (
    PatternRule,
    close,
    is_float32,
    only_reader,
    other,
    producer,
    scalar,
    scaling,
    times_x_and,
)
from pplpy.params.onnx import GeluParam, SwishParam

GELU_OPSET = 20
HARD_SWISH_OPSET = 14
SWISH_OPSET = 24
SQRT_2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


def _plus_one(graph, name):
    """The Add(name, 1) reading ``name`` (either order), or None."""
    add = only_reader(graph, name, "Add")
    return add if add is not None and close(scalar(graph, other(add, name)), 1.0) else None


def _cube_of(graph, name):
    """(x, nodes) when ``name`` is x^3: Pow(x, 3), (x * x) * x or x * (x * x)."""
    node = producer(graph, name, "Pow", "Mul")
    if node is None:
        return None
    a, b = node.inputs
    if node.op_type == "Pow":
        return (a, [node]) if close(scalar(graph, b), 3.0) else None
    for sq, x in ((a, b), (b, a)):
        inner = producer(graph, sq, "Mul")
        if inner is not None and inner.inputs[0] == inner.inputs[1] == x:
            return x, [node, inner]
    return None


def _erf_argument(graph, erf):
    """(x, nodes) when Erf reads x / sqrt(2) (Div by sqrt 2 or Mul by 1/sqrt 2)."""
    node = producer(graph, erf.inputs[0], "Div", "Mul")
    s = scaling(graph, node)
    if s is None or not close(s[1], 1.0 / SQRT_2):
        return None
    return s[0], [node]


def _square_times(graph, name, factor):
    """(x, nodes) when ``name`` is factor * x * x: (x * c) * x, c * (x * x) or (x * x) * c,
    the products in either order."""
    node = producer(graph, name, "Mul")
    if node is None:
        return None
    s = scaling(graph, node)
    if s is not None and close(s[1], factor):  # c * (x * x)
        sq = producer(graph, s[0], "Mul")
        if sq is not None and sq.inputs[0] == sq.inputs[1]:
            return sq.inputs[0], [node, sq]
        return None
    for scaled, x in (node.inputs, node.inputs[::-1]):  # (x * c) * x
        t = scaling(graph, producer(graph, scaled, "Mul", "Div"))
        if t is not None and t[0] == x and close(t[1], factor):
            return x, [node, graph.producer(scaled)]
    return None


def _factored_tanh_argument(graph, tanh):
    """(x, nodes) when Tanh reads (x * sqrt(2/pi)) * (1 + 0.044715 * x * x): HF's
    gelu_fast and BLOOM's bloom_gelu_forward, the cube factored."""
    outer = producer(graph, tanh.inputs[0], "Mul")
    if outer is None:
        return None
    for scaled, poly in (outer.inputs, outer.inputs[::-1]):
        s = scaling(graph, producer(graph, scaled, "Mul", "Div"))
        add = producer(graph, poly, "Add")
        if s is None or not close(s[1], SQRT_2_OVER_PI) or add is None:
            continue
        for one, rest in (add.inputs, add.inputs[::-1]):
            square = _square_times(graph, rest, GELU_CUBIC) if close(
                scalar(graph, one), 1.0) else None
            if square is not None and square[0] == s[0]:
                return s[0], [outer, graph.producer(scaled), add] + square[1]
    return None


def _tanh_argument(graph, tanh):
    """(x, nodes) when Tanh reads sqrt(2/pi) * (x + 0.044715 * x^3), or that product
    factored (_factored_tanh_argument)."""
    outer = producer(graph, tanh.inputs[0], "Mul", "Div")
    s = scaling(graph, outer)
    if s is None or not close(s[1], SQRT_2_OVER_PI):
        return _factored_tanh_argument(graph, tanh)
    inner = producer(graph, s[0], "Add")
    if inner is None:
        return None
    for x, w in (inner.inputs, inner.inputs[::-1]):
        term = scaling(graph, producer(graph, w, "Mul", "Div"))
        if term is None or not close(term[1], GELU_CUBIC):
            continue
        cube = _cube_of(graph, term[0])
        if cube is not None and cube[0] == x:
            return x, [outer, inner, graph.producer(w)] + cube[1]
    return None


def _clip_bounds(graph, clip):
    """(lo, hi) of a Clip whose bounds are attributes (before 11) or constant inputs."""
    if clip.opset < 11:
        return clip.param.min, clip.param.max
    bounds = []
    for index in (1, 2):
        name = clip.inputs[index] if index < len(clip.inputs) else ""
        value = scalar(graph, name) if name else None
        if name and value is None:
            return None, None
        bounds.append(value)
    return tuple(bounds)


class RecognizeGelu(PatternRule):
    """Erf- and Tanh-form GELU to Gelu, both HardSwish spellings to HardSwish, SiLU to
    Swish."""

    name = "recognize_gelu"
    op_types = {("", "Erf"), ("", "Tanh"), ("", "HardSigmoid"), ("", "Clip"), ("", "Sigmoid")}

    def apply(self, graph, node, ctx):
        if node.op_type in ("Erf", "Tanh"):
            return self._gelu(graph, node)
        if node.op_type == "Sigmoid":
            return self._swish(graph, node)
        return self._hard_swish(graph, node)

    def _swish(self, graph, node):
        x, alpha, matched = node.inputs[0], 1.0, [node]
        mul = only_reader(graph, node.outputs[0], "Mul")
        if mul is not None and other(mul, node.outputs[0]) != x:
            scaled = scaling(graph, producer(graph, x, "Mul", "Div"))
            if (scaled is not None and other(mul, node.outputs[0]) == scaled[0]
                    and only_reader(graph, x, "Sigmoid") is node):
                matched.append(graph.producer(x))
                x, alpha = scaled
        if mul is None or other(mul, node.outputs[0]) != x or not is_float32(graph, x):
            return False
        if not self.can_replace(graph, matched + [mul], mul.outputs[0], same_dims_as=x):
            return False
        out = mul.outputs[0]
        swish = self.new_node(graph, "Swish", SWISH_OPSET, [x], [out], SwishParam(alpha=alpha))
        return self.replace(graph, matched + [mul], out, [swish],
                            "Swish" if alpha == 1.0 else "Swish(alpha)")

    def _gelu(self, graph, node):
        argument = (_erf_argument if node.op_type == "Erf" else _tanh_argument)(graph, node)
        if argument is None:
            return False
        x, front = argument
        add = _plus_one(graph, node.outputs[0])
        product = add and times_x_and(graph, add.outputs[0], x, 0.5)
        if not product or not is_float32(graph, x):
            return False
        nodes, final = product
        matched = front + [node, add] + nodes
        if not self.can_replace(graph, matched, final.outputs[0], same_dims_as=x):
            return False
        approximate = "none" if node.op_type == "Erf" else "tanh"
        out = final.outputs[0]
        gelu = self.new_node(graph, "Gelu", GELU_OPSET, [x], [out], GeluParam(approximate))
        return self.replace(graph, matched, out, [gelu],
                            f"Gelu({approximate})")

    def _hard_swish(self, graph, node):
        if node.op_type == "HardSigmoid":
            p = node.param
            if not (close(p.alpha, 1.0 / 6.0) and close(p.beta, 0.5)):
                return False
            x, front = node.inputs[0], []
            mul = only_reader(graph, node.outputs[0], "Mul")
            if mul is None or other(mul, node.outputs[0]) != x:
                return False
            nodes, final = [mul], mul
        else:  # Relu6(x + 3) / 6 * x, the Clip reading x + 3
            lo, hi = _clip_bounds(graph, node)
            shift = producer(graph, node.inputs[0], "Add")
            if lo != 0.0 or hi != 6.0 or shift is None:
                return False
            x = next((a for a in shift.inputs if close(scalar(graph, other(shift, a)), 3.0)),
                     None)
            product = x and times_x_and(graph, node.outputs[0], x, 1.0 / 6.0)
            if not product:
                return False
            front, (nodes, final) = [shift], product
        matched = front + [node] + nodes
        if not is_float32(graph, x) or not self.can_replace(graph, matched, final.outputs[0],
                                                            same_dims_as=x):
            return False
        out = final.outputs[0]
        swish = self.new_node(graph, "HardSwish", HARD_SWISH_OPSET, [x], [out])
        return self.replace(graph, matched, out, [swish], "HardSwish")
