"""The intermediate representation every layer shares.

    onnx ModelProto --(models/onnx)--> Graph --(optimizer, engines)--> Graph --> Runtime

A Graph is nodes plus named tensors, like ONNX itself, so passes read naturally against the
ONNX spec; nodes carry parsed param dataclasses instead of raw attributes.
"""

from pplpy.ir.graph import Graph, Node, ValueInfo

__all__ = ["Graph", "Node", "ValueInfo"]
