"""A node's param back to ONNX attributes: the inverse of the generic parse
(``registry.generic_parse``), for saving a graph as ONNX.

The parsers fill a param dataclass from attributes by field name, so the inverse writes each
field under its own name: None is skipped, bool and int become INT, float FLOAT, str STRING,
tuples of them the list types (the op's schema decides the type where it has the
attribute, so an empty list or a float field holding a whole number is written as the op
wants), a TensorValue a TENSOR.  Anything else (a subgraph, an enum, an array) cannot be
written.

Some ops parse with code of their own (Cast's type names, defaults that depend on the
opset); rather than mirror each, every result is checked by reading it back with the parser
pplpy will use: the attributes are accepted only if they give the same param.  Fields equal
to their default are left out first (the parse gives them back, and a float default such as
0.01 does not survive float32 otherwise); if that reads back differently, every field is
written; if that does too, the node cannot be written and ``ParamWriteError`` says why.
"""

import dataclasses
import enum

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from pplpy.errors import PplError
from pplpy.params.onnx.tensor_value import TensorValue


class ParamWriteError(PplError):
    """A node's param cannot be written as ONNX attributes that pplpy reads back the same."""


def _schema_types(domain, op_type, opset):
    """{attribute name: AttributeProto type} from the ONNX schema, {} without one."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - no schema (pplpy domain, plugins): infer from values
        return {}
    return {name: int(a.type) for name, a in schema.attributes.items()}


def _attribute(name, value, attr_type):
    """One AttributeProto; ValueError for a value no attribute type holds."""
    if isinstance(value, TensorValue):
        return helper.make_attribute(name, numpy_helper.from_array(value.array, name))
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        items = [int(v) if isinstance(v, (bool, np.bool_)) else
                 (v.item() if isinstance(v, np.generic) else v) for v in value]
        if not all(isinstance(v, (int, float, str)) for v in items):
            raise ValueError(f"a list holding {sorted({type(v).__name__ for v in items})}")
        if attr_type == AttributeProto.FLOATS or (
                attr_type is None and any(isinstance(v, float) for v in items)):
            items = [float(v) for v in items]
        if not items and attr_type not in (AttributeProto.INTS, AttributeProto.FLOATS,
                                           AttributeProto.STRINGS):
            raise ValueError("an empty list whose element type is unknown")
        return helper.make_attribute(name, items, attr_type=attr_type if not items else None)
    if isinstance(value, (int, float, str)) and not isinstance(value, enum.Enum):
        if attr_type == AttributeProto.FLOAT:
            value = float(value)
        return helper.make_attribute(name, value)
    raise ValueError(f"a {type(value).__name__}")


def param_attributes(param, attr_types=None, skip_defaults=True):
    """The attributes of ``param`` (a dataclass or None), field by field; ValueError naming
    the field for a value that cannot be written."""
    if param is None:
        return []
    if hasattr(param, "onnx_attributes"):  # a param that says how it is written
        return [helper.make_attribute(k, v) for k, v in param.onnx_attributes().items()]
    if not dataclasses.is_dataclass(param):
        raise ValueError(f"param {param!r} is not a dataclass")
    attr_types = attr_types or {}
    attrs = []
    for field in dataclasses.fields(param):
        value = getattr(param, field.name)
        if value is None:
            continue
        if skip_defaults and field.default is not dataclasses.MISSING and _same(
                value, field.default):
            continue
        try:
            attrs.append(_attribute(field.name, value, attr_types.get(field.name)))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"field {field.name!r} holds {exc}, which no ONNX attribute "
                             f"holds") from None
    return attrs


def _canonical(value):
    """A comparable form: floats as float32 bytes (attributes are float32), containers
    recursively."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return np.float32(value).tobytes()
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, TensorValue):
        return ("tensor", str(value.array.dtype), value.array.shape, value.array.tobytes())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                tuple((f.name, _canonical(getattr(value, f.name)))
                      for f in dataclasses.fields(value)))
    return value


def _same(a, b):
    try:
        return _canonical(a) == _canonical(b)
    except Exception:  # noqa: BLE001 - values that do not compare are not the same
        return False


def write_attributes(param, where, reparse, schema_key=None):
    """AttributeProtos for ``param`` that ``reparse(attributes)`` (the parser pplpy reads the
    node with) turns back into the same param; ``schema_key`` = (domain, op_type, opset) of
    the ONNX schema whose attribute types to use.  ParamWriteError naming ``where`` (the
    node) otherwise."""
    attr_types = _schema_types(*schema_key) if schema_key else {}
    reasons = []
    for skip_defaults in (True, False):
        try:
            attrs = param_attributes(param, attr_types, skip_defaults)
        except ValueError as exc:
            raise ParamWriteError(f"{where}: cannot be written as ONNX: {exc}") from None
        try:
            back = reparse(attrs)
        except PplError as exc:
            reasons.append(str(exc).splitlines()[0])
            continue
        if _same(back, param):
            return attrs
        reasons.append(f"reads back as {back!r}, not {param!r}")
    raise ParamWriteError(f"{where}: its param cannot be written as ONNX attributes that pplpy "
                          f"reads back the same: {'; '.join(dict.fromkeys(reasons))}")
