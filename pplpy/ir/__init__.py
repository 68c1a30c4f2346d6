"""The intermediate representation every layer shares.

    onnx ModelProto --(models/onnx)--> Graph --(optimizer, engines/x86 passes)--> Graph
                                             --(runtime)--> compiled plan

A Graph is nodes joined by named values, like ONNX itself, so passes read naturally against
the ONNX spec; nodes carry parsed param dataclasses instead of raw attributes, and every value
has one record (type, dims, format, producer, consumers, constant data) kept current by the
graph's edit methods.
"""

from pplpy.ir.graph import Graph, Node, Value, ValueInfo, all_nodes, bypass_node, subgraphs

__all__ = ["Graph", "Node", "Value", "ValueInfo", "all_nodes", "bypass_node", "subgraphs"]
