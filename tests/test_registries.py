"""The registries: param dataclasses agree with the ONNX schemas, ranges never overlap, and
docs/supported_ops.md says exactly what is registered."""

import dataclasses
import pathlib

import onnx
import pytest

from pplpy.engines.x86.ops.declare import find_op, register_op, registered_ops
from pplpy.errors import RegistryError
from pplpy.models.onnx.registry import find_parser, register_parser, registered_parsers
from pplpy.tools.supported_ops import render

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Fields whose default a custom parse function supplies (opset-dependent, or the float
# range for Clip-6's bounds, kept None in the param of Clip-11 and later).
CUSTOM_DEFAULTS = {("Softmax", "axis"), ("Clip", "min"), ("Clip", "max")}


def _schema_entries():
    for entry in registered_parsers():
        if entry.domain != "" or entry.param_cls is None:
            continue
        for opset in (entry.first, entry.last):
            yield entry, opset


@pytest.mark.parametrize("entry,opset", list(_schema_entries()),
                         ids=lambda v: getattr(v, "op_type", str(v)))
def test_param_fields_match_the_onnx_schema(entry, opset):
    """Every field is an attribute of the op at both ends of its range, and a field's default
    is the schema's default where the schema has one."""
    schema = onnx.defs.get_schema(entry.op_type, opset, "")
    attributes = schema.attributes
    for field in dataclasses.fields(entry.param_cls):
        if field.name not in attributes:
            # Attributes that exist only in part of a range (BatchNormalization's spatial in
            # 7, training_mode from 14; MaxPool's storage_order from 8 ...) must exist at
            # the other end.
            other = onnx.defs.get_schema(entry.op_type, entry.last if opset == entry.first
                                         else entry.first, "")
            assert field.name in other.attributes or entry.parse is not None, (
                f"{entry.op_type}-{opset}: field {field.name} is no attribute")
            continue
        attr = attributes[field.name]
        if (entry.op_type, field.name) in CUSTOM_DEFAULTS:
            continue
        if not attr.default_value.name:
            continue
        default = onnx.helper.get_attribute_value(attr.default_value)
        if isinstance(default, bytes):
            default = default.decode()
        if isinstance(default, list):
            default = tuple(default)
        if field.default is dataclasses.MISSING:
            continue
        if isinstance(default, float):
            assert field.default == pytest.approx(default), (entry.op_type, field.name)
        else:
            assert field.default == default, (entry.op_type, field.name)


def test_every_parsed_onnx_op_has_an_x86_op_and_back():
    for entry in registered_parsers():
        for opset in (entry.first, entry.last):
            assert find_op(entry.domain, entry.op_type, opset) is not None, entry
    for domain, op_type, first, last, _ in registered_ops():
        if domain == "pplpy":
            continue
        for opset in (first, last):
            assert find_parser(domain, op_type, opset) is not None, (op_type, opset)


def test_ranges_are_open_ended_from_since():
    """A declaration lasts until the next one of the same op starts, or to LATEST_OPSET."""
    from pplpy.models.onnx.registry import LATEST_OPSET

    register_parser("test.registry", "Open", None, since=3)
    register_parser("test.registry", "Open", None, since=9)
    assert find_parser("test.registry", "Open", 2) is None
    assert (find_parser("test.registry", "Open", 3).first,
            find_parser("test.registry", "Open", 8).last) == (3, 8)
    assert find_parser("test.registry", "Open", LATEST_OPSET).first == 9
    assert find_parser("test.registry", "Open", LATEST_OPSET + 1) is None


def test_op_declares_parser_and_context_at_once():
    from pplpy.engines.x86.ops.declare import op

    @dataclasses.dataclass(frozen=True)
    class OnceParam:
        k: int = 1

    @op("test.registry", "Once", since=2, param=OnceParam)
    class OnceOp:
        pass

    assert find_parser("test.registry", "Once", 2).param_cls is OnceParam
    assert find_op("test.registry", "Once", 5) is OnceOp
    assert find_op("test.registry", "Once", 1) is None


def test_overlapping_registrations_fail():
    register_parser("test.registry", "Thing", None, versions=(1, 5))
    with pytest.raises(RegistryError, match="overlap"):
        register_parser("test.registry", "Thing", None, versions=(5, 9))
    register_parser("test.registry", "Thing", None, versions=(6, 9))  # adjacent is fine
    with pytest.raises(RegistryError, match="overlap"):
        register_parser("test.registry", "Thing", None, since=6)  # same start

    @register_op("test.registry", "Thing", versions=(1, 5))
    class ThingOp:  # noqa: D401 - a stand-in class is enough for the registry
        pass

    with pytest.raises(RegistryError, match="overlap"):
        @register_op("test.registry", "Thing", versions=(3, 4))
        class OtherThingOp:
            pass


def test_supported_ops_doc_is_current():
    committed = (ROOT / "docs" / "supported_ops.md").read_text()
    assert committed == render(), (
        "docs/supported_ops.md is stale: run python -m pplpy.tools.supported_ops")
