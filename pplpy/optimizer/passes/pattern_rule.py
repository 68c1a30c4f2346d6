"""What the pattern-recognising passes share (oneDNN Graph-style fusion, reference/004): a
matched subgraph is replaced by one op only when nothing outside it reads its inside.

A ``PatternRule`` matches from an anchor node, collects the nodes of the match and asks
``can_replace``, which checks the one invariant that makes every rewrite safe: each
value the matched nodes write, except the final output, is read only by matched nodes and is
not a graph output.  A pattern whose intermediate is also read elsewhere is left alone, so
the matchers need not repeat single-reader checks at every step.

The small queries (a scalar constant, the other operand of a binary node, the factor a Mul or
Div applies) are helpers here, so each pass reads as the formula it recognises.
"""

import itertools
import math
import numpy as np

from pplpy.common.data_type import DataType
from pplpy.ir.graph import Node
from pplpy.optimizer.pass_base import RewriteRule

# Constants of a decomposed formula match within this relative tolerance: the exporter
# writes float32 roundings of sqrt(2), sqrt(2/pi), 1/6 ...; 1e-6 changes a result by at most
# about that much, far below the kernels' own rounding.
CONST_RTOL = 1e-6


def scalar(graph, name):
    """The float value of ``name`` when it is a floating constant holding one value, else
    None.  Such a constant of higher rank than the operand it meets grows the result's rank
    (x[17] * c[1, 1, 1, 1] is [1, 1, 1, 17]): a rule replacing the formula by one op that
    keeps x's shape checks that with ``can_replace(..., same_dims_as=x)``."""
    if not name:
        return None
    value = graph.constants.get(name)
    if value is None or value.size != 1 or value.ndim > 4 or not np.issubdtype(
            value.dtype, np.floating):
        return None
    return float(value.reshape(-1)[0])


def close(value, want):
    return value is not None and math.isclose(value, want, rel_tol=CONST_RTOL, abs_tol=0.0)


def producer(graph, name, *op_types):
    """The node writing ``name`` when it is one of ``op_types`` (default domain), else None."""
    node = graph.producer(name) if name else None
    if node is None or node.domain != "" or node.op_type not in op_types:
        return None
    return node


def other(node, name):
    """The other operand of binary ``node``, of which ``name`` is one; None if it is not."""
    a, b = node.inputs[0], node.inputs[1]
    if a == name:
        return b
    if b == name:
        return a
    return None


def only_reader(graph, name, *op_types):
    """The single node reading ``name`` when it is one of ``op_types``, else None."""
    readers = graph.consumers(name)
    if len(set(readers)) != 1 or graph.is_graph_output(name):
        return None
    node = readers[0]
    if node.domain != "" or node.op_type not in op_types:
        return None
    return node


def scaling(graph, node):
    """(x, c) when ``node`` computes x * c for a scalar constant c (Mul either way, or Div
    by c as x * (1/c)), else None."""
    if node is None or node.domain != "" or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if node.op_type == "Mul":
        for x, k in ((a, b), (b, a)):
            c = scalar(graph, k)
            if c is not None and scalar(graph, x) is None:
                return x, c
    if node.op_type == "Div":
        c = scalar(graph, b)
        if c is not None and c != 0.0:
            return a, 1.0 / c
    return None


def is_float32(graph, name):
    record = graph.values.get(name)
    return record is not None and record.dtype is DataType.FLOAT32


def dims_of(graph, name):
    """The value's dims when its rank is known, else None."""
    record = graph.values.get(name)
    return None if record is None or record.dims is None else tuple(record.dims)


def same_dim(a, b):
    """Two dims known equal: the same int, or the same symbolic name."""
    return a is not None and a == b


def times_x_and(graph, a, x, factor):
    """Match the product ``x * a * factor`` however the exporter ordered it, starting from
    ``a``: (x * a) * c, (a * c) * x, x * (a * c), (x * c) * a, with c = ``factor`` written
    as Mul by it or Div by its inverse.  Returns (nodes, final node) or None."""
    m1 = only_reader(graph, a, "Mul", "Div")
    if m1 is None:
        return None
    s = scaling(graph, m1)
    if s is not None and s[0] == a and close(s[1], factor):  # (a * c) * x
        m2 = only_reader(graph, m1.outputs[0], "Mul")
        if m2 is not None and other(m2, m1.outputs[0]) == x:
            return [m1, m2], m2
        return None
    if m1.op_type != "Mul":
        return None
    o = other(m1, a)
    if o == x:  # (x * a) * c
        m2 = only_reader(graph, m1.outputs[0], "Mul", "Div")
        s = scaling(graph, m2)
        if s is not None and s[0] == m1.outputs[0] and close(s[1], factor):
            return [m1, m2], m2
        return None
    half = producer(graph, o, "Mul", "Div")  # (x * c) * a
    s = scaling(graph, half)
    if s is not None and s[0] == x and close(s[1], factor):
        return [half, m1], m1
    return None


class PatternRule(RewriteRule):
    """A RewriteRule whose ``apply`` replaces matched nodes by new ones (``replace``) and
    counts what it made in ``details``; new nodes are sorted in after the sweep."""

    sorts_after = True  # replace() adds its nodes at the end of the node list

    def __init__(self):
        super().__init__()
        self._serial = itertools.count()

    def run(self, graph, ctx):
        if not ctx.fusion:
            return 0
        return super().run(graph, ctx)

    @staticmethod
    def can_replace(graph, matched, final, same_dims_as=None):
        """Whether every value ``matched`` writes, except ``final``, is read only inside the
        match and is not a graph output (and something reads ``final``); with
        ``same_dims_as``, also whether ``final`` has that value's known dims (the one op
        replacing an element-wise formula of x keeps x's shape, which the formula's
        broadcasting may not have).  Where either dims are unknown, one-value constants in
        the match must be 0-d (which never grow a rank)."""
        if same_dims_as is not None:
            x_dims, out_dims = dims_of(graph, same_dims_as), dims_of(graph, final)
            if x_dims is not None and out_dims is not None:
                if x_dims != out_dims:
                    return False
            elif any(graph.constants[name].ndim and graph.constants[name].size == 1
                     for node in matched for name in node.inputs if name in graph.constants):
                return False
        inside = set(matched)
        for node in inside:
            for name in node.outputs:
                if not name or name == final:
                    continue
                if graph.is_graph_output(name) or any(
                        reader not in inside for reader in graph.consumers(name)):
                    return False
        return graph.is_graph_output(final) or bool(graph.consumers(final))

    def replace(self, graph, matched, final, new_nodes, what):
        """Remove ``matched`` (whose output ``final`` the last of ``new_nodes`` writes
        instead) and add ``new_nodes``; call after ``can_replace`` said yes."""
        for node in dict.fromkeys(matched):
            graph.remove_node(node)
        for node in new_nodes:
            graph.add_node(node)
        self.details[what] += 1
        return True

    def new_node(self, graph, op_type, opset, inputs, outputs, param=None, domain=""):
        """A node with a fresh name (``outputs`` None: one fresh output)."""
        name = graph.unique_name(f"{self.name}/{op_type}_{next(self._serial)}")
        if outputs is None:
            outputs = [graph.unique_name(f"{name}_out")]
        return Node(name, op_type, domain, opset, inputs, outputs, param)

    def new_constant(self, graph, stem, array):
        name = graph.unique_name(f"{self.name}/{stem}_{next(self._serial)}")
        graph.add_constant(name, np.ascontiguousarray(array))
        return name
