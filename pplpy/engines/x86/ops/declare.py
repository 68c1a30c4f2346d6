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

A plugin replaces a built-in op only by saying so::

    @op("", "Relu", since=14, param=None, override=True)   # pplnn --list-ops shows who won

Without ``override=True`` adding to an op another package registered is a RegistryError:
it would silently change pplpy's answer for the later opsets.  Every registration mistake
(a class that is not an op context, a param that is not a frozen dataclass, a bad opset) is a
``RegistryError`` saying what to fix.
"""

from pplpy.common.versioned_registry import LATEST_OPSET, VersionedRegistry, provider_of
from pplpy.errors import RegistryError
from pplpy.models.onnx.registry import register_parser

__all__ = ["LATEST_OPSET", "op", "register_op", "find_op", "registered_ops", "op_providers",
           "overridden_ops"]

_OPS = VersionedRegistry("x86 op")


def _check_op_class(cls, domain, op_type):
    from pplpy.engines.x86.ops.op_context import X86OptKernel

    if not isinstance(cls, type):
        raise RegistryError(
            f"@op({domain!r}, {op_type!r}) decorates {cls!r}: it must decorate an op-context "
            f"class (derived from pplpy.engines.x86.X86OptKernel)"
        )
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if issubclass(cls, X86OptKernel) and missing:
        raise RegistryError(f"@op({domain!r}, {op_type!r}): {cls.__name__} does not define "
                            f"{', '.join(missing)} (see docs/op_context_contract.md)")


def op(domain, op_type, since=1, param=None, parse=None, until=None, override=False):
    """Class decorator: declare (domain, op_type) from opset ``since`` with this op context,
    parsed by ``parse(node_proto, opset)`` or, by default, into ``param`` from attributes.
    ``override=True`` replaces another package's declaration of the same op."""

    def declare(cls):
        _check_op_class(cls, domain, op_type)
        provider = provider_of(cls)
        register_parser(domain, op_type, param, since=since, until=until, parse=parse,
                        override=override, provider=provider)
        _OPS.add(domain, op_type, since, until, cls, provider=provider, override=override)
        return cls

    return declare


def register_op(domain, op_type, since=1, until=None, versions=None, override=False):
    """Register only the op context (for an op whose parser is registered elsewhere)."""
    if versions is not None:
        since, until = versions

    def register(cls):
        _check_op_class(cls, domain, op_type)
        _OPS.add(domain, op_type, since, until, cls, override=override)
        return cls

    return register


def find_op(domain, op_type, opset):
    """The op context class covering ``opset``, or None."""
    return _OPS.find(domain, op_type, opset)


def registered_ops():
    """[(domain, op_type, first, last, cls)] sorted, for docs and tests."""
    return [(e.domain, e.op_type, e.first, e.last, e.value) for e in _OPS.entries()]


def op_providers():
    """[(domain, op_type, first, last, provider, class name)] for every op context, sorted
    (``pplnn --list-ops``)."""
    return [(e.domain, e.op_type, e.first, e.last, e.provider, e.value.__name__)
            for e in _OPS.entries()]


def overridden_ops():
    """[(domain, op_type, first, last, provider)] of declarations an override replaced."""
    return [(e.domain, e.op_type, e.first, e.last, e.provider) for e in _OPS.overridden()]
