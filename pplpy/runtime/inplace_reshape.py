"""Reshape without copies: a node whose output is its input's bytes unchanged (Reshape,
Flatten, Squeeze, Unsqueeze, Identity, BitCast: kernels with ``views_input``) gets no step;
its output is placed on its input's memory.

Exported models are full of these (LeViT has 134 Reshapes around its attention and its
flattened BatchNorms; dynamo exports wrap every Linear of a 3-D input in two): each was a
memcpy step, and on two threads the per-step cost was most of it.

Both values must live in the arena (the input a feed or written by a step, not a constant
or a host value) in NDARRAY format with the same byte count.  The output is placed on the
input, or, where the output already sits inside an in-place Concat's output, the input on
the output (its producer then writes straight into the Concat's buffer).  Where neither is
free the node copies as usual.  Nothing in a plan writes a value after its producer did, so
sharing bytes between values that hold the same bytes is safe; the memory plan keeps the
shared buffer alive for the union of their live intervals (plan.py).
"""

from pplpy.common.data_format import DataFormat


def alias_root(aliases, name):
    """The value whose buffer ``name`` finally lies in (``name`` itself when it has one)."""
    while name in aliases:
        name = aliases[name][0]
    return name


def _same_bytes(a, b):
    return (a is not None and b is not None and a.bytes == b.bytes
            and a.data_format is DataFormat.NDARRAY and b.data_format is DataFormat.NDARRAY)


def plan_inplace_reshapes(step_nodes, kernels, tensor_shapes, aliases):
    """Add ``{value: (value it lies in, 0)}`` entries to ``aliases`` (the in-place Concats'
    map, which it extends) for every node of ``step_nodes`` whose kernel ``views_input``
    and whose output can share its input's memory; returns those nodes (they need no step).
    ``tensor_shapes``: the arena's values."""
    done = set()
    for node in step_nodes:
        if not getattr(kernels[node], "views_input", False) or not node.inputs:
            continue
        x, y = node.inputs[0], node.outputs[0]
        if not y or x == y or not _same_bytes(tensor_shapes.get(x), tensor_shapes.get(y)):
            continue
        if y not in aliases and alias_root(aliases, x) != y:
            aliases[y] = (x, 0)
        elif x not in aliases and alias_root(aliases, y) != x:
            aliases[x] = (y, 0)
        else:
            continue
        done.add(node)
    return done
