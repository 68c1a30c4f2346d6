"""Whether a Where mask on attention scores is the causal mask, in the spellings exporters
write it: recognize_attention then sets Attention's ``is_causal`` instead of passing a mask.

    Where(Trilu(ConstantOfShape([Sq, Skv], True), upper=0), s, fill)          keep j <= i
    Where(Less(Unsqueeze(Range(0, n, 1), [1]), Unsqueeze(Range, [0])), fill, s)  mask j > i
    (Greater with its operands swapped; either condition folded to a constant)
    Where(LessOrEqual(cols, rows), s, fill)  keep j <= i, rows and cols Ranges from 0 along
                                             the queries' and keys' axes (HF transformers)

Ranges reach their axes through one Unsqueeze or a chain of them.  A constant additive mask
that is 0 on the triangle and one fill of at most -1e30 above it (all of the above folded)
counts too.

with a fill of -inf or at most -1e30.  The kernel then never scores a key block that lies
wholly past the frontier (pplpy's Attention skips them) and reads no mask: GPT-2 as the
exporter writes it had computed every one of the S x S scores and added a float mask to
them.  Row i keeps keys 0..i, at least one, so no row is masked whole and the fill's
probabilities (exp(fill - max) = 0 in float32) are the causal mask's.  Attention aligns
its causal frontier at the top left without a past (j <= i + 0), as these masks do.
"""

import numpy as np

from pplpy.optimizer.passes.pattern_rule import dims_of, producer, same_dim
from pplpy.optimizer.passes.queries import unsqueeze_axes


def _int_scalar(graph, name):
    """The value of ``name`` when it is an integer constant holding one value, else None."""
    value = graph.constants.get(name) if name else None
    if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.integer):
        return None
    return int(value.reshape(-1)[0])


def _constant_of_true(graph, name):
    """``name`` is all True: a bool constant, or ConstantOfShape with value True."""
    value = graph.constants.get(name)
    if value is not None:
        return value.dtype == np.bool_ and bool(value.all())
    node = producer(graph, name, "ConstantOfShape")
    if node is None or node.param.value is None:
        return False
    fill = node.param.value.array
    return fill.dtype == np.bool_ and fill.size == 1 and bool(fill.reshape(-1)[0])


def _trilu_allowed(graph, cond):
    """cond = Trilu(all True, upper=0) with k 0: True where j <= i."""
    node = producer(graph, cond, "Trilu")
    if node is None or node.param.upper != 0:
        return False
    if len(node.inputs) > 1 and node.inputs[1]:
        if _int_scalar(graph, node.inputs[1]) != 0:
            return False
    return _constant_of_true(graph, node.inputs[0])


def _range_0_1(graph, name):
    """The Range node writing ``name`` when it is Range(0, n, 1), else None."""
    node = producer(graph, name, "Range")
    if (node is None or _int_scalar(graph, node.inputs[0]) != 0
            or _int_scalar(graph, node.inputs[2]) != 1):
        return None
    return node


def _unsqueezed_range(graph, name, from_end):
    """The Range(0, n, 1) node whose values ``name`` holds along its axis ``from_end`` (-1:
    the last axis, -2: the one before), through one or more Unsqueezes (the TorchScript
    exporter writes one per inserted axis), else None."""
    chain = []
    node = producer(graph, name, "Unsqueeze")
    while node is not None:
        chain.append(node)
        src = node.inputs[0]
        node = producer(graph, src, "Unsqueeze")
    if not chain:
        return None
    rng = _range_0_1(graph, chain[-1].inputs[0])
    if rng is None:
        return None
    position, rank = 0, 1  # the range's axis in the tensor so far
    for node in reversed(chain):
        axes = unsqueeze_axes(graph, node)
        if axes is None:
            return None
        rank += len(axes)
        inserted = sorted(a % rank for a in axes)
        if len(set(inserted)) != len(inserted):
            return None
        for a in inserted:  # each inserted axis at or before it shifts it right
            if a <= position:
                position += 1
    return rng if position - rank == from_end else None


def _range_compare(graph, cond, ops):
    """cond = op(a, b) for (op, (a axis, b axis)) in ``ops``, a and b Range(0, n, 1)s (one
    node or two) laid along those axes from the end; the Ranges' lengths are the scores'
    query and key counts, which ``is_causal_mask`` checks through cond's dims."""
    for op_type, (first, second) in ops:
        node = producer(graph, cond, op_type)
        if node is None:
            continue
        if (_unsqueezed_range(graph, node.inputs[0], first) is not None
                and _unsqueezed_range(graph, node.inputs[1], second) is not None):
            return True
    return False


def _range_future(graph, cond):
    """cond = Less(rows, cols) or Greater(cols, rows) of Ranges over the queries (rows) and
    keys (columns): True where j > i."""
    return _range_compare(graph, cond, (("Less", (-2, -1)), ("Greater", (-1, -2))))


def _range_allowed(graph, cond):
    """cond = LessOrEqual(cols, rows) or GreaterOrEqual(rows, cols) (HF transformers' mask
    functions): True where j <= i."""
    return _range_compare(graph, cond, (("LessOrEqual", (-1, -2)),
                                        ("GreaterOrEqual", (-2, -1))))


def _constant_triangle(graph, cond, keep):
    """cond is a constant whose last two axes are tril(ones) (keep) or triu(ones, 1)."""
    value = graph.constants.get(cond)
    if value is None or value.dtype != np.bool_ or value.ndim < 2:
        return False
    rows, cols = value.shape[-2:]
    tri = np.tril(np.ones((rows, cols), bool)) if keep else np.triu(np.ones((rows, cols), bool), 1)
    return bool((value == tri).all())


def _additive_triangle(graph, name):
    """``name`` is a constant additive mask: 0 on and below the diagonal of its last two
    axes and one fill of at most -1e30 above it (a causal Where folded with its inputs)."""
    value = graph.constants.get(name)
    if (value is None or value.dtype != np.float32 or value.ndim < 2
            or value.shape[-1] < 2 or value.shape[-2] < 2):
        return False
    rows, cols = value.shape[-2:]
    keep = np.tril(np.ones((rows, cols), bool))
    fill = value[..., 0, 1].reshape(-1)[0]
    return bool(fill <= -1e30 and (value[..., keep] == 0).all()
                and (value[..., ~keep] == fill).all())


def is_causal_mask(graph, mask, scores_dims):
    """Whether ``mask`` (recognize_attention's ("where", cond, fill, keep), or ("add", m) for
    a constant m) masks exactly the keys past each query's position on scores of
    ``scores_dims`` (B, H, Sq, Skv)."""
    if mask[0] == "add":
        md = dims_of(graph, mask[1])
        return (md is not None and len(md) >= 2 and same_dim(md[-2], scores_dims[2])
                and same_dim(md[-1], scores_dims[3]) and _additive_triangle(graph, mask[1]))
    if mask[0] != "where":
        return False
    _, cond, fill, keep = mask
    cd = dims_of(graph, cond)
    if fill > -1e30 or cd is None or len(cd) < 2:
        return False
    if not (same_dim(cd[-2], scores_dims[2]) and same_dim(cd[-1], scores_dims[3])):
        return False  # a broadcast row would not be the triangle
    if _constant_triangle(graph, cond, keep):
        return True
    if keep:
        return _trilu_allowed(graph, cond) or _range_allowed(graph, cond)
    return _range_future(graph, cond)
