"""The graph every layer shares: nodes joined by named values, as in ONNX.

Every value (a graph input, a constant, a node output) has one ``Value`` record: element
type, dims (ints, or str for a symbolic dim, or None where unknown), data format, the node
that produces it, the (node, input index) pairs that read it, and its data when it is a
constant.  The graph's edit methods keep producers and consumers current, so a pass asks
``graph.consumers(name)`` instead of scanning the nodes, and a graph of n nodes loads,
optimises and sorts in O(n).

A node's input name "" marks an omitted optional input.

Subgraphs (the bodies of If, Loop and Scan) are Graphs too, held by the node's param in the
field named after the ONNX attribute.  A body reads values of the graphs around it only
through graph inputs: the parser lists the outer names a body uses (its free names) in
``Graph.captured``, appends them to the body's inputs and to the node's inputs (after the
op's own), so passes of the outer graph see every value a node depends on.  The binding is
by position: the node's last ``len(body.captured)`` inputs feed the body's last inputs.
"""

import dataclasses
import heapq
import itertools
from collections.abc import MutableMapping
from dataclasses import dataclass

import numpy as np


class Node:
    """One operator instance.

    ``opset`` is the version of the node's domain the model imports, which selects the
    op's semantics; ``param`` is the op's parsed attribute dataclass (or None).  ``inputs``
    and ``outputs`` are read-only tuples: edit them through the graph, which keeps the value
    records current.
    """

    __slots__ = ("name", "op_type", "domain", "opset", "_inputs", "_outputs", "param",
                 "_graph", "_order")

    def __init__(self, name, op_type, domain, opset, inputs, outputs, param=None):
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.opset = opset
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self.param = param
        self._graph = None
        self._order = 0

    @property
    def inputs(self):
        return self._inputs

    @property
    def outputs(self):
        return self._outputs

    @property
    def key(self):
        """(domain, op_type), the registries' key; the default domain is ""."""
        return (self.domain, self.op_type)

    def describe(self):
        domain = self.domain or "ai.onnx"
        return f'node "{self.name}" ({domain}::{self.op_type}, opset {self.opset})'

    def __repr__(self):
        return f"<Node {self.name} {self.op_type} {list(self._inputs)} -> {list(self._outputs)}>"


class Value:
    """The one record of a value: type, dims, format, producer, consumers, constant data."""

    __slots__ = ("name", "dtype", "dims", "format", "producer", "consumers", "const")

    def __init__(self, name):
        self.name = name
        self.dtype = None  # DataType, once known
        self.dims = None  # tuple of int | str (symbolic) | None, once the rank is known
        self.format = None  # DataFormat, once formats are chosen
        self.producer = None  # the Node writing it (None: graph input or constant)
        self.consumers = []  # [(node, input index)]
        self.const = None  # numpy array when the value is a constant

    @property
    def is_constant(self):
        return self.const is not None

    def __repr__(self):
        return f"<Value {self.name} {self.dtype} {self.dims} {self.format}>"


@dataclass
class ValueInfo:
    """Declared type and dims of a graph input or output; a dim is int, str (symbolic) or None."""

    name: str
    data_type: object  # DataType
    dims: tuple | None


class ConstantsView(MutableMapping):
    """``graph.constants``: name -> numpy array of every constant value, backed by the value
    records (setting one makes the value a constant, deleting one drops its data)."""

    def __init__(self, graph):
        self._graph = graph
        self._names = {}  # insertion-ordered set of constant names

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        return self._graph.values[name].const

    def __setitem__(self, name, array):
        value = self._graph.value(name)
        value.const = np.asarray(array)
        self._names[name] = None

    def __delitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        del self._names[name]
        self._graph.values[name].const = None
        self._graph._forget_if_unused(name)

    def __contains__(self, name):
        return name in self._names

    def __iter__(self):
        return iter(list(self._names))

    def __len__(self):
        return len(self._names)


class Graph:
    def __init__(self, name="graph", opsets=None):
        self.name = name
        self.opsets = dict(opsets or {})  # domain -> version
        self.inputs = []  # ValueInfo of tensors fed at run time
        self.outputs = []  # ValueInfo of results
        self.value_info = {}  # name -> declared ValueInfo of intermediates
        # Initializers the model also lists as inputs: defaults a feed may override.  Built
        # as constants (the common case, folded and packed); see RuntimeBuilder.
        self.overridable = {}  # name -> declared ValueInfo
        self.defaults = {}  # input name -> default array, when built with them as inputs
        # A subgraph's inputs bound to values of the enclosing graph (see the module doc);
        # they are the last len(captured) entries of ``inputs``.
        self.captured = []
        self.values = {}  # name -> Value
        self._nodes = {}  # Node -> None, in order (a dict: O(1) removal)
        self._node_names = set()
        self._counter = itertools.count()
        self._order = itertools.count()
        self.constants = ConstantsView(self)

    def __repr__(self):
        return f"<Graph {self.name}: {len(self._nodes)} nodes>"

    # -- queries -------------------------------------------------------------------------

    @property
    def nodes(self):
        """The nodes in their current order (topological after ``topological_sort``)."""
        return list(self._nodes)

    def __len__(self):
        return len(self._nodes)

    def __contains__(self, node):
        return node in self._nodes

    @property
    def input_names(self):
        return [v.name for v in self.inputs]

    @property
    def output_names(self):
        return [v.name for v in self.outputs]

    def value(self, name):
        """The record of ``name``, created empty if the graph has none yet."""
        record = self.values.get(name)
        if record is None:
            record = self.values[name] = Value(name)
        return record

    def producer(self, name):
        record = self.values.get(name)
        return record.producer if record is not None else None

    def consumers(self, name):
        """The nodes reading ``name`` (a node reading it twice appears twice)."""
        record = self.values.get(name)
        return [node for node, _ in record.consumers] if record is not None else []

    def uses(self, name):
        """The (node, input index) pairs reading ``name``."""
        record = self.values.get(name)
        return list(record.consumers) if record is not None else []

    def is_constant(self, name):
        return name in self.constants

    def is_graph_output(self, name):
        return name in self._output_set()

    def _output_set(self):
        return {v.name for v in self.outputs}

    # -- editing -------------------------------------------------------------------------

    def unique_name(self, base):
        """A value or node name not used anywhere in the graph yet."""
        if base not in self.values and base not in self._node_names:
            return base
        while True:
            candidate = f"{base}_{next(self._counter)}"
            if candidate not in self.values and candidate not in self._node_names:
                return candidate

    def add_constant(self, name, array):
        self.constants[name] = array

    def add_node(self, node):
        """Append ``node`` and index its inputs and outputs."""
        if node._graph is not None:
            raise ValueError(f"{node.describe()} is already in a graph")
        node._graph = self
        node._order = next(self._order)
        self._nodes[node] = None
        self._node_names.add(node.name)
        for i, name in enumerate(node._inputs):
            if name:
                self.value(name).consumers.append((node, i))
        for name in node._outputs:
            if name:
                record = self.value(name)
                record.producer = node
        return node

    def remove_node(self, node):
        """Remove ``node``; values nothing refers to any more are forgotten."""
        del self._nodes[node]
        self._node_names.discard(node.name)
        node._graph = None
        for i, name in enumerate(node._inputs):
            if name:
                record = self.values[name]
                record.consumers.remove((node, i))
                self._forget_if_unused(name)
        for name in node._outputs:
            if name and self.values[name].producer is node:
                self.values[name].producer = None
                self._forget_if_unused(name)

    def remove_nodes(self, nodes):
        for node in list(nodes):
            self.remove_node(node)

    def set_input(self, node, index, name):
        """Make input ``index`` of ``node`` read ``name``."""
        old = node._inputs[index]
        if old == name:
            return
        if old:
            self.values[old].consumers.remove((node, index))
        inputs = list(node._inputs)
        inputs[index] = name
        node._inputs = tuple(inputs)
        if name:
            self.value(name).consumers.append((node, index))
        if old:
            self._forget_if_unused(old)

    def append_input(self, node, name):
        """Give ``node`` one more input, reading ``name`` ("" for an omitted one)."""
        node._inputs = node._inputs + ("",)
        self.set_input(node, len(node._inputs) - 1, name)

    def set_output(self, node, index, name):
        """Make output ``index`` of ``node`` write ``name``."""
        old = node._outputs[index]
        outputs = list(node._outputs)
        outputs[index] = name
        node._outputs = tuple(outputs)
        if old and self.values[old].producer is node:
            self.values[old].producer = None
            self._forget_if_unused(old)
        if name:
            self.value(name).producer = node

    def replace_uses(self, old, new):
        """Every node reading ``old`` reads ``new`` instead (graph outputs are not renamed)."""
        for node, index in self.uses(old):
            self.set_input(node, index, new)

    def insert_before(self, consumer, index, node):
        """Add ``node`` (one input, one output) between input ``index`` of ``consumer`` and
        that input's producer: ``consumer`` then reads ``node``'s output."""
        self.add_node(node)
        self.set_input(consumer, index, node.outputs[0])

    def _forget_if_unused(self, name):
        record = self.values.get(name)
        if (record is not None and record.producer is None and not record.consumers
                and record.const is None and name not in self._output_set()
                and name not in {v.name for v in self.inputs}):
            del self.values[name]

    def topological_sort(self):
        """Reorder the nodes so each comes after the producers of its inputs, in O(n).

        Kahn's algorithm, always taking the ready node that came first in the old order, so
        an already sorted graph keeps its order.  Raises ValueError on a cycle.
        """
        nodes = list(self._nodes)
        position = {node: i for i, node in enumerate(nodes)}
        waiting = {}
        for node in nodes:
            waiting[node] = len({self.values[n].producer for n in node._inputs
                                 if n and self.values[n].producer is not None})
        ready = [(position[n], n.name, n) for n in nodes if waiting[n] == 0]
        heapq.heapify(ready)
        ordered = []
        while ready:
            _, _, node = heapq.heappop(ready)
            ordered.append(node)
            users = {user for name in node._outputs if name
                     for user, _ in self.values[name].consumers}
            for user in users:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, (position[user], user.name, user))
        if len(ordered) != len(nodes):
            stuck = [n.name for n in nodes if waiting[n] > 0][:5]
            raise ValueError(f"the graph has a cycle through nodes {', '.join(stuck)}")
        self._nodes = dict.fromkeys(ordered)


def subgraphs(node):
    """The Graphs a node's param holds (the bodies of If, Loop, Scan), in field order."""
    param = node.param
    if param is None or not dataclasses.is_dataclass(param):
        return []
    return [getattr(param, f.name) for f in dataclasses.fields(param)
            if isinstance(getattr(param, f.name), Graph)]


def all_nodes(graph):
    """Every node of ``graph`` and of the subgraphs nested in it, outer ones first."""
    for node in graph.nodes:
        yield node
        for body in subgraphs(node):
            yield from all_nodes(body)


def bypass_node(graph, node, input_index=0, output_index=0):
    """Remove a node that passes input ``input_index`` through unchanged to output
    ``output_index`` (Identity, inference Dropout), rewiring its readers.

    Returns False (and changes nothing) when the output is a graph output that cannot be
    renamed: its source is itself a graph input or constant, or is also a graph output.
    """
    src = node.inputs[input_index]
    dst = node.outputs[output_index]
    if graph.is_graph_output(dst):
        producer = graph.producer(src)
        if producer is None or graph.is_graph_output(src):
            return False
        # Let the producer write the output name directly; its other readers follow.
        graph.remove_node(node)
        graph.set_output(producer, list(producer.outputs).index(src), dst)
        graph.replace_uses(src, dst)
        return True
    graph.remove_node(node)
    graph.replace_uses(dst, src)
    return True
