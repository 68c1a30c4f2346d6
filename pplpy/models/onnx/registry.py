"""The param-parse registry: (domain, op_type, opset range) -> (param class, parse function).

An op registers once, where its parser is defined::

    register_parser("", "LeakyRelu", LeakyReluParam, versions=(6, 28))

fills ``LeakyReluParam`` from the node's attributes by field name (the generic parse).
Where ONNX encodes an op awkwardly, decorate a custom parse function instead::

    @register_parser("", "Softmax", SoftmaxParam, versions=(1, 28))
    def parse_softmax(node_proto, opset): ...

An op without attributes registers without a class.  Ranges are inclusive opsets of the
node's domain; a second registration whose range overlaps an existing one fails at import.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

from pplpy.errors import ModelError, RegistryError
from pplpy.params.onnx.tensor_value import TensorValue

# The newest ONNX opset whose definitions of pplpy's ops have been checked against the
# parsers (a test compares every param with onnx.defs at both ends of its range).
LATEST_OPSET = 28


def normalize_domain(domain):
    """ONNX writes the default domain as "" or "ai.onnx"; pplpy uses ""."""
    return "" if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class ParserEntry:
    domain: str
    op_type: str
    first: int
    last: int
    param_cls: type | None
    parse: object  # callable(node_proto, opset) -> param, or None for the generic parse

    def parse_node(self, node_proto, opset):
        if self.parse is not None:
            return self.parse(node_proto, opset)
        if self.param_cls is None:
            return None
        return generic_parse(self.param_cls, node_proto)


_ENTRIES = {}  # (domain, op_type) -> [ParserEntry]


def register_parser(domain, op_type, param_cls=None, versions=(1, LATEST_OPSET)):
    """Register how nodes of (domain, op_type) are parsed for opsets in ``versions``.

    Returns a decorator that, applied to ``fn(node_proto, opset) -> param``, makes ``fn`` the
    parse function of this entry; used as a plain call, the generic parse applies.
    """
    domain = normalize_domain(domain)
    first, last = versions
    if last is None:
        last = LATEST_OPSET
    if first > last:
        raise RegistryError(f"{domain}::{op_type}: empty version range {versions}")
    entries = _ENTRIES.setdefault((domain, op_type), [])
    for other in entries:
        if first <= other.last and other.first <= last:
            raise RegistryError(
                f"parser for {domain or 'ai.onnx'}::{op_type} versions {first}-{last} overlaps "
                f"the registered range {other.first}-{other.last}"
            )
    entry = ParserEntry(domain, op_type, first, last, param_cls, None)
    entries.append(entry)
    position = len(entries) - 1

    def use_parse_function(fn):
        entries[position] = dataclasses.replace(entry, parse=fn)
        return fn

    return use_parse_function


def find_parser(domain, op_type, opset):
    """The entry covering ``opset``, or None."""
    for entry in _ENTRIES.get((normalize_domain(domain), op_type), ()):
        if entry.first <= opset <= entry.last:
            return entry
    return None


def registered_parsers():
    """Every entry, sorted by domain and op type (for docs and tests)."""
    return sorted(
        (e for entries in _ENTRIES.values() for e in entries),
        key=lambda e: (e.domain, e.op_type, e.first),
    )


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
