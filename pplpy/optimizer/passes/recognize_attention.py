"""Scaled dot-product attention, as the PyTorch exporter writes it, to one Attention node.

    s = MatMul(Q, K^T) [* c | / c] [+ mask | Where(cond, s, fill) ...]
    Y = MatMul(Softmax(s, axis=-1), V)          ==>  Y = Attention(Q, K, V, mask, scale)

with Q (B, H, Sq, d), K^T (B, H, d, Skv), V (B, H, Skv, dv) all 4-D, B the same for the
three and H too, or K and V of one head that the products broadcast to Q's H (multi-query
attention, Falcon's: the 4-D Attention reads one KV head from K's shape), and the scale a
scalar constant on the scores or on Q and K^T before the product (their product is the
attribute).  pplpy's Attention (opset 23) is a flash-style kernel that never writes the Sq x
Skv score matrix, where the decomposed form writes it three times.  When Q, K^T and V are
the exporter's head split of 3-D (B, S, H*d) projections (Reshape to (B, S, H, d), then
Transpose) and Y goes back the same way (Transpose, Reshape to (B, Sq, H*dv)), the Attention
node takes the 3-D form (q_num_heads = kv_num_heads = H) and those eight copies go: the
kernel addresses heads through strides either way.  Otherwise the 4-D (B, H, S, d) form
reads Q, K, V as they are; K comes from K^T: when K^T is a Transpose, its input read through
one Transpose (none when that is the identity), else a Transpose of K^T.  Grouped-query
attention as HF writes it, K and V each repeated to the query heads by ``repeat_kv``
(Unsqueeze at axis 2, Expand of that axis to n, Reshape merging it into the heads: head h is
KV head h // n), reads the (B, H / n, S, d) K and V before the repeat: that is the Attention
op's own grouping, so the two copies of K and V go and the kernel reads each KV head once
per group.

The softmax may be followed by the guard both PyTorch exporters write after a masked
``scaled_dot_product_attention``, Where(IsNaN(p), 0, p): it zeroes the rows whose every key
is masked with -inf, which the Attention kernel gives as 0 already; it goes with the match
(a NaN score, which the guard would also turn into a row of zeros, gives NaN in the kernel).

Between the masks and the scale there may be Gemma 2's logit cap, c * tanh(s / c): the
Attention op's ``softcap``, which it applies there too (after the scale, before the masks).

Masks apply after the scale, each broadcasting to (B, H, Sq, Skv) with exactly Skv keys
(the Attention mask is padded, not broadcast, along the keys).  A lone mask that is the
causal triangle in an exporter's spelling (causal_mask.py: Trilu of ones, or a comparison
of two Ranges, or a constant triangle) becomes ``is_causal`` instead; so does the causal
part of an And of masks with a -inf fill (HF transformers' causal and padding masks), the
rest staying a mask (an additive mask made by Where(cond, 0, fill) is looked at as the
Where mask it is; unsplit, it is passed as it is, one mask for every layer).  One additive
float mask is passed as is; one Where(cond, s, -inf) passes cond as the boolean mask;
otherwise the masks are combined into one additive mask (Where(cond, mask, fill), Add).  A
Where fill must be -inf or at most -1e30 (PyTorch's finfo.min): then s + fill == fill in
float32 for every score below 1e22 in magnitude, so the additive form gives the same
probabilities.

In the default pipeline (fusion builds): pplpy's Attention kernel takes 0.7-0.9x the time
of the MatMul/Softmax/MatMul it replaces (S=128 and 512, 1 and 2 threads).
"""

import dataclasses
import math

import numpy as np

from pplpy.optimizer.passes.causal_mask import is_causal_mask
from pplpy.optimizer.passes.pattern_rule import (
    PatternRule,
    dims_of,
    is_float32,
    only_reader,
    producer,
    scalar,
    scaling,
    same_dim,
)
from pplpy.optimizer.passes.queries import unsqueeze_axes
from pplpy.params.onnx import AttentionParam, TransposeParam

ATTENTION_OPSET = 23
WHERE_OPSET = 16
ADD_OPSET = 14
TRANSPOSE_OPSET = 13
HUGE_FILL = -1e30  # a Where fill at most this is the same as adding it (see above)
MAX_MASKS = 4


def _mask_fits(mask_dims, scores_dims):
    """A mask of ``mask_dims`` broadcasts to the scores without growing them, and has
    exactly their key count."""
    if mask_dims is None or not 1 <= len(mask_dims) <= 4:
        return False
    full = (1,) * (4 - len(mask_dims)) + tuple(mask_dims)
    return same_dim(full[3], scores_dims[3]) and all(
        d == 1 or same_dim(d, s) for d, s in zip(full[:3], scores_dims[:3]))


def _masks(graph, node, scores_dims, masks):
    """If ``node`` applies a mask to the scores, append it to ``masks`` (nearest the
    softmax first) and return the scores it reads; else None.  A mask is ("add", name) or
    ("where", cond, fill, keep) with keep True when cond True keeps the score."""
    if node.op_type == "Add":
        for s, m in (node.inputs, node.inputs[::-1]):
            if (dims_of(graph, s) == scores_dims and is_float32(graph, m)
                    and _mask_fits(dims_of(graph, m), scores_dims)):
                masks.append(("add", m))
                return s
        return None
    if node.op_type == "Where":
        cond, a, b = node.inputs
        for s, f, keep in ((a, b, True), (b, a, False)):
            fill = scalar(graph, f)
            if (fill is not None and fill <= HUGE_FILL and dims_of(graph, s) == scores_dims
                    and _mask_fits(dims_of(graph, cond), scores_dims)):
                masks.append(("where", cond, fill, keep))
                return s
    return None


def _where_of_additive(graph, m):
    """An additive mask made by Where(cond, 0, fill) (Where(cond, fill, 0)) with a fill of
    -inf or at most -1e30, as the mask ("where", cond, fill, keep) it is (see above); else
    None.  The Where stays for its other readers (one mask serves every layer)."""
    node = producer(graph, m, "Where")
    if node is None:
        return None
    cond, a, b = node.inputs
    for zero, f, keep in ((a, b, True), (b, a, False)):
        fill = scalar(graph, f)
        if (scalar(graph, zero) == 0.0 and fill is not None and fill <= HUGE_FILL
                and dims_of(graph, cond) == dims_of(graph, m)):
            return ("where", cond, fill, keep)
    return None


def _and_leaves(graph, cond, leaves):
    """The operands of the tree of Ands writing ``cond``, all True constants left out, seen
    through Expand (a leaf broadcasting to the scores gives what its expansion gives; the
    caller checks that each leaf does)."""
    expand = producer(graph, cond, "Expand")
    if expand is not None:
        return _and_leaves(graph, expand.inputs[0], leaves)
    node = producer(graph, cond, "And")
    if node is None:
        value = graph.constants.get(cond)
        if value is None or value.dtype != np.bool_ or not value.all():
            leaves.append(cond)
        return leaves
    for name in node.inputs:
        _and_leaves(graph, name, leaves)
    return leaves


def _causal_part(graph, masks, scores_dims):
    """(masks without the causal triangle, whether it was there).  A lone mask that is the
    triangle goes (its fill then does not matter: no row is masked whole).  With a fill of
    -inf, a mask whose condition is And(causal, padding, True ...) (HF transformers' causal
    mask combined with the attention_mask) splits into is_causal and the padding mask: the
    same probabilities exactly, rows masked whole included."""
    def as_where(mask):
        return _where_of_additive(graph, mask[1]) if mask[0] == "add" else mask

    if len(masks) == 1 and any(m is not None and is_causal_mask(graph, m, scores_dims)
                               for m in (masks[0], as_where(masks[0]))):
        return [], True
    for index, mask in enumerate(masks):
        mask = as_where(mask)
        if mask is None or mask[2] != -math.inf or not mask[3]:
            continue
        leaves = _and_leaves(graph, mask[1], [])
        causal = [leaf for leaf in leaves
                  if is_causal_mask(graph, ("where", leaf, mask[2], True), scores_dims)]
        rest = [leaf for leaf in leaves if leaf not in causal]
        if len(causal) != 1 or not all(_mask_fits(dims_of(graph, leaf), scores_dims)
                                       and dims_of(graph, leaf) is not None for leaf in rest):
            continue
        return (masks[:index] + [("where", leaf, mask[2], True) for leaf in rest]
                + masks[index + 1:]), True
    return masks, False


def _peel_scale(graph, name, matched):
    """(source, factor): ``name`` with the scalar Mul / Div in front of it that only this
    path reads removed (those nodes appended to ``matched``)."""
    factor = 1.0
    while True:
        s = scaling(graph, producer(graph, name, "Mul", "Div"))
        if s is None or len(set(graph.consumers(name))) != 1 or graph.is_graph_output(name):
            return name, factor
        matched.append(graph.producer(name))
        name, factor = s[0], factor * s[1]


def _nan_guard(graph, probs):
    """([IsNaN, Where], their output) when the softmax output ``probs`` goes through the
    guard both PyTorch exporters write after a masked scaled_dot_product_attention,
    Where(IsNaN(p), 0, p); else ([], probs)."""
    readers = set(graph.consumers(probs))
    if len(readers) != 2 or graph.is_graph_output(probs):
        return [], probs
    isnan = next((n for n in readers if n.domain == "" and n.op_type == "IsNaN"), None)
    where = None if isnan is None else only_reader(graph, isnan.outputs[0], "Where")
    if (where is None or where not in readers or where.inputs[0] != isnan.outputs[0]
            or where.inputs[2] != probs or scalar(graph, where.inputs[1]) != 0.0
            or dims_of(graph, where.outputs[0]) != dims_of(graph, probs)):
        return [], probs
    return [isnan, where], where.outputs[0]


def _softcap(graph, node):
    """(x, c, [Tanh, Div]) when ``node`` is Gemma 2's logit cap c * tanh(x / c) (the Div
    may be a Mul by 1 / c), c > 0, its inner values read only along it; else None."""
    outer = scaling(graph, node)
    if outer is None or outer[1] <= 0 or node.op_type != "Mul":
        return None
    tanh = producer(graph, outer[0], "Tanh")
    inner = None if tanh is None else scaling(graph, graph.producer(tanh.inputs[0]))
    if inner is None or not math.isclose(inner[1] * outer[1], 1.0, rel_tol=1e-6):
        return None
    if (only_reader(graph, outer[0], "Mul") is not node
            or only_reader(graph, tanh.inputs[0], "Tanh") is not tanh):
        return None
    return inner[0], outer[1], [tanh, graph.producer(tanh.inputs[0])]


def _repeated(graph, name):
    """(x, n) when ``name`` is HF's repeat_kv of x (B, Hkv, S, d): Reshape(Expand(
    Unsqueeze(x, [2]), (B, Hkv, n, S, d)), (B, Hkv * n, S, d)), dims known; else None."""
    r = producer(graph, name, "Reshape")
    e = None if r is None else producer(graph, r.inputs[0], "Expand")
    u = None if e is None else producer(graph, e.inputs[0], "Unsqueeze")
    axes = None if u is None else unsqueeze_axes(graph, u)
    if axes is None or [a % 5 for a in axes] != [2]:  # (-3 of the 5-D result is 2)
        return None
    x = u.inputs[0]
    xd, ed, rd = dims_of(graph, x), dims_of(graph, e.outputs[0]), dims_of(graph, name)
    if xd is None or ed is None or rd is None or (len(xd), len(ed), len(rd)) != (4, 5, 4):
        return None
    n, kv = ed[2], xd[1]
    if not (isinstance(n, int) and isinstance(kv, int) and rd[1] == kv * n):
        return None
    keep = (0, 1, 3, 4)  # Expand grows axis 2 only; the Reshape merges it into the heads
    if not all(same_dim(ed[i], xd[j]) for i, j in zip(keep, range(4))) or not all(
            same_dim(rd[i], xd[i]) for i in (0, 2, 3)):
        return None
    return x, n


def _ungrouped(graph, k, v, q_heads):
    """(K, V) before repeat_kv when both are repeated n times to ``q_heads``, else as
    given."""
    kr, vr = _repeated(graph, k), _repeated(graph, v)
    if kr is None or vr is None or kr[1] != vr[1] or not isinstance(q_heads, int):
        return k, v
    if dims_of(graph, kr[0])[1] * kr[1] != q_heads:
        return k, v
    return kr[0], vr[0]


class RecognizeAttention(PatternRule):
    """MatMul/scale/mask/Softmax/MatMul to Attention; anchored on the Softmax."""

    name = "recognize_attention"
    op_types = {("", "Softmax")}

    def apply(self, graph, softmax, ctx):
        scores_dims = dims_of(graph, softmax.inputs[0])
        if scores_dims is None or len(scores_dims) != 4 or softmax.param.axis % 4 != 3:
            return False
        guard, probs = _nan_guard(graph, softmax.outputs[0])
        pv = only_reader(graph, probs, "MatMul")
        if pv is None or pv.inputs[0] != probs:
            return False
        matched, masks = [softmax, *guard, pv], []
        name, scale, scaled, softcap = softmax.inputs[0], 1.0, False, 0.0
        while True:  # back from the softmax: masks, softcap, scales, then the product
            node = graph.producer(name)
            if node is None or node.domain != "" or len(matched) > 8 + MAX_MASKS:
                return False
            if node.op_type == "MatMul":
                break
            cap = None if scaled or softcap else _softcap(graph, node)
            if cap is not None:
                name, softcap = cap[0], cap[1]
                matched += [node, *cap[2]]
                continue
            s = scaling(graph, node)
            if s is not None:
                name, scale, scaled = s[0], scale * s[1], True
            elif scaled or softcap:
                return False  # a mask before the scale or the cap: softmax((s + m) * c) differs
            else:
                name = _masks(graph, node, scores_dims, masks)
                if name is None:
                    return False
            matched.append(node)
        qk = node
        matched.append(qk)
        q, q_scale = _peel_scale(graph, qk.inputs[0], matched)
        kt, k_scale = _peel_scale(graph, qk.inputs[1], matched)
        v = pv.inputs[1]
        qd, ktd, vd = dims_of(graph, q), dims_of(graph, kt), dims_of(graph, v)
        if qd is None or ktd is None or vd is None or not len(qd) == len(ktd) == len(vd) == 4:
            return False
        if not (same_dim(qd[0], ktd[0]) and same_dim(qd[0], vd[0])) or not (
                same_dim(qd[1], ktd[1]) and same_dim(qd[1], vd[1]) or ktd[1] == vd[1] == 1):
            return False  # batch broadcast between Q, K, V, or heads other than MQA's
        if not same_dim(ktd[3], vd[2]) or not all(is_float32(graph, n) for n in (q, kt, v)):
            return False
        scale *= q_scale * k_scale
        if not math.isfinite(scale) or scale == 0.0:
            return False

        out = pv.outputs[0]
        split = self._head_split(graph, q, kt, v, out)
        if split is not None and self.can_replace(graph, matched + split[4], split[3]):
            q, k, v, out, nodes, heads = split
            matched = matched + nodes
            param = AttentionParam(scale=float(scale), q_num_heads=heads, kv_num_heads=heads,
                                   softcap=softcap)
            new_nodes = []
        elif self.can_replace(graph, matched, out):
            param = AttentionParam(scale=float(scale), softcap=softcap)
            new_nodes = []
            k = self._untransposed(graph, kt, new_nodes)
            k, v = _ungrouped(graph, k, v, qd[1])
        else:
            return False
        masks, causal = _causal_part(graph, masks, scores_dims)
        if causal:  # the triangle as is_causal: key blocks past it are never scored
            param = dataclasses.replace(param, is_causal=1)
        mask = self._one_mask(graph, masks[::-1], new_nodes)
        inputs = [q, k, v] + ([mask] if mask else [])
        new_nodes.append(self.new_node(graph, "Attention", ATTENTION_OPSET, inputs, [out],
                                       param))
        what = "Attention" + (" (3-D)" if param.q_num_heads else "") + (
            f" with {len(masks)} mask(s)" if masks else "") + (", causal" if causal else "")
        return self.replace(graph, matched, out, new_nodes, what)

    @staticmethod
    def _split_of(graph, name, perm):
        """(x, heads, [Transposes], Reshape) when ``name`` is Transpose(``perm``) of a Reshape
        of 3-D x (B, S, H*d) to (B, S, H, d), H and d known; else None.  The Transpose may
        be two in a row that compose to ``perm`` (the dynamo exporter's K^T: the head split,
        then its own transpose of the last two axes)."""
        transposes, composed, src = [], None, name
        while len(transposes) < 2:
            t = producer(graph, src, "Transpose")
            if t is None or t.param.perm is None or len(t.param.perm) != 4 or (
                    transposes and only_reader(graph, src, "Transpose") is not transposes[-1]):
                break
            p = tuple(t.param.perm)
            composed = p if composed is None else tuple(p[i] for i in composed)
            transposes.append(t)
            src = t.inputs[0]
            if composed == perm:
                break
        if composed != perm:
            return None
        r = producer(graph, src, "Reshape")
        if r is None:
            return None
        xd, rd = dims_of(graph, r.inputs[0]), dims_of(graph, r.outputs[0])
        if xd is None or rd is None or len(xd) != 3 or len(rd) != 4:
            return None
        if not (same_dim(xd[0], rd[0]) and same_dim(xd[1], rd[1])):
            return None
        if not all(isinstance(d, int) for d in (xd[2], rd[2], rd[3])) or xd[2] != rd[2] * rd[3]:
            return None
        return r.inputs[0], rd[2], transposes, r

    def _head_split(self, graph, q, kt, v, out):
        """(q3, k3, v3, y3, nodes, heads) when Q, K^T, V are head splits of 3-D projections
        (K^T through perm (0, 2, 3, 1)) and the product's only path out is the inverse
        (Transpose (0, 2, 1, 3), Reshape to (B, Sq, H*dv)); ``nodes`` are those eight (or
        nine)."""
        qs = self._split_of(graph, q, (0, 2, 1, 3))
        ks = self._split_of(graph, kt, (0, 2, 3, 1))
        vs = self._split_of(graph, v, (0, 2, 1, 3))
        if qs is None or ks is None or vs is None or not qs[1] == ks[1] == vs[1]:
            return None
        t = only_reader(graph, out, "Transpose")
        if t is None or t.param.perm is None or tuple(t.param.perm) != (0, 2, 1, 3):
            return None
        r = only_reader(graph, t.outputs[0], "Reshape")
        od, yd = dims_of(graph, out), dims_of(graph, r.outputs[0]) if r else None
        if od is None or yd is None or len(yd) != 3 or not all(
                isinstance(d, int) for d in (od[1], od[3], yd[2])):
            return None
        if not (same_dim(yd[0], od[0]) and same_dim(yd[1], od[2]) and yd[2] == od[1] * od[3]):
            return None
        nodes = [*qs[2], qs[3], *ks[2], ks[3], *vs[2], vs[3], t, r]
        return qs[0], ks[0], vs[0], r.outputs[0], nodes, qs[1]

    def _untransposed(self, graph, kt, new_nodes):
        """K (B, H, Skv, d) from K^T: the transpose of K^T's Transpose input, or of K^T."""
        src, perm = kt, (0, 1, 3, 2)
        t = producer(graph, kt, "Transpose")
        if t is not None and t.param.perm is not None and len(t.param.perm) == 4:
            p = tuple(t.param.perm)
            src, perm = t.inputs[0], (p[0], p[1], p[3], p[2])
        if perm == (0, 1, 2, 3):
            return src
        node = self.new_node(graph, "Transpose", TRANSPOSE_OPSET, [src], None,
                             TransposeParam(perm=perm))
        new_nodes.append(node)
        return node.outputs[0]

    def _one_mask(self, graph, masks, new_nodes):
        """One Attention mask for ``masks`` (in the order they apply), or None for none."""
        if not masks:
            return None
        if len(masks) == 1:
            if masks[0][0] == "add":
                return masks[0][1]
            _, cond, fill, keep = masks[0]
            if fill == -math.inf and keep:
                return cond  # boolean: True attends
        acc = None
        for mask in masks:
            if mask[0] == "add":
                if acc is None:
                    acc = mask[1]
                    continue
                node = self.new_node(graph, "Add", ADD_OPSET, [acc, mask[1]], None)
            else:
                _, cond, fill, keep = mask
                f = self.new_constant(graph, "fill", np.float32(fill))
                kept = acc if acc is not None else self.new_constant(graph, "zero",
                                                                     np.float32(0.0))
                node = self.new_node(graph, "Where", WHERE_OPSET,
                                     [cond, kept, f] if keep else [cond, f, kept], None)
            new_nodes.append(node)
            acc = node.outputs[0]
        return acc
