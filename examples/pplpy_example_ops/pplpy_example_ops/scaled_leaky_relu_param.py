"""ScaledLeakyRelu's attributes: field names are the ONNX attribute names, defaults apply
when a node omits one."""

from dataclasses import dataclass

DOMAIN = "com.example"


@dataclass(frozen=True, slots=True)
class ScaledLeakyReluParam:
    alpha: float = 0.01
    scale: float = 1.0
