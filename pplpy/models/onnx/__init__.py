"""ONNX front end: the param-parse registry and the model parser.

    ModelProto -> for each NodeProto: registry[(domain, op_type)] covering the opset
               -> param dataclass -> ir.Node -> ir.Graph

Ops are declared with ``pplpy.engines.x86.op``, which registers their parsers here;
plugins may also call ``register_parser`` directly.
"""

from pplpy.models.onnx.registry import (
    LATEST_OPSET,
    find_parser,
    generic_parse,
    register_parser,
    registered_parsers,
)

__all__ = [
    "LATEST_OPSET",
    "find_parser",
    "generic_parse",
    "register_parser",
    "registered_parsers",
    "load_model",
]


def load_model(path):
    """Parse the ONNX file at ``path``; returns (graph, unparsed nodes)."""
    from pplpy.models.onnx.model_parser import read_model

    return read_model(path)
