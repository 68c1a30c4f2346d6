"""Whether a Where mask on attention scores is the causal mask, in the spellings exporters
write it: recognize_attention then sets Attention's ``is_causal`` instead of passing a mask.

    Where(Trilu(ConstantOfShape([Sq, Skv], True), upper=0), s, fill)          keep j <= i
    Where(Less(Unsqueeze(Range(0, n, 1), [1]), Unsqueeze(Range, [0])), fill, s)  mask j > i
    (Greater with its operands swapped; either condition folded to a constant)

with a fill of -inf or at most -1e30.  The kernel then never scores a key block that lies
wholly past the frontier (pplpy's Attention skips them) and reads no mask: GPT-2 as the
exporter writes it had computed every one of the S x S scores and added a float mask to
them.  Row i keeps keys 0..i, at least one, so no row is masked whole and the fill's
probabilities (exp(fill - max) = 0 in float32) are the causal mask's.  Attention aligns
its causal frontier at the top left without a past (j <= i + 0), as these masks do.
"""

import numpy as np

from pplpy.optimizer.passes.pattern_rule import dims_of, producer, same_dim


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


def _unsqueezed_range(graph, name, axis):
    """The Range(0, n, 1) node that ``name`` unsqueezes at ``axis`` (of 2), else None."""
    node = producer(graph, name, "Unsqueeze")
    if node is None:
        return None
    axes = node.param.axes if node.param is not None else None  # opset 13: an input
    if axes is None and len(node.inputs) > 1:
        value = graph.constants.get(node.inputs[1])
        axes = None if value is None else tuple(int(a) for a in value.reshape(-1))
    if axes is None or len(axes) != 1 or axes[0] % 2 != axis:
        return None
    return _range_0_1(graph, node.inputs[0])


def _range_future(graph, cond):
    """cond = Less(rows, cols) or Greater(cols, rows) of one Range(0, n, 1) as (n, 1) rows
    and (1, n) columns: True where j > i."""
    for op_type, (first, second) in (("Less", (1, 0)), ("Greater", (0, 1))):
        node = producer(graph, cond, op_type)
        if node is None:
            continue
        a = _unsqueezed_range(graph, node.inputs[0], first)
        b = _unsqueezed_range(graph, node.inputs[1], second)
        if a is not None and a is b:
            return True
    return False


def _constant_triangle(graph, cond, keep):
    """cond is a constant whose last two axes are tril(ones) (keep) or triu(ones, 1)."""
    value = graph.constants.get(cond)
    if value is None or value.dtype != np.bool_ or value.ndim < 2:
        return False
    rows, cols = value.shape[-2:]
    tri = np.tril(np.ones((rows, cols), bool)) if keep else np.triu(np.ones((rows, cols), bool), 1)
    return bool((value == tri).all())


def is_causal_mask(graph, mask, scores_dims):
    """Whether ``mask`` (recognize_attention's ("where", cond, fill, keep)) masks exactly the
    keys past each query's position on scores of ``scores_dims`` (B, H, Sq, Skv)."""
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
    return _trilu_allowed(graph, cond) if keep else _range_future(graph, cond)
