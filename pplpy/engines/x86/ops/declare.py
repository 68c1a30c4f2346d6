"""Declaring an op: one decorator registers its parser, its param class and its op context.

    @op("", "LeakyRelu", since=6, param=LeakyReluParam)
    class LeakyRelu(ElementwiseOp): ...

``since`` is the opset where the op took the meaning the class implements; the range is
open-ended (it lasts until another declaration of the same op starts, or up to
``LATEST_OPSET``).  A second range appears only where the spec changed the op, by stacking::

    @op("", "Clip", since=6, param=ClipParam, parse=parse_clip_attributes)  # 6-10: attributes
    @op("", "Clip", since=11)                                               # 11-: inputs
    class Clip(ElementwiseOp): ...

Underneath are two registries keyed by (domain, op_type): the ONNX parser registry
(``pplpy.models.onnx.registry``) and the x86 op-context registry below.  A duplicate start
opset or an overlapping closed range fails at import with a ``RegistryError``.
"""

from pplpy.common.versioned_registry import LATEST_OPSET, VersionedRegistry
from pplpy.models.onnx.registry import register_parser

__all__ = ["LATEST_OPSET", "op", "register_op", "find_op", "registered_ops"]

_OPS = VersionedRegistry("x86 op")


def op(domain, op_type, since=1, param=None, parse=None, until=None):
    """Class decorator: declare (domain, op_type) from opset ``since`` with this op context,
    parsed by ``parse(node_proto, opset)`` or, by default, into ``param`` from attributes."""

    def declare(cls):
        register_parser(domain, op_type, param, since=since, until=until, parse=parse)
        _OPS.add(domain, op_type, since, until, cls)
        return cls

    return declare


def register_op(domain, op_type, since=1, until=None, versions=None):
    """Register only the op context (for an op whose parser is registered elsewhere)."""
    if versions is not None:
        since, until = versions

    def register(cls):
        _OPS.add(domain, op_type, since, until, cls)
        return cls

    return register


def find_op(domain, op_type, opset):
    """The op context class covering ``opset``, or None."""
    return _OPS.find(domain, op_type, opset)


def registered_ops():
    """[(domain, op_type, first, last, cls)] sorted, for docs and tests."""
    return [(e.domain, e.op_type, e.first, e.last, e.value) for e in _OPS.entries()]
