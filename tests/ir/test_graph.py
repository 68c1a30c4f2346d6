"""The IR's edit methods keep every value's producer and consumers current."""

import time

import numpy as np

from pplpy.ir import Graph, Node, ValueInfo, bypass_node
from pplpy.optimizer.passes.dead_code_elimination import DeadCodeElimination


def chain(n):
    graph = Graph()
    graph.inputs.append(ValueInfo("x", None, (1,)))
    graph.outputs.append(ValueInfo(f"v{n}", None, (1,)))
    for i in range(n):
        graph.add_node(Node(f"n{i}", "Relu", "", 17, [f"v{i}" if i else "x"], [f"v{i + 1}"]))
    return graph


def check_indices(graph):
    """Every record agrees with a scan of the nodes."""
    producers, consumers = {}, {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name:
                consumers.setdefault(name, []).append((node, i))
        for name in node.outputs:
            if name:
                producers[name] = node
    for name, record in graph.values.items():
        assert record.producer is producers.get(name), name
        key = lambda use: (id(use[0]), use[1])  # noqa: E731
        assert sorted(record.consumers, key=key) == sorted(consumers.get(name, []), key=key), name
    assert set(producers) <= set(graph.values) and set(consumers) <= set(graph.values)


def test_add_and_query():
    graph = chain(3)
    check_indices(graph)
    assert graph.producer("v2").name == "n1"
    assert [n.name for n in graph.consumers("v1")] == ["n1"]


def test_set_input_and_output_move_the_indices():
    graph = chain(3)
    n2 = graph.nodes[2]
    graph.set_input(n2, 0, "x")
    assert graph.consumers("v2") == [] and n2 in graph.consumers("x")
    graph.set_output(graph.nodes[0], 0, "w")
    assert graph.producer("w").name == "n0"
    check_indices(graph)


def test_remove_node_and_replace_uses():
    graph = chain(4)
    n1 = graph.nodes[1]
    graph.remove_node(n1)
    graph.replace_uses("v2", "v1")
    assert [n.name for n in graph.consumers("v1")] == ["n2"]
    assert "v2" not in graph.values  # nothing refers to it any more
    check_indices(graph)


def test_insert_before_and_bypass():
    graph = chain(2)
    consumer = graph.nodes[1]
    graph.insert_before(consumer, 0, Node("id", "Identity", "", 17, ["v1"], ["v1b"]))
    assert consumer.inputs == ("v1b",)
    graph.topological_sort()
    assert [n.name for n in graph.nodes] == ["n0", "id", "n1"]
    assert bypass_node(graph, graph.nodes[1])
    assert consumer.inputs == ("v1",)
    check_indices(graph)


def test_bypass_into_a_graph_output_renames_the_producer():
    graph = chain(2)
    graph.add_node(Node("id", "Identity", "", 17, ["v2"], ["out"]))
    graph.outputs[0] = ValueInfo("out", None, (1,))
    assert bypass_node(graph, graph.nodes[-1])
    assert graph.producer("out").name == "n1"
    check_indices(graph)


def test_constants_view_is_backed_by_records():
    graph = chain(1)
    graph.constants["w"] = np.ones(3, np.float32)
    assert graph.values["w"].is_constant and "w" in graph.constants
    del graph.constants["w"]
    assert "w" not in graph.constants and "w" not in graph.values


def test_topological_sort_orders_and_detects_cycles():
    graph = chain(5)
    nodes = graph.nodes
    graph._nodes = dict.fromkeys(reversed(nodes))
    graph.topological_sort()
    assert graph.nodes == nodes
    graph.set_input(nodes[0], 0, "v5")
    try:
        graph.topological_sort()
    except ValueError as exc:
        assert "cycle" in str(exc)
    else:
        raise AssertionError("a cycle was not detected")


def test_editing_and_dce_are_linear():
    """2,000 and 8,000 nodes: building, sorting and DCE grow about linearly (a quadratic
    algorithm would take 16x longer for 4x the nodes; allow 10x for noise and the GC)."""

    def cost(n):
        start = time.perf_counter()
        graph = chain(n)
        graph.topological_sort()
        graph.add_node(Node("dead", "Relu", "", 17, ["x"], ["unused"]))
        assert DeadCodeElimination().run(graph, None) == 1
        check = time.perf_counter() - start
        return check

    small, large = min(cost(2000) for _ in range(3)), min(cost(8000) for _ in range(3))
    assert large < 10 * small, (small, large)
