"""ShuffleNet's channel shuffle, as the exporter writes it, becomes one pplpy ChannelShuffle
node (which the x86 engine runs in N16CX, so the convolutions around it need no reorder):

    Reshape(x, [N, g, C/g, *S]) -> Transpose(perm=[0, 2, 1, 3, ...]) -> Reshape(-> [N, C, *S])
        ==>  pplpy::ChannelShuffle(x, group=g)

The shapes come from the value records: x is (N, C, *S) with C known, the first Reshape's
output (N, g, C/g, *S) and the second's equal to x's dims.
"""

from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import only_reader
from pplpy.optimizer.passes.transposes import perm_of
from pplpy.ir.graph import Node
from pplpy.params.x86 import ChannelShuffleParam

DOMAIN = "pplpy"


def _dims(graph, name):
    record = graph.values.get(name)
    return None if record is None or record.dims is None else tuple(record.dims)


class RecognizeChannelShuffle(RewriteRule):
    """Reshape -> Transpose(0, 2, 1, ...) -> Reshape back becomes pplpy::ChannelShuffle."""

    name = "recognize_channel_shuffle"
    op_types = {("", "Reshape")}

    def _match(self, graph, node):
        transpose = only_reader(graph, node.outputs[0])
        if transpose is None or transpose.key != ("", "Transpose"):
            return None
        back = only_reader(graph, transpose.outputs[0])
        if back is None or back.key != ("", "Reshape"):
            return None
        x, split = _dims(graph, node.inputs[0]), _dims(graph, node.outputs[0])
        if x is None or split is None or len(x) < 3 or len(split) != len(x) + 1:
            return None
        if _dims(graph, back.outputs[0]) != x or not isinstance(x[1], int):
            return None
        g, per = split[1], split[2]
        if not (isinstance(g, int) and isinstance(per, int) and g * per == x[1] and g > 1):
            return None
        if split[0] != x[0] or split[3:] != x[2:] or None in x:
            return None
        if perm_of(graph, transpose) != (0, 2, 1) + tuple(range(3, len(split))):
            return None
        return transpose, back, g

    def condition(self, graph, node, ctx):
        return ctx.can_create(DOMAIN, "ChannelShuffle", 1) and self._match(graph, node)

    def apply(self, graph, node, ctx):
        transpose, back, g = self._match(graph, node)
        for n in (back, transpose, node):
            graph.remove_node(n)
        graph.add_node(Node(graph.unique_name(f"{node.name}/ChannelShuffle"),
                            "ChannelShuffle", DOMAIN, 1, [node.inputs[0]], back.outputs,
                            ChannelShuffleParam(group=int(g))))
        self.details["channel shuffles"] += 1
        return True
