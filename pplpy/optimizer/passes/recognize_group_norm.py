"""GroupNorm as PyTorch exports it, back to one GroupNormalization.

    Reshape(x, [N, G, -1]) -> InstanceNormalization(s[G], b[G]) -> Reshape(back to x's dims)
        [-> Mul(gamma per channel)] [-> Add(beta per channel)]
                        ==>  GroupNormalization-21(x, s[g(c)] * gamma, b[g(c)] * gamma + beta)

Both of PyTorch's exporters write ``nn.GroupNorm`` this way (PoolFormer's norm, diffusion
U-Nets and VAEs): instance normalisation over the groups of a reshaped view, then the
per-channel affine map.  Run as written, the reshaped view is NDARRAY, so a CNN's N16CX blocks
are reordered out and back around every norm and the ops between norms (pools, convs' inputs)
run in NDARRAY too; GroupNormalization runs on N16CX (ops/onnx/group_norm.py).

x is (N, C, ...) with C a known multiple of G; the first Reshape keeps N and puts G second
(the rest of each image, C / G channels of it per group, flattened behind), the second
restores x's dims.  gamma and beta are constants that broadcast per channel only; a Mul or
Add of anything else stays after the fused node.  The new node carries opset 21 (scale and
bias per channel), whatever the model imports.
"""

import numpy as np

from pplpy.optimizer.passes.pattern_rule import (
    PatternRule,
    dims_of,
    is_float32,
    only_reader,
    other,
    producer,
    same_dim,
)
from pplpy.params.onnx import GroupNormalizationParam

GROUP_NORM_OPSET = 21


def _per_channel(graph, name, channels, rank):
    """A constant that broadcasts over (N, C, ...) per channel only, as ``channels`` float64
    values; None when ``name`` is not one."""
    value = graph.constants.get(name) if name else None
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    padded = (1,) * (rank - value.ndim) + value.shape
    if padded[1] not in (1, channels) or any(d != 1 for i, d in enumerate(padded) if i != 1):
        return None
    return np.broadcast_to(value.astype(np.float64).reshape(-1), (channels,))


class RecognizeGroupNorm(PatternRule):
    """Reshape / InstanceNormalization / Reshape [/ Mul / Add] to GroupNormalization;
    anchored on the InstanceNormalization."""

    name = "recognize_group_norm"
    op_types = {("", "InstanceNormalization")}

    def apply(self, graph, norm, ctx):
        grouped, s_name, b_name = (list(norm.inputs) + ["", ""])[:3]
        first = producer(graph, grouped, "Reshape")
        if first is None or only_reader(graph, grouped, "InstanceNormalization") is not norm:
            return False
        x = first.inputs[0]
        x_dims, g_dims = dims_of(graph, x), dims_of(graph, grouped)
        if x_dims is None or g_dims is None or len(x_dims) < 2 or len(g_dims) < 3 \
                or not is_float32(graph, x):
            return False
        channels, groups = x_dims[1], g_dims[1]
        if not (isinstance(channels, int) and isinstance(groups, int) and groups > 0
                and channels % groups == 0 and same_dim(x_dims[0], g_dims[0])):
            return False
        s, b = graph.constants.get(s_name), graph.constants.get(b_name)
        if s is None or b is None or s.shape != (groups,) or b.shape != (groups,):
            return False
        second = only_reader(graph, norm.outputs[0], "Reshape")
        if second is None or dims_of(graph, second.outputs[0]) != x_dims:
            return False
        matched, out, rank = [first, norm, second], second.outputs[0], len(x_dims)
        per_group = channels // groups
        scale = np.repeat(s.astype(np.float64), per_group)
        bias = np.repeat(b.astype(np.float64), per_group)
        mul = only_reader(graph, out, "Mul")
        gamma = mul and _per_channel(graph, other(mul, out), channels, rank)
        if gamma is not None:
            scale, bias = scale * gamma, bias * gamma
            matched.append(mul)
            out = mul.outputs[0]
        add = only_reader(graph, out, "Add")
        beta = add and _per_channel(graph, other(add, out), channels, rank)
        if beta is not None:
            bias = bias + beta
            matched.append(add)
            out = add.outputs[0]
        if not self.can_replace(graph, matched, out, same_dims_as=x):
            return False
        inputs = [x, self.new_constant(graph, "scale", scale.astype(np.float32)),
                  self.new_constant(graph, "bias", bias.astype(np.float32))]
        node = self.new_node(graph, "GroupNormalization", GROUP_NORM_OPSET, inputs, [out],
                             GroupNormalizationParam(num_groups=groups,
                                                     epsilon=float(norm.param.epsilon)))
        return self.replace(graph, matched, out, [node], "GroupNormalization")
