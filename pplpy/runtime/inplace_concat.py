"""Concat without copies: when the inputs of a Concat lie side by side in its output's
memory, each producer writes straight into its part of the output and the Concat does
nothing (issue 7: DenseNet, GoogLeNet and SqueezeNet concatenate every block's branches).

An input's part of the output is one contiguous byte range exactly when nothing outside the
concat axis repeats it: in NDARRAY the dims before the axis multiply to 1 (batch 1 and the
channel axis, typically); in N16CX the axis is the channel axis, the batch is 1 and every
input but the last has a multiple of 16 channels (whole blocks; the last input's padding
lanes are the output's).  The plan decides this per input-shape signature.

Every input must be written by a step of this plan (not a feed, a constant or a host value),
be no graph output, appear once in the Concat and in no other in-place Concat, and have the
output's format; otherwise the Concat copies as usual.  The output's buffer then lives from
the first input's step to the last read of the output or of any input.  (A Reshape placed in
place, inplace_reshape.py, may then put its own input inside a part, a feed or a graph output
among them: feeds are copied in before the first step and outputs out after the last.)
"""

import math

from pplpy.common.data_format import DataFormat

LANES = 16


def _part_bytes(ts):
    return math.prod(ts.physical_dims) * ts.data_type.itemsize


def _contiguous_parts(node, tensor_shapes):
    """Byte offsets of the inputs in the output, or None when some part is not contiguous."""
    out = tensor_shapes.get(node.outputs[0])
    ins = [tensor_shapes.get(name) for name in node.inputs]
    if out is None or any(ts is None for ts in ins) or not ins:
        return None
    if any(ts.data_format is not out.data_format or ts.data_type is not out.data_type
           for ts in ins):
        return None
    rank = len(out.dims)
    axis = node.param.axis + rank if node.param.axis < 0 else node.param.axis
    if out.data_format is DataFormat.N16CX:
        if axis != 1 or out.dims[0] != 1 or any(ts.dims[1] % LANES for ts in ins[:-1]):
            return None
    elif math.prod(out.dims[:axis]) != 1:
        return None
    offsets, at = [], 0
    for ts in ins:
        offsets.append(at)
        at += _part_bytes(ts)
    return offsets if at == _part_bytes(out) else None


def plan_inplace_concats(step_nodes, tensor_shapes, written, graph):
    """{input name: (output name, byte offset)} for every Concat of ``step_nodes`` whose
    inputs can live inside its output, and the set of those Concat nodes (they need no
    step).  ``written`` maps each value to the index of the step writing it."""
    aliases, done = {}, set()
    for node in step_nodes:
        if node.key != ("", "Concat") or len(set(node.inputs)) != len(node.inputs):
            continue
        out = node.outputs[0]
        if any(written.get(name) is None or graph.is_graph_output(name) or name in aliases
               or name in graph.input_names or graph.producer(name) is None
               for name in node.inputs):
            continue
        offsets = _contiguous_parts(node, tensor_shapes)
        if offsets is None:
            continue
        for name, offset in zip(node.inputs, offsets):
            aliases[name] = (out, offset)
        done.add(node)
    return aliases, done
