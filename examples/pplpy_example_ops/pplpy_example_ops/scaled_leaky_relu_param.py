"""ScaledLeakyRelu's attributes, and how pplpy's ONNX parser fills them."""

from dataclasses import dataclass

from pplpy.models.onnx import register_parser

DOMAIN = "com.example"


@dataclass(frozen=True, slots=True)
class ScaledLeakyReluParam:
    """Field names are the ONNX attribute names; defaults apply when a node omits one."""

    alpha: float = 0.01
    scale: float = 1.0


# Opset 1 of our domain; the generic parse fills the dataclass from the node's attributes by
# field name and rejects attributes it does not know.
register_parser(DOMAIN, "ScaledLeakyRelu", ScaledLeakyReluParam, versions=(1, 1))
