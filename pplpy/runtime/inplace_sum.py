"""A sum post-op into its destination: a fused node whose leading post-op adds a tensor of
its output's shape and layout (Conv + residual Add, fuse_post_ops.py) writes its output on
that tensor's memory where the tensor dies at the node, as oneDNN's sum post-op accumulates
into a destination that already holds the other operand.

ResNet's residual convs then move two tensors through memory instead of three: the residual
is read and the output written over it, where a separate output buffer is also read into the
cache before each line is written (a write-allocate).  On a 2-core Xeon guest ResNet-50's
stage-1 1x1 expansion convs with their residual took 0.81-1.05 ms against 0.70-0.80 in ONNX
Runtime, which sums in place, while the same shape with no residual took the same time in
both (0.80 / 0.78).

Only kernels that declare ``sum_in_place`` (kernel.py: each output element's sum operand read
just before that element is written, once) take part.  The operand must be a value of the
arena that a step wrote (not a feed, whose memory the caller's next run refills, nor a graph
output), have no reader after this node, nor any value sharing its memory (a residual
summed in place before it: ResNet's blocks chain that way), hold the output's exact bytes
(type, layout, physical dims), and be read by no other input of the node: a Conv whose
input is its own residual reads it after the first tiles were stored.
"""

from pplpy.runtime.inplace_reshape import alias_root


def plan_inplace_sums(step_nodes, kernels, tensor_shapes, aliases, first, last, written,
                      graph_outputs):
    """Add ``{output: (operand, 0)}`` to ``aliases`` for every node of ``step_nodes`` that may
    write its output over its sum operand, and widen the operand's live interval (``first``
    / ``last``: step indices, already merged over ``aliases``) to cover the output's.
    ``written``: value -> index of the step that writes it."""
    outputs = set(graph_outputs)
    for index, node in enumerate(step_nodes):
        operand = getattr(kernels[node], "sum_in_place", None)
        if operand is None or operand >= len(node.inputs) or not node.outputs:
            continue
        x, y = node.inputs[operand], node.outputs[0]
        if not x or not y or x == y or x in outputs or y in outputs or y in aliases:
            continue
        # the buffer x lies in (itself, or a residual summed in place before it)
        root = alias_root(aliases, x)
        if written.get(root, index) >= index or last.get(root) != index:
            continue  # a feed or a constant, or memory read after this node
        xs, ys = tensor_shapes.get(x), tensor_shapes.get(y)
        if (xs is None or ys is None or xs.data_type != ys.data_type
                or xs.data_format is not ys.data_format
                or tuple(xs.physical_dims) != tuple(ys.physical_dims)):
            continue
        if any(alias_root(aliases, name) == root
               for i, name in enumerate(node.inputs) if i != operand and name):
            continue  # the node reads the operand's memory through another input too
        aliases[y] = (x, 0)
        first[root] = min(first[root], first[y])
        last[root] = max(last[root], last[y])
