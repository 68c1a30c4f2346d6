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
import functools
import sys
import types
import typing
from dataclasses import dataclass

import numpy as np
import onnx.defs
from onnx import AttributeProto, helper, numpy_helper

from pplpy.common.versioned_registry import (
    LATEST_OPSET,
    VersionedRegistry,
    normalize_domain,
    provider_of,
)
from pplpy.errors import ModelError, PluginError, PplError, RegistryError
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

    @property
    def takes_graphs(self):
        """True when the parse function reads graph attributes (marked ``takes_graphs``):
        it is then called with the model's opset imports, which the subgraphs use."""
        return getattr(self.parse, "takes_graphs", False)

    def parse_node(self, node_proto, opset, name=None, opsets=None):
        """The node's param; every failure is a ModelError (a PluginError when a plugin's
        parse function raised) naming the node, and window attributes are checked."""
        name = name or node_proto.name
        check_attribute_types(node_proto, self.domain, opset, name)
        try:
            if self.takes_graphs:
                param = self.parse(node_proto, opset, opsets=dict(opsets or {}))
            elif self.parse is not None:
                param = self.parse(node_proto, opset)
            elif self.param_cls is None:
                if node_proto.attribute:
                    names = sorted(a.name for a in node_proto.attribute)
                    raise ModelError(
                        f'node "{name}" ({self.domain or "ai.onnx"}::{self.op_type}): '
                        f"attribute(s) {names} are not supported by pplpy; this op takes none")
                return None
            else:
                param = generic_parse(self.param_cls, node_proto)
        except PplError:
            raise
        except Exception as exc:  # noqa: BLE001 - a parse failure is the model's or plugin's
            where = f'node "{name}" ({self.domain or "ai.onnx"}::{self.op_type})'
            module = getattr(self.parse or self.param_cls, "__module__", "") or ""
            if module and not module.startswith("pplpy"):
                plugin = module.split(".")[0]
                raise PluginError(f"{where}: plugin {plugin!r} could not parse the node: "
                                  f"{type(exc).__name__}: {exc}", node=name,
                                  plugin=plugin) from exc
            raise ModelError(f"{where}: invalid attributes: {type(exc).__name__}: "
                             f"{exc}") from exc
        check_window_attributes(param, node_proto, self.domain, name)
        return param


_PARSERS = VersionedRegistry("parser")


def register_parser(domain, op_type, param_cls=None, since=1, until=None, parse=None,
                    versions=None, override=False, provider=None):
    """Register how nodes of (domain, op_type) are parsed from opset ``since`` on.

    ``versions=(first, last)`` is the older spelling of ``since``/``until``.  Returns the
    decorator form: applied to ``fn(node_proto, opset) -> param`` it makes ``fn`` the parse
    function of this entry (the generic parse applies otherwise).  ``override=True`` replaces
    another package's parser of the same op (see ``pplpy.common.versioned_registry``);
    ``provider`` is the registering package (default: where param_cls / parse / the caller
    lives).  Mistakes raise RegistryError.
    """
    if versions is not None:
        since, until = versions
    _check_registration(domain, op_type, param_cls, since, until, parse)
    if provider is None:
        owner = parse or param_cls
        provider = (provider_of(owner) if owner is not None
                    else sys._getframe(1).f_globals.get("__name__", "?").split(".")[0])
    domain = normalize_domain(domain)
    holder = _ParseHolder(parse)
    _PARSERS.add(domain, op_type, since, until, _LazyEntry(domain, op_type, param_cls, holder),
                 provider=provider, override=override)

    def use_parse_function(fn):
        holder.parse = fn
        return fn

    return use_parse_function


def _check_registration(domain, op_type, param_cls, since, until, parse):
    """RegistryError saying what to fix for a malformed registration."""
    what = f"register_parser({domain!r}, {op_type!r})"
    if not isinstance(domain, str):
        raise RegistryError(f"{what}: domain must be a str such as '' or 'com.example', got "
                            f"{type(domain).__name__}")
    if not isinstance(op_type, str) or not op_type.isidentifier():
        raise RegistryError(f"{what}: op_type must be the ONNX op name (an identifier), got "
                            f"{op_type!r}")
    for label, value in (("since", since), ("until", until)):
        if value is None and label == "until":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RegistryError(f"{what}: {label} must be an opset number >= 1, got {value!r}")
    if param_cls is not None and not (isinstance(param_cls, type)
                                      and dataclasses.is_dataclass(param_cls)):
        raise RegistryError(f"{what}: param must be a dataclass (decorate it with "
                            f"@dataclass(frozen=True)), got {param_cls!r}")
    if param_cls is not None and not param_cls.__dataclass_params__.frozen:
        raise RegistryError(f"{what}: param class {param_cls.__name__} must be frozen "
                            f"(@dataclass(frozen=True)): params are shared and hashed")
    if parse is not None and not callable(parse):
        raise RegistryError(f"{what}: parse must be a function (node_proto, opset) -> param, "
                            f"got {parse!r}")


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


def parser_entries(domain, op_type):
    """The resolved VersionedEntry list of one op (with providers), oldest first."""
    return _PARSERS.entries_of(domain, op_type)


def find_parser(domain, op_type, opset):
    """The entry covering ``opset``, or None."""
    resolved = _PARSERS.find_entry(domain, op_type, opset)
    return _entry(resolved) if resolved is not None else None


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


_ATTR_NAMES = {v: k for k, v in AttributeProto.AttributeType.items()}


def _schema(domain, op_type, opset):
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - onnx raises SchemaError; no schema: nothing to check
        return None


@functools.lru_cache(maxsize=None)
def inputs_typed_as_first(domain, op_type, opset):
    """(names, repeats_from): {position: formal name} of the inputs after the first whose
    schema type is input 0's type variable (Conv's W and B share X's T; MatMul's B, A's),
    and, where the last formal input repeats with that type (Concat's, Sum's), the position
    from which every input does (else None).  Nothing for ops without an ONNX schema
    (pplpy's own, plugins')."""
    schema = _schema(normalize_domain(domain), op_type, opset) if domain in (
        "", "ai.onnx", "ai.onnx.ml") else None
    if schema is None or not schema.inputs:
        return {}, None
    first = schema.inputs[0].type_str
    if first not in {c.type_param_str for c in schema.type_constraints}:
        return {}, None  # a fixed type (tensor(int64)): nothing shared
    same = {i: formal.name for i, formal in enumerate(schema.inputs)
            if i and formal.type_str == first}
    last = schema.inputs[-1]
    repeats = (last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
               and last.type_str == first and last.is_homogeneous)
    return same, len(schema.inputs) - 1 if repeats else None


def check_attribute_types(node_proto, domain, opset, name=None):
    """An ONNX-domain node against its schema: as many inputs and outputs as the op has, and
    each attribute of the type the schema declares (``strides=[1.5, 1.5]`` is FLOATS where
    Conv wants INTS): ModelError otherwise."""
    if domain not in ("", "ai.onnx.ml"):
        return
    schema = _schema(domain, node_proto.op_type, opset)
    if schema is None:
        return
    n_in, n_out = len(node_proto.input), len(node_proto.output)
    if (schema.min_output <= n_out <= schema.max_output and n_in <= schema.max_input
            and not node_proto.attribute and n_in >= schema.min_input and all(node_proto.input)):
        return  # the common case, checked without building messages
    where = (f'node "{name or node_proto.name}" ({domain or "ai.onnx"}::{node_proto.op_type}, '
             f"opset {opset})")
    if n_out > schema.max_output:
        raise ModelError(f"{where} has {n_out} outputs {list(node_proto.output)}; "
                         f"{node_proto.op_type} produces at most {schema.max_output}")
    if n_out < schema.min_output:
        raise ModelError(f"{where} has {n_out} outputs; {node_proto.op_type} needs at least "
                         f"{schema.min_output}")
    if n_in > schema.max_input:
        raise ModelError(f"{where} has {n_in} inputs {list(node_proto.input)}; "
                         f"{node_proto.op_type} takes at most {schema.max_input}")
    # Inputs the schema marks optional may be "" even before the last required one
    # (Scan 8's sequence_lens).
    optional = {i for i, formal in enumerate(schema.inputs)
                if formal.option == onnx.defs.OpSchema.FormalParameterOption.Optional}
    present = len([i for k, i in enumerate(node_proto.input[:schema.min_input])
                   if i or k in optional])
    if present < schema.min_input:
        raise ModelError(f"{where} has {present} of the {schema.min_input} inputs "
                         f"{node_proto.op_type} requires")
    for attr in node_proto.attribute:
        declared = schema.attributes.get(attr.name)
        if declared is None:
            continue  # unknown attributes are reported by the parse, with the known ones
        want = int(declared.type)
        if want != int(attr.type) and want != AttributeProto.UNDEFINED:
            raise ModelError(
                f'node "{name or node_proto.name}" ({domain or "ai.onnx"}::{node_proto.op_type}'
                f", opset {opset}): attribute {attr.name!r} is "
                f"{_ATTR_NAMES.get(attr.type, attr.type)} {_show(attr)}, but the op takes "
                f"{_ATTR_NAMES.get(want, want)}"
            )


def _show(attr):
    try:
        value = helper.get_attribute_value(attr)
    except Exception:  # noqa: BLE001 - only for the message
        return ""
    text = repr(list(value) if isinstance(value, (list, tuple)) else value)
    return text if len(text) < 60 else text[:57] + "..."


# Window attributes of Conv / pooling style params (those with a ``strides`` field): what
# each may hold.  Pad's ``pads`` may be negative (cropping), hence the ``strides`` test.
_WINDOW_RULES = {
    "kernel_shape": (1, "positive"),
    "strides": (1, "positive"),
    "dilations": (1, "positive"),
    "pads": (0, ">= 0"),
}


def check_window_attributes(param, node_proto, domain, name=None):
    """Kernel sizes, strides and dilations are >= 1 and pads >= 0 (ModelError naming the
    node and attribute otherwise); ``group`` is >= 1."""
    if param is None or not dataclasses.is_dataclass(param):
        return
    fields = {f.name for f in dataclasses.fields(param)}
    if "strides" not in fields:
        return
    where = f'node "{name or node_proto.name}" ({domain or "ai.onnx"}::{node_proto.op_type})'
    for attr, (low, allowed) in _WINDOW_RULES.items():
        value = getattr(param, attr, None) if attr in fields else None
        if value is None:
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        bad = [v for v in values if not isinstance(v, (int, np.integer)) or v < low]
        if bad:
            raise ModelError(f"{where}: attribute {attr!r} is {list(values)}; each value must "
                             f"be {allowed}")
    group = getattr(param, "group", None) if "group" in fields else None
    if group is not None and (not isinstance(group, (int, np.integer)) or group < 1):
        raise ModelError(f"{where}: attribute 'group' is {group}; it must be >= 1")


def _accepts(hint, value):
    """Whether ``value`` (a parsed attribute) fits the dataclass field type ``hint``; unknown
    hints accept anything."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(h, value) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, int))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is tuple or origin is tuple:
        if not isinstance(value, tuple):
            return False
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_accepts(args[0], v) for v in value)
        return True
    if hint is TensorValue:
        return isinstance(value, TensorValue)
    return True


def _coerce(hint, value):
    """An INT attribute given for a float field becomes a float."""
    if hint is float or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                         and float in typing.get_args(hint)):
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
    return value


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
    try:
        hints = typing.get_type_hints(param_cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no type check
        hints = {}
    for name, value in values.items():
        hint = hints.get(name)
        if hint is None:
            continue
        if not _accepts(hint, value):
            shown = list(value) if isinstance(value, tuple) else value
            raise ModelError(
                f'node "{node_proto.name}" ({node_proto.op_type}): attribute {name!r} is '
                f"{shown!r} ({type(value).__name__}), but {param_cls.__name__}.{name} takes "
                f"{_hint_name(hint)}"
            )
        values[name] = _coerce(hint, value)
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


def _hint_name(hint):
    return getattr(hint, "__name__", None) if not typing.get_args(hint) else str(hint)
