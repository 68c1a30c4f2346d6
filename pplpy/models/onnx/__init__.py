"""ONNX front end: the param-parse registry and the model parser.

    ModelProto -> for each NodeProto: registry[(domain, op_type)] covering the opset
               -> param dataclass -> ir.Node -> ir.Graph

Plugins call ``register_parser`` at import time to teach pplpy new ops.
"""

from pplpy.models.onnx.registry import (
    LATEST_OPSET,
    find_parser,
    generic_parse,
    register_parser,
    registered_parsers,
)
from pplpy.models.onnx import parsers  # noqa: E402,F401  (fills the registry)

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
    from pplpy.models.onnx.model_parser import load_model_proto, parse_model

    return parse_model(load_model_proto(path))
