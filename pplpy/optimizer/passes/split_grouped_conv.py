"""A grouped 3x3 convolution whose groups are Winograd-sized becomes one Conv per group.

    Conv(x, W, B, group=G)  ==>  Split(x, G parts along C) -> Conv(x_g, W_g, B_g) ... -> Concat

RegNet's and ResNeXt-style blocks convolve groups of 64 or more channels (RegNetY-4GF:
128 channels in 2 groups at 56x56, 192 in 3 at 28x28).  pplpy's Winograd F(4x4, 3x3) kernel
takes group-1 convs only, so these ran direct, at the direct peak but with 4x the multiply-
adds; as separate convs each group takes Winograd.  One thread, avx512 (a 1x1 conv before
and after): 128 -> 128 in 2 groups at 56x56 3.99 -> 1.34 ms (Split included), 192 -> 192 in
3 groups at 28x28 1.52 -> 0.51 ms, 512 -> 512 in 8 groups at 14x14 1.00 -> 0.70 ms.  The
Split copies the input once (a few percent of the conv); the Concat costs nothing where the
plan writes its parts in place (N16CX, batch 1, whole 16-channel blocks), and an activation
after it moves onto the per-group convs (hoist_activations_above_concat), whose epilogues
then apply it.

Where: group > 1 (at most MAX_GROUPS) with input and output channels per group multiples of
16, a constant W (and B), kernel 3x3, stride 1, dilation 1, a static input, and where the
engine says it would run one group's conv on Winograd (``ctx.conv_algorithm``: its channel
and output-size thresholds and its thread team; an engine that does not say gets no
split).  Runs after the folds into Conv (a BatchNormalization after the grouped conv is in
W and B by then), in the "fusion" mode only.
"""

import dataclasses

import numpy as np

from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import new_node, static_dims
from pplpy.params.onnx import ConcatParam, SplitParam

BLOCK = 16              # channels per N16CX block: each group whole blocks
MAX_GROUPS = 64
SPLIT_INPUT_SINCE = 13  # Split takes its sizes as an input from opset 13


class SplitGroupedConv(RewriteRule):
    """A grouped Conv whose groups the engine would run on Winograd becomes one Conv per
    group."""

    name = "split_grouped_conv"
    op_types = {("", "Conv")}

    def condition(self, graph, node, ctx):
        p = node.param
        groups = p.group
        if (ctx.conv_algorithm is None or groups < 2 or groups > MAX_GROUPS
                or len(node.outputs) != 1):
            return False
        w = graph.constants.get(node.inputs[1])
        has_b = len(node.inputs) > 2 and bool(node.inputs[2])
        b = graph.constants.get(node.inputs[2]) if has_b else None
        x_dims = static_dims(graph, node.inputs[0])
        if (w is None or (has_b and b is None) or w.dtype != np.float32 or w.ndim != 4
                or x_dims is None or len(x_dims) != 4):
            return False
        oc, icg = w.shape[0], w.shape[1]
        ocg = oc // groups
        if x_dims[1] != icg * groups or oc % groups or icg % BLOCK or ocg % BLOCK:
            return False
        # The engine checks the rest (3x3, stride 1, dilation 1, channels, output, team).
        one_group = dataclasses.replace(p, group=1)
        return ctx.conv_algorithm(one_group, (x_dims[0], icg) + x_dims[2:],
                                  (ocg,) + w.shape[1:]) == "winograd_f4x3"

    def apply(self, graph, node, ctx):
        groups = node.param.group
        w = graph.constants[node.inputs[1]]
        has_b = len(node.inputs) > 2 and bool(node.inputs[2])
        b = graph.constants[node.inputs[2]] if has_b else None
        ocg, icg = w.shape[0] // groups, w.shape[1]
        parts = [graph.unique_name(f"{node.name}/group{g}_in") for g in range(groups)]
        outs = [graph.unique_name(f"{node.name}/group{g}_out") for g in range(groups)]
        if node.opset >= SPLIT_INPUT_SINCE:
            sizes = graph.unique_name(f"{node.name}/group_sizes")
            graph.add_constant(sizes, np.full(groups, icg, np.int64))
            new_node(graph, "Split", [node.inputs[0], sizes], parts, node,
                     SplitParam(axis=1))
        else:
            new_node(graph, "Split", [node.inputs[0]], parts, node,
                     SplitParam(axis=1, split=(icg,) * groups))
        # Records for the new values, as inference would give them: the rules after this one
        # (the activation hoist above the Concat) read their type.
        x_rec, y_rec = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
        for names, like, channels in ((parts, x_rec, icg), (outs, y_rec, ocg)):
            for name in names:
                record = graph.value(name)
                record.dtype = like.dtype
                record.dims = (like.dims[0], channels) + tuple(like.dims[2:])
        param = dataclasses.replace(node.param, group=1)
        for g in range(groups):
            w_g = graph.unique_name(f"{node.inputs[1]}/group{g}")
            graph.add_constant(w_g, np.ascontiguousarray(w[g * ocg:(g + 1) * ocg]))
            inputs = [parts[g], w_g]
            if b is not None:
                b_g = graph.unique_name(f"{node.inputs[2]}/group{g}")
                graph.add_constant(b_g, np.ascontiguousarray(b[g * ocg:(g + 1) * ocg]))
                inputs.append(b_g)
            new_node(graph, "Conv", inputs, [outs[g]], node, param)
        out = node.outputs[0]
        graph.remove_node(node)
        new_node(graph, "Concat", outs, [out], node, ConcatParam(axis=1))
        self.details[f"Conv in {groups} groups -> {groups} Convs"] += 1
        return True
