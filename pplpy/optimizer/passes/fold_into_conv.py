"""Folding per-channel affine ops into the weights of the Conv or Gemm before them.

Inference BatchNormalization, and Mul, Add, Sub or Div by a per-output-channel constant,
compute ``y = s * x + t`` per channel.  After a Conv or Gemm whose weights are constants and whose
output they alone read, that is the same layer with weights ``W * s`` (along the output
channels) and bias ``b * s + t``: the affine node goes, and the engine's post-op fusion can
then put the activation that follows into the kernel's epilogue (Conv-BN-Relu becomes one
kernel).  A MatMul with a constant 2-D B takes the same fold: a scale multiplies B's columns,
and a shift turns a 2-D MatMul into a Gemm with that bias (otherwise the shift stays).
A 3-D projection's MatMul + Add is one ``pplpy::MatMulBias`` by ``fuse_matmul_bias``; the
pipeline folds again after that pass, so a scale after the bias (BART's and Whisper's
``q_proj(x) * scaling``) goes into W and b, and the attention's three projections can then
be packed into one.

    Conv(x, W[, b]) -> BatchNormalization | Mul(c) | Add(c)  ==>  Conv(x, W * s, b * s + t)
    Gemm(A, B[, C]) -> ...                                   ==>  Gemm(A, B * s, beta*C*s + t)
    MatMul(A, B)    -> Mul(c)                                ==>  MatMul(A, B * c)
    MatMul(A, B)    -> Add(c), A 2-D                         ==>  Gemm(A, B, c)
    pplpy::MatMulBias(A, B, b) -> ...                 ==>  MatMulBias(A, B * s, b * s + t)
    MatMul(A, B) -> Reshape to (rows, N) -> BN        ==>  MatMulBias(A, B * s, t) -> Reshape
    BatchNormalization(x, g, b, m, v) -> Mul | Add | Sub | Div(c)
                                                      ==>  BN(x, g * s, b * s + t, m, v)

The Reshape case is a BatchNorm1d over a projection's rows (LeViT's Linear + BN, which the
exporter writes as a flattening Reshape, the BN and a Reshape back): the Reshape must merge
the leading dims only, so that the BN's channels are the projection's columns (a Gemm for a
2-D A).  LeViT-128S's 54 such BNs took 4.7 of its 15 ms (ONNX Runtime 11 ms): 10.4 ms.

A chain of such ops folds one link at a time (the passes run to a fixed point), as Glow folds
arithmetic chains into BatchNormalization and Convolution (reference/001).

New weights are new graph constants, computed in float64 and stored in the weights' type;
the old ones are left for dead-code elimination.  The default pipeline runs these passes in
the "fusion" mode only, so ``pplnn --disable-fusion`` / ``pplpy.load(fusion=False)`` keeps
the layers apart.
"""

import abc
import dataclasses
import math

import numpy as np

from pplpy.ir.graph import Node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.pattern_rule import is_float32
from pplpy.optimizer.passes.queries import static_dims
from pplpy.oputils.onnx.shape_functions import reshape_shape
from pplpy.params.onnx import GemmParam

AFFINE_OPS = {("", "BatchNormalization"), ("", "Mul"), ("", "Add"), ("", "Sub"), ("", "Div")}
GEMM_SINCE = 7  # the first Gemm whose C broadcasts without an attribute
# (domain, opset) of a producer op a fold creates (else the producer's own)
OP_DOMAINS = {"MatMulBias": ("pplpy", 1)}


@dataclasses.dataclass
class Target:
    """A producer whose output channels can absorb a per-channel affine map."""

    node: Node
    rank: int | None  # rank of its output, None where unknown
    axis: int  # the channel axis of its output (negative: from the end)
    channels: int


def _const(graph, name):
    return graph.constants.get(name) if name else None


def _is_float(array):
    return array is not None and np.issubdtype(array.dtype, np.floating)


def _single_reader(graph, name, reader):
    return (not graph.is_graph_output(name)
            and [node for node, _ in graph.uses(name)] == [reader])


def _per_channel(c, target):
    """``c`` as a vector of ``target.channels`` values when it broadcasts along the channel
    axis only (and does not grow the output's rank), else None."""
    c = np.asarray(c)
    rank = target.rank
    if rank is None:  # only a vector (or scalar) broadcasts the same whatever the rank
        if c.ndim > 1 or target.axis != -1:
            return None
        rank = 1
    if c.ndim > rank:
        return None
    axis = target.axis % rank
    padded = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(padded) if i != axis):
        return None
    if padded[axis] not in (1, target.channels):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (target.channels,))


def channel_affine(graph, node, src, target):
    """(s, t), float64 vectors over the channels, with ``node(y) = s * y + t`` for ``y`` the
    value ``src`` that ``target`` produces; None when ``node`` is not such a map, or when s or
    t is not finite (var + epsilon = 0: folding inf into the weights would give NaN where the
    spec's arithmetic gives +/-inf)."""
    affine = _channel_affine(graph, node, src, target)
    if affine is None or not (np.isfinite(affine[0]).all() and np.isfinite(affine[1]).all()):
        return None
    return affine


def _channel_affine(graph, node, src, target):
    c = target.channels
    if node.op_type == "BatchNormalization":
        p = node.param
        if node.inputs[0] != src or getattr(p, "training_mode", 0) or getattr(
                p, "spatial", 1) != 1:
            return None
        if any(name and (graph.consumers(name) or graph.is_graph_output(name))
               for name in node.outputs[1:]):
            return None  # running statistics are read: training
        if target.rank is None or target.rank < 2 or target.axis % target.rank != 1:
            return None
        stats = [_const(graph, name) for name in node.inputs[1:5]]
        if len(stats) != 4 or not all(_is_float(v) and v.shape == (c,) for v in stats):
            return None
        scale, bias, mean, var = (v.astype(np.float64) for v in stats)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = scale / np.sqrt(var + float(p.epsilon))
            return s, bias - mean * s
    if len(node.inputs) != 2 or node.inputs.count(src) != 1:
        return None
    src_first = node.inputs[0] == src
    other = _const(graph, node.inputs[1 if src_first else 0])
    if not _is_float(other):
        return None
    v = _per_channel(other, target)
    if v is None:
        return None
    if node.op_type == "Mul":
        return v, np.zeros(c)
    if node.op_type == "Add":
        return np.ones(c), v
    if node.op_type == "Sub":  # y - c, or c - y
        return (np.ones(c), -v) if src_first else (-np.ones(c), v)
    if src_first and (v != 0).all():  # Div: y / c (c / y is no affine map)
        return 1.0 / v, np.zeros(c)
    return None


def _target(graph, node, producers):
    """The Target of ``node`` when it is a producer kind this rule folds into, else None."""
    if node is None or node.key not in producers or len(node.outputs) != 1:
        return None
    weight = _const(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if not _is_float(weight):
        return None
    if node.op_type == "BatchNormalization":
        stats = [_const(graph, name) for name in node.inputs[1:5]]
        p = node.param
        if (len(stats) != 4 or not all(_is_float(v) and v.ndim == 1 for v in stats)
                or getattr(p, "training_mode", 0) or getattr(p, "spatial", 1) != 1
                or any(name for name in node.outputs[1:])):
            return None
        dims = graph.values[node.inputs[0]].dims
        return Target(node, None if dims is None else len(dims), 1, stats[0].shape[0])
    if node.key == ("pplpy", "MatMulBias"):  # (A, W (K, N), bias (N,)), all constant but A
        bias = _const(graph, node.inputs[2])
        if (node.param is not None  # post-ops read back from a saved model run first
                or weight.ndim != 2 or not _is_float(bias) or bias.shape != (weight.shape[1],)):
            return None
        dims = graph.values[node.inputs[0]].dims
        return Target(node, None if dims is None else len(dims), -1, weight.shape[1])
    if node.op_type == "Conv":
        bias = _const(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else 0
        if bias is None or weight.ndim < 3:
            return None  # a bias computed at run time
        return Target(node, weight.ndim, 1, weight.shape[0])
    if weight.ndim != 2:
        return None
    if node.op_type == "Gemm":
        has_c = len(node.inputs) > 2 and node.inputs[2]
        if has_c and _const(graph, node.inputs[2]) is None:
            return None
        return Target(node, 2, 1, weight.shape[0] if node.param.transB else weight.shape[1])
    # MatMul: (..., M, K) @ (K, N); the output's rank follows A's where known.
    dims = graph.values[node.inputs[0]].dims
    return Target(node, None if dims is None else max(len(dims), 1), -1, weight.shape[1])


def _output_dims(graph, target):
    """The static dims of a MatMul / MatMulBias / Gemm target's output: recorded by the
    model, or A's leading dims and the weight's columns."""
    node = target.node
    dims = static_dims(graph, node.outputs[0])
    a = static_dims(graph, node.inputs[0])
    if dims is not None or a is None or len(a) < 2:
        return dims
    if node.op_type == "Gemm":  # A (M, K), or (K, M) with transA
        return (a[1] if node.param.transA else a[0], target.channels)
    return a[:-1] + (target.channels,)


def _reshaped_dims(graph, reshape, in_dims):
    """The output dims of a Reshape of ``in_dims`` by a constant shape, else None."""
    shape = _const(graph, reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    if in_dims is None or shape is None:
        return None
    try:
        return reshape_shape(in_dims, shape.reshape(-1),
                             getattr(reshape.param, "allowzero", 0) or 0)
    except ValueError:
        return None


class FoldAffine(RewriteRule, abc.ABC):
    """Fold BatchNormalization / Mul / Add by per-channel constants into their producer."""

    op_types = AFFINE_OPS
    producers = frozenset()
    sorts_after = True  # a fold that makes a new node adds it at the end

    def condition(self, graph, node, ctx):
        for src in node.inputs[:2]:
            if not _single_reader(graph, src, node):
                continue
            target = _target(graph, graph.producer(src), self.producers)
            if target is not None:
                self._match = (target, src, None, target)
                return True
            flatten = self._flatten_into(graph, node, src)
            if flatten is not None:
                self._match = flatten
                return True
        return False

    def _flatten_into(self, graph, node, src):
        """(target, src, reshape, view) when ``node`` is a BatchNormalization of a 2-D
        ``src`` = Reshape(z) that merges the leading dims of z, a target's output whose
        channels are its last axis (LeViT's Linear -> BatchNorm1d: MatMul, Reshape to
        (rows, C), BN, Reshape back): the BN's channels are the target's, and the fold
        leaves the Reshape writing the BN's output.  view is the target as the BN sees it."""
        reshape = graph.producer(src)
        if (node.op_type != "BatchNormalization" or src != node.inputs[0] or reshape is None
                or reshape.op_type != "Reshape" or len(reshape.outputs) != 1):
            return None
        z = reshape.inputs[0]
        target = _target(graph, graph.producer(z), self.producers)
        if (target is None or not _single_reader(graph, z, reshape)
                or target.axis not in (-1, (target.rank or 0) - 1)):  # channels last
            return None
        z_dims = _output_dims(graph, target)
        x_dims = static_dims(graph, src) or _reshaped_dims(graph, reshape, z_dims)
        if (z_dims is None or x_dims is None or len(x_dims) != 2 or len(z_dims) < 2
                or x_dims != (math.prod(z_dims[:-1]), z_dims[-1])
                or z_dims[-1] != target.channels):
            return None
        return target, src, reshape, dataclasses.replace(target, rank=2, axis=1)

    def apply(self, graph, node, ctx):
        target, src, reshape, view = self._match
        affine = channel_affine(graph, node, src, view)
        if affine is None:
            return False
        rewrite = self.rewrite(graph, target, *affine)
        if rewrite is None:
            return False
        op_type, inputs, param = rewrite
        producer = target.node
        self.details[f"{node.op_type}->{op_type}"
                     + (" (through a flattening Reshape)" if reshape else "")] += 1
        out = node.outputs[0]
        graph.remove_node(node)
        if reshape is not None:  # the Reshape now writes the BN's output; z stays
            graph.set_output(reshape, 0, out)
            out = reshape.inputs[0]
        if op_type == producer.op_type and param is producer.param and len(inputs) == len(
                producer.inputs):
            for i, name in enumerate(inputs):
                graph.set_input(producer, i, name)
            graph.set_output(producer, 0, out)
            return True
        # A new input slot, param or op: a new node under the old name, sorted in after the
        # sweep.
        graph.remove_node(producer)
        domain, opset = ((producer.domain, producer.opset) if op_type == producer.op_type
                         else OP_DOMAINS.get(op_type, (producer.domain, producer.opset)))
        graph.add_node(Node(producer.name, op_type, domain, opset, inputs, [out], param))
        return True

    @abc.abstractmethod
    def rewrite(self, graph, target, s, t):
        """(op_type, inputs, param) of the producer that computes ``s * y + t``, or None."""


def _new_constant(graph, base, array, dtype):
    name = graph.unique_name(f"{base}_folded")
    graph.add_constant(name, np.ascontiguousarray(array, dtype=dtype))
    return name


class FoldIntoConv(FoldAffine):
    """Conv(x, W, b) -> s * . + t  ==>  Conv(x, W * s, b * s + t)."""

    name = "fold_into_conv"
    producers = frozenset({("", "Conv")})

    def rewrite(self, graph, target, s, t):
        node = target.node
        w_name = node.inputs[1]
        w = graph.constants[w_name]
        b = _const(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        new_w = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
        new_b = (0.0 if b is None else b.astype(np.float64).reshape(-1)) * s + t
        inputs = (node.inputs[0], _new_constant(graph, w_name, new_w, w.dtype),
                  _new_constant(graph, f"{node.name}_bias", new_b, w.dtype))
        return "Conv", inputs, node.param


class FoldIntoBatchNorm(FoldAffine):
    """BatchNormalization(x, g, b, mean, var) -> s * . + t  ==>  BN(x, g * s, b * s + t, mean,
    var): a per-channel arithmetic chain after a BatchNormalization joins it."""

    name = "fold_into_batchnorm"
    producers = frozenset({("", "BatchNormalization")})

    def rewrite(self, graph, target, s, t):
        node = target.node
        if target.rank is None or target.rank < 2:
            return None  # the channel axis of a BN input is 1: its rank must be known
        g, b = (graph.constants[name] for name in node.inputs[1:3])
        inputs = (node.inputs[0],
                  _new_constant(graph, node.inputs[1], g.astype(np.float64) * s, g.dtype),
                  _new_constant(graph, node.inputs[2], b.astype(np.float64) * s + t, b.dtype),
                  *node.inputs[3:5])
        return "BatchNormalization", inputs, node.param


class FoldIntoGemm(FoldAffine):
    """Gemm(A, B, C) -> s * . + t  ==>  Gemm(A, B * s, beta * C * s + t) (beta 1); a
    MatMul with a constant 2-D B takes the scale into B and the shift as a Gemm's C when A is
    2-D (else it is left alone, or becomes a MatMulBias's bias for a BN through a
    flattening Reshape); pplpy::MatMulBias(A, B, b) takes both into B and b."""

    name = "fold_into_gemm"
    producers = frozenset({("", "Gemm"), ("", "MatMul"), ("pplpy", "MatMulBias")})

    def rewrite(self, graph, target, s, t):
        node = target.node
        b_name = node.inputs[1]
        b = graph.constants[b_name]
        if node.op_type == "MatMulBias":
            bias = graph.constants[node.inputs[2]].astype(np.float64)
            return "MatMulBias", (node.inputs[0],
                                  _new_constant(graph, b_name, b.astype(np.float64) * s[None, :],
                                                b.dtype),
                                  _new_constant(graph, f"{node.name}_bias", bias * s + t,
                                                b.dtype)), node.param
        trans_b = node.op_type == "Gemm" and node.param.transB
        new_b = b.astype(np.float64) * (s[:, None] if trans_b else s[None, :])
        if node.op_type == "MatMul":
            if not t.any():
                return "MatMul", (node.inputs[0], _new_constant(graph, b_name, new_b,
                                                                b.dtype)), node.param
            # A BN through a flattening Reshape leaves no Add for fuse_matmul_bias to take:
            # make its node here (a MatMul + Add of the model is left to that pass).
            if (self._match[2] is not None and target.rank is not None and target.rank >= 3
                    and b.dtype == np.float32 and is_float32(graph, node.inputs[0])):
                return "MatMulBias", (node.inputs[0],
                                      _new_constant(graph, b_name, new_b, b.dtype),
                                      _new_constant(graph, f"{node.name}_bias", t, b.dtype)
                                      ), None
            if target.rank != 2 or node.opset < GEMM_SINCE:
                return None  # a batched or 1-D A: Gemm cannot take it
            return "Gemm", (node.inputs[0], _new_constant(graph, b_name, new_b, b.dtype),
                            _new_constant(graph, f"{node.name}_bias", t, b.dtype)), GemmParam()
        p = node.param
        c = _const(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if c is not None and p.beta != 0.0:
            new_c = float(p.beta) * c.astype(np.float64) * s + t
        elif t.any() or node.opset < 11:  # C optional from Gemm-11
            new_c = t
        else:
            new_c = None
        inputs = (node.inputs[0], _new_constant(graph, b_name, new_b, b.dtype))
        if new_c is not None:
            inputs += (_new_constant(graph, f"{node.name}_bias", new_c, b.dtype),)
        param = p if p.beta == 1.0 and len(inputs) == len(node.inputs) else \
            dataclasses.replace(p, beta=1.0)
        return "Gemm", inputs, param
