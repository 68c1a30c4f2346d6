"""The param-parse registry: (domain, op_type, opsets) -> (param class, parse function).

Ops declare themselves once with ``pplpy.engines.x86.op``, which registers here; a plugin
that only needs a parser may call ``register_parser`` directly::

    register_parser("", "LeakyRelu", LeakyReluParam, since=6)

fills ``LeakyReluParam`` from the node's attributes by field name (the generic parse).
Where ONNX encodes an op awkwardly, pass ``parse=fn(node_proto, opset) -> param``.  An op
without attributes registers without a class.  Ranges are open-ended from ``since`` (see
``pplpy.common.versioned_registry``).
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

from pplpy.common.versioned_registry import LATEST_OPSET, VersionedRegistry, normalize_domain
from pplpy.errors import ModelError
from pplpy.params.onnx.tensor_value import TensorValue

__all__ = ["LATEST_OPSET", "normalize_domain", "register_parser", "find_parser",
           "registered_parsers", "generic_parse", "attribute_values"]


@dataclass(frozen=True)
class ParserEntry:
    domain: str
    op_type: str
    first: int
    last: int
    param_cls: type | None
    parse: object  # callable(node_proto, opset) -> param, or None for the generic parse

    @property
    def label(self):
        return self.param_cls.__name__ if self.param_cls else f"{self.op_type} parser"

    def parse_node(self, node_proto, opset):
        if self.parse is not None:
            return self.parse(node_proto, opset)
        if self.param_cls is None:
            return None
        return generic_parse(self.param_cls, node_proto)


_PARSERS = VersionedRegistry("parser")


def register_parser(domain, op_type, param_cls=None, since=1, until=None, parse=None,
                    versions=None):
    """Register how nodes of (domain, op_type) are parsed from opset ``since`` on.

    ``versions=(first, last)`` is the older spelling of ``since``/``until``.  Returns the
    decorator form: applied to ``fn(node_proto, opset) -> param`` it makes ``fn`` the parse
    function of this entry (the generic parse applies otherwise).
    """
    if versions is not None:
        since, until = versions
    domain = normalize_domain(domain)
    holder = _ParseHolder(parse)
    _PARSERS.add(domain, op_type, since, until, _LazyEntry(domain, op_type, param_cls, holder))

    def use_parse_function(fn):
        holder.parse = fn
        return fn

    return use_parse_function


class _ParseHolder:
    __slots__ = ("parse",)

    def __init__(self, parse):
        self.parse = parse


@dataclass(frozen=True)
class _LazyEntry:
    domain: str
    op_type: str
    param_cls: type | None
    holder: _ParseHolder

    @property
    def label(self):
        return self.param_cls.__name__ if self.param_cls else f"{self.op_type} parser"


def _entry(resolved):
    lazy = resolved.value
    return ParserEntry(resolved.domain, resolved.op_type, resolved.first, resolved.last,
                       lazy.param_cls, lazy.holder.parse)


def find_parser(domain, op_type, opset):
    """The entry covering ``opset``, or None."""
    for resolved in _PARSERS.entries_of(domain, op_type):
        if resolved.first <= opset <= resolved.last:
            return _entry(resolved)
    return None


def registered_parsers():
    """Every entry, sorted by domain and op type (for docs and tests)."""
    return [_entry(e) for e in _PARSERS.entries()]


def attribute_values(node_proto):
    """A node's attributes as plain Python values: tuples for lists, str for strings,
    TensorValue for tensors."""
    values = {}
    for attr in node_proto.attribute:
        if attr.type == AttributeProto.TENSOR:
            values[attr.name] = TensorValue(numpy_helper.to_array(attr.t))
            continue
        if attr.type == AttributeProto.SPARSE_TENSOR:
            values[attr.name] = TensorValue(sparse_to_dense(attr.sparse_tensor))
            continue
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, list):
            value = tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
        values[attr.name] = value
    return values


def sparse_to_dense(sparse):
    """Densify an ONNX SparseTensorProto."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(sparse.dims)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    if indices.ndim == 2:  # [nnz, rank] coordinates
        indices = np.ravel_multi_index(indices.T, dims)
    dense[indices.reshape(-1)] = values.reshape(-1)
    return dense.reshape(dims)


def generic_parse(param_cls, node_proto, overrides=None):
    """Fill ``param_cls`` from the node's attributes, by field name.

    Unknown attributes are an error rather than silently ignored: an attribute pplpy does not
    model could change the result.  ``overrides`` supplies defaults that depend on the opset.
    """
    values = attribute_values(node_proto)
    fields = {f.name: f for f in dataclasses.fields(param_cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ModelError(
            f'node "{node_proto.name}" ({node_proto.op_type}): attribute(s) {unknown} are not '
            f"supported by pplpy; known attributes: {sorted(fields)}"
        )
    kwargs = dict(overrides or {})
    kwargs.update(values)
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ModelError(
            f'node "{node_proto.name}" ({node_proto.op_type}): required attribute(s) '
            f"{missing} missing"
        )
    return param_cls(**kwargs)
