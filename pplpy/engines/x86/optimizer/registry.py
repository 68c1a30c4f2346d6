"""The x86 op registry: (domain, op_type, opset range) -> op context class.

    @register_op("", "LeakyRelu", versions=(6, 28))
    class LeakyReluOp(X86OptKernel): ...

A duplicate key with an overlapping range fails at import, naming both.
"""

from pplpy.errors import RegistryError
from pplpy.models.onnx.registry import LATEST_OPSET, normalize_domain

_OPS = {}  # (domain, op_type) -> [(first, last, cls)]


def register_op(domain, op_type, versions=(1, LATEST_OPSET)):
    """Class decorator: make the class the x86 op context of (domain, op_type)."""
    domain = normalize_domain(domain)
    first, last = versions
    if last is None:
        last = LATEST_OPSET

    def register(cls):
        entries = _OPS.setdefault((domain, op_type), [])
        for other_first, other_last, other in entries:
            if first <= other_last and other_first <= last:
                raise RegistryError(
                    f"x86 op {domain or 'ai.onnx'}::{op_type} versions {first}-{last} "
                    f"({cls.__name__}) overlaps {other_first}-{other_last} ({other.__name__})"
                )
        entries.append((first, last, cls))
        return cls

    return register


def find_op(domain, op_type, opset):
    """The op context class covering ``opset``, or None."""
    for first, last, cls in _OPS.get((normalize_domain(domain), op_type), ()):
        if first <= opset <= last:
            return cls
    return None


def registered_ops():
    """[(domain, op_type, first, last, cls)] sorted, for docs and tests."""
    return sorted(
        ((d, t, f, l, c) for (d, t), entries in _OPS.items() for f, l, c in entries),
        key=lambda e: (e[0], e[1], e[2]),
    )
