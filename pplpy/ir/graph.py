"""The engine-independent graph: nodes joined by named tensors (edges), as in ONNX.

Edges are identified by name.  A node's input name "" marks an omitted optional input.
Constants (initializers and folded values) live in ``Graph.constants``; graph inputs are
the tensors a caller feeds at run time.  Editing helpers keep names unique and the node
list in topological order when asked to.
"""

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Node:
    """One operator instance.

    ``opset`` is the version of the node's domain the model imports, which selects the
    op's semantics; ``param`` is the op's parsed attribute dataclass (or None).
    """

    name: str
    op_type: str
    domain: str
    opset: int
    inputs: list
    outputs: list
    param: object = None

    @property
    def key(self):
        """(domain, op_type), the registries' key; the default domain is ""."""
        return (self.domain, self.op_type)

    def describe(self):
        domain = self.domain or "ai.onnx"
        return f'node "{self.name}" ({domain}::{self.op_type}, opset {self.opset})'


@dataclass
class ValueInfo:
    """Declared type and dims of a graph input or output; a dim is int, str (symbolic) or None."""

    name: str
    data_type: object  # DataType
    dims: tuple | None


@dataclass(eq=False)
class Graph:
    name: str = "graph"
    nodes: list = field(default_factory=list)
    constants: dict = field(default_factory=dict)  # name -> numpy array
    inputs: list = field(default_factory=list)  # ValueInfo of tensors fed at run time
    outputs: list = field(default_factory=list)  # ValueInfo of results
    opsets: dict = field(default_factory=dict)  # domain -> version
    value_info: dict = field(default_factory=dict)  # name -> ValueInfo of intermediates

    _names: itertools.count = field(default_factory=itertools.count, repr=False)

    # -- queries -------------------------------------------------------------------------

    @property
    def input_names(self):
        return [v.name for v in self.inputs]

    @property
    def output_names(self):
        return [v.name for v in self.outputs]

    def producers(self):
        """Map tensor name -> the node producing it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self):
        """Map tensor name -> list of nodes reading it (a node reading twice appears twice)."""
        result = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    result.setdefault(name, []).append(node)
        return result

    def is_constant(self, name):
        return name in self.constants

    # -- editing -------------------------------------------------------------------------

    def unique_name(self, base):
        """A tensor or node name not used anywhere in the graph yet."""
        used = self._all_names()
        if base not in used:
            return base
        while True:
            candidate = f"{base}_{next(self._names)}"
            if candidate not in used:
                return candidate

    def _all_names(self):
        names = set(self.constants) | set(self.input_names) | set(self.output_names)
        for node in self.nodes:
            names.add(node.name)
            names.update(node.inputs)
            names.update(node.outputs)
        return names

    def add_constant(self, name, value):
        self.constants[name] = np.asarray(value)

    def remove_nodes(self, dead):
        dead = set(map(id, dead))
        self.nodes = [n for n in self.nodes if id(n) not in dead]

    def rename_input(self, old, new):
        """Make every consumer of tensor ``old`` read ``new`` instead (outputs included)."""
        for node in self.nodes:
            node.inputs = [new if name == old else name for name in node.inputs]

    def topological_sort(self):
        """Reorder ``nodes`` so each node comes after the producers of its inputs.

        Kahn's algorithm, always taking the ready node that came first in the old order, so
        an already sorted graph keeps its order.  Raises ValueError on a cycle.
        """
        producers = self.producers()
        index = {id(n): i for i, n in enumerate(self.nodes)}
        waiting = {id(n): 0 for n in self.nodes}
        users = {id(n): [] for n in self.nodes}
        for node in self.nodes:
            for name in set(node.inputs):
                if name in producers:
                    waiting[id(node)] += 1
                    users[id(producers[name])].append(node)
        ready = [(index[id(n)], n) for n in self.nodes if waiting[id(n)] == 0]
        heapq.heapify(ready)
        ordered = []
        while ready:
            _, node = heapq.heappop(ready)
            ordered.append(node)
            for user in users[id(node)]:
                waiting[id(user)] -= 1
                if waiting[id(user)] == 0:
                    heapq.heappush(ready, (index[id(user)], user))
        if len(ordered) != len(self.nodes):
            stuck = [n.name for n in self.nodes if waiting[id(n)] > 0][:5]
            raise ValueError(f"the graph has a cycle through nodes {', '.join(stuck)}")
        self.nodes = ordered


def bypass_node(graph, node, input_index=0, output_index=0):
    """Remove a node that passes input ``input_index`` through unchanged to output
    ``output_index`` (Identity, inference Dropout), rewiring its readers.

    Returns False (and changes nothing) when the output is a graph output that cannot be
    renamed: its source is itself a graph input or constant, or is also a graph output.
    """
    src = node.inputs[input_index]
    dst = node.outputs[output_index]
    output_names = set(graph.output_names)
    if dst in output_names:
        producers = graph.producers()
        if src not in producers or src in output_names:
            return False
        # Let the producer write the output name directly.
        producer = producers[src]
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        graph.rename_input(src, dst)
    else:
        graph.rename_input(dst, src)
    graph.remove_nodes([node])
    return True
