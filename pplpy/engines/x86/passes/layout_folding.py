"""Layout folding: a Reorder next to a channels-last Transpose becomes one channels-last
Reorder.

Vision transformers and hybrid nets (SegFormer, ConvNeXt, Swin) keep their activations as
sequences (N, L, C) or channels-last images (N, H, W, C) and go through NCHW for each
convolution, which pplpy runs in N16CX.  The exporter writes the trip as a Transpose (and a
Reshape), and reorder insertion adds a Reorder: two full passes over memory each way, where
N16CX is itself channels-last in blocks of 16 channels:

    Transpose(x (N, L, C), (0, 2, 1)) -> Reshape to (N, C, H, W) -> Reorder to N16CX
    Transpose(x (N, H, W, C), (0, 3, 1, 2)) -> Reorder to N16CX
                                     ==>  Reorder(x [, shape]) channels-last to N16CX
    Reorder(y N16CX (N, C, H, W)) to NDARRAY -> Reshape to (N, C, L) -> Transpose (0, 2, 1)
    Reorder(y N16CX) to NDARRAY -> Transpose (0, 2, 3, 1)
                                     ==>  Reorder(y) N16CX to channels-last

Each folded Reorder is one strided copy of 16-float runs (ops/pplpy/reorder.py).  C must be
a known multiple of 16 (no padding lanes to fill or drop), every intermediate value read by
the next node only (and no graph output), and the Reshape must keep N and C (the same dims
by the value records) and only split or merge the spatial axes.  The folded Reorder keeps
the Reshape's shape input (and allowzero), and checks it each time a run plans its shapes:
a shape that would not split or flatten H x W as the records said is a ShapeError there.
SegFormer-B0 at 512 x 512 had 36 Transposes and 35 Reorders, a quarter of its time.

Runs after post-op fusion, the point where ``pplpy.save_optimized_model`` takes the graph
(engines/x86/save_model.py), so a saved model keeps the Transposes and the standard
Reorders it leaves out; the fold happens again when the file is loaded.
"""

from pplpy.common.data_format import DataFormat
from pplpy.ir import Node
from pplpy.params.x86 import ReorderParam

REORDER = ("pplpy", "Reorder")
BLOCK = 16


def _only_reader(graph, name):
    uses = graph.uses(name)
    if len(uses) != 1 or graph.is_graph_output(name):
        return None
    return uses[0][0]


def _producer(graph, name, op_type):
    node = graph.producer(name)
    return node if node is not None and node.key == ("", op_type) else None


def _perm(node):
    perm = node.param.perm if node.param is not None else None
    return None if perm is None else tuple(int(p) for p in perm)


def _dims(graph, name):
    record = graph.values.get(name)
    return None if record is None or record.dims is None else tuple(record.dims)


def _channels_ok(c):
    return isinstance(c, int) and c > 0 and c % BLOCK == 0


def _plain_reorder(node, src, dst):
    p = node.param
    return (node.key == REORDER and p is not None and not p.channels_last
            and p.src is src and p.dst is dst)


def _into_blocked(graph, reorder):
    """(x, [shape], [nodes replaced], rank) when ``reorder`` (NDARRAY -> N16CX) reads a
    channels-last value through a Transpose (and a Reshape); else None."""
    src = reorder.inputs[0]
    t = _producer(graph, src, "Transpose")
    if t is not None and _perm(t) == (0, 3, 1, 2) and _only_reader(graph, src) is reorder:
        xd = _dims(graph, t.inputs[0])
        if xd is not None and len(xd) == 4 and _channels_ok(xd[3]):
            return t.inputs[0], [], [t], 4
        return None
    r = _producer(graph, src, "Reshape")
    if r is None or _only_reader(graph, src) is not reorder:
        return None
    t = _producer(graph, r.inputs[0], "Transpose")
    if t is None or _perm(t) != (0, 2, 1) or _only_reader(graph, t.outputs[0]) is not r:
        return None
    xd, rd = _dims(graph, t.inputs[0]), _dims(graph, src)
    if (xd is None or rd is None or len(xd) != 3 or len(rd) != 4 or not _channels_ok(xd[2])
            or rd[0] is None or rd[0] != xd[0] or rd[1] != xd[2]):
        return None
    return t.inputs[0], [r.inputs[1]], [t, r], 3


def _allowzero(reshape):
    return int(getattr(reshape.param, "allowzero", 0) or 0) if reshape.opset >= 14 else 0


def _out_of_blocked(graph, reorder):
    """(output, [shape], [nodes replaced], rank) when the only reader of ``reorder``'s
    output (N16CX -> NDARRAY) turns it channels-last through a Transpose (after a Reshape);
    else None."""
    yd = _dims(graph, reorder.inputs[0])
    if yd is None or len(yd) != 4 or not _channels_ok(yd[1]):
        return None
    out = reorder.outputs[0]
    reader = _only_reader(graph, out)
    if reader is None or reader.domain != "":
        return None
    if reader.op_type == "Transpose" and _perm(reader) == (0, 2, 3, 1):
        return reader.outputs[0], [], [reader], 4
    if reader.op_type != "Reshape":
        return None
    rd = _dims(graph, reader.outputs[0])
    t = _only_reader(graph, reader.outputs[0])
    if (rd is None or len(rd) != 3 or rd[0] is None or rd[0] != yd[0] or rd[1] != yd[1]
            or t is None or t.key != ("", "Transpose") or _perm(t) != (0, 2, 1)):
        return None
    return t.outputs[0], [reader.inputs[1]], [reader, t], 3


def fold_layout_transposes(state):
    """Reorders next to channels-last Transposes (and Reshapes) become channels-last
    Reorders; see the module docstring."""
    graph, ops = state.graph, state.ops
    folded = 0
    for node in list(graph.nodes):
        if node not in graph:
            continue
        if _plain_reorder(node, DataFormat.NDARRAY, DataFormat.N16CX):
            match = _into_blocked(graph, node)
            if match is None:
                continue
            x, extra, replaced, rank = match
            inputs, out = [x] + extra, node.outputs[0]
        elif _plain_reorder(node, DataFormat.N16CX, DataFormat.NDARRAY):
            match = _out_of_blocked(graph, node)
            if match is None:
                continue
            out, extra, replaced, rank = match
            inputs = [node.inputs[0]] + extra
        else:
            continue
        reshapes = [n for n in replaced if n.op_type == "Reshape"]
        record = graph.values[out]
        kept = (record.format, record.dtype, record.dims)
        for old in [node, *replaced]:
            graph.remove_node(old)
            ops.pop(old, None)
        new = Node(graph.unique_name(f"{node.name}/channels_last"), "Reorder", "pplpy", 1,
                   inputs, [out], ReorderParam(src=node.param.src, dst=node.param.dst,
                                               channels_last=rank,
                                               allowzero=_allowzero(reshapes[0])
                                               if reshapes else 0))
        graph.add_node(new)
        record = graph.values[out]
        record.format, record.dtype, record.dims = kept
        ops[new] = state.engine.create_op(new)
        folded += 1
    if folded:
        graph.topological_sort()
    return f"{folded} folded"
