"""Transpose optimisation, after Glow's (reference/001): transposes are brought together and
cancelled.

- an identity Transpose is removed;
- Transpose(Transpose(x, p), q) is one Transpose(x, p[q]) (removed if that is the identity);
- a Transpose that moves no data (it only moves dims of size 1 among the others) is a
  Reshape;
- a Transpose sinks below a single-input element-wise op (Relu, Sigmoid, ...), below an
  element-wise binary op whose other operand is a scalar constant or the same Transpose of
  another value, and below an inference BatchNormalization when it keeps axis 1 in place
  (the channels BN scales stay the same), so the transposes of a chain meet and cancel.

Every rule needs the Transpose's input rank (from the value records); perm None means
reversed axes.
"""

from pplpy.ir.graph import bypass_node
from pplpy.optimizer.pass_base import RewriteRule
from pplpy.optimizer.passes.queries import (
    constant,
    new_node,
    only_reader,
    rank,
    shape_constant,
    static_dims,
)
from pplpy.params.onnx import ReshapeParam, TransposeParam

# Element-wise ops of one input (and attributes only): f(transpose(x)) == transpose(f(x)).
UNARY = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Abs", "Neg", "Exp", "Log",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Not", "IsNaN", "Cast", "Shrink",
})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less",
                    "Greater", "And", "Or", "Xor", "PRelu"})


def perm_of(graph, node):
    """The Transpose's perm as a tuple, or None when its input rank is unknown."""
    perm = node.param.perm if node.param is not None else None
    r = rank(graph, node.inputs[0])
    if perm is not None:
        perm = tuple(int(p) for p in perm)
        # Leave a perm that is not one of the input's axes to shape inference, which names
        # the node; rewriting it would index outside the dims.
        if sorted(perm) != list(range(len(perm))) or (r is not None and len(perm) != r):
            return None
        return perm
    return None if r is None else tuple(range(r - 1, -1, -1))


def is_identity(perm):
    return perm == tuple(range(len(perm)))


class OptimizeTransposes(RewriteRule):
    """Identity transposes go, consecutive ones combine, data-free ones become Reshape."""

    name = "optimize_transposes"
    op_types = {("", "Transpose")}

    def apply(self, graph, node, ctx):
        perm = perm_of(graph, node)
        if perm is None:
            return False
        if is_identity(perm):
            if bypass_node(graph, node):
                self.details["removed identity Transpose"] += 1
                return True
            return False
        inner = graph.producer(node.inputs[0])
        if (inner is not None and inner.key == ("", "Transpose")
                and only_reader(graph, inner.outputs[0]) is node):
            inner_perm = perm_of(graph, inner)
            if inner_perm is not None:
                combined = tuple(inner_perm[q] for q in perm)
                # A new node, not a new param on this one: op contexts are per node.
                graph.remove_node(node)
                graph.remove_node(inner)
                merged = new_node(graph, "Transpose", [inner.inputs[0]], node.outputs, node,
                                  TransposeParam(perm=combined))
                self.details["combined Transposes"] += 1
                if is_identity(combined):
                    bypass_node(graph, merged)
                return True
        return self._to_reshape(graph, node, perm)

    def _to_reshape(self, graph, node, perm):
        dims = static_dims(graph, node.inputs[0])
        if dims is None:
            return False
        moved = [p for p in perm if dims[p] != 1]
        if moved != sorted(moved):
            return False  # data moves
        shape = shape_constant(graph, tuple(dims[p] for p in perm), node)
        graph.remove_node(node)
        new_node(graph, "Reshape", [node.inputs[0], shape], node.outputs, node, ReshapeParam())
        self.details["Transpose to Reshape"] += 1
        return True


class SinkTransposes(RewriteRule):
    """A Transpose moves below the element-wise op that reads it, towards the next
    Transpose: Relu(T(x)) -> T(Relu(x)); Add(T(x), T(y)) -> T(Add(x, y)); Mul(T(x), 2) ->
    T(Mul(x, 2))."""

    name = "sink_transposes"
    op_types = {("", op) for op in UNARY | BINARY | {"BatchNormalization"}}

    def condition(self, graph, node, ctx):
        if len(node.outputs) != 1 or graph.is_graph_output(node.outputs[0]):
            return False
        transposes = []
        for name in node.inputs:
            producer = graph.producer(name)
            if producer is not None and producer.key == ("", "Transpose") \
                    and only_reader(graph, name) is node:
                transposes.append(producer)
        if not transposes:
            return False
        perm = perm_of(graph, transposes[0])
        if perm is None:
            return False
        if node.op_type in UNARY:
            return len(node.inputs) == 1
        if node.op_type == "BatchNormalization":
            return (node.inputs[0] == transposes[0].outputs[0] and len(perm) >= 2
                    and perm[1] == 1 and len([o for o in node.outputs if o]) == 1)
        if len(node.inputs) != 2:
            return False
        if len(transposes) == 2:
            return perm_of(graph, transposes[1]) == perm
        other = node.inputs[1 - node.inputs.index(transposes[0].outputs[0])]
        value = constant(graph, other)
        return value is not None and value.size == 1 and value.ndim <= 1

    def apply(self, graph, node, ctx):
        transposes = {name: graph.producer(name) for name in node.inputs
                      if graph.producer(name) is not None
                      and graph.producer(name).key == ("", "Transpose")}
        first = next(iter(transposes.values()))
        perm = perm_of(graph, first)
        for index, name in enumerate(node.inputs):
            if name in transposes:
                graph.set_input(node, index, transposes[name].inputs[0])
                graph.remove_node(transposes[name])
        out = node.outputs[0]
        inner = graph.unique_name(f"{out}/before_transpose")
        graph.set_output(node, 0, inner)
        new_node(graph, "Transpose", [inner], [out], first, TransposeParam(perm=perm))
        # The sunk op now writes the Transpose's input: its type is the old output's, its
        # dims those dims un-permuted.  Later passes (fuse_eltwise_chains, the recognizers)
        # read them before the next inference; without them the saved optimised model,
        # whose value_info has every dim, would be optimised further on reload.
        record, before = graph.values[inner], graph.values.get(out)
        record.dtype = before.dtype if before is not None else None
        dims = before.dims if before is not None else None
        if dims is not None and len(dims) == len(perm):
            unpermuted = [None] * len(perm)
            for axis, source in enumerate(perm):
                unpermuted[source] = dims[axis]
            record.dims = tuple(unpermuted)
        else:
            record.dims = None  # refreshed by the next inference
        self.details[f"sank Transpose below {node.op_type}"] += 1
        return True
