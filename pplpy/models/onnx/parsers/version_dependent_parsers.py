"""Parse functions for ops whose ONNX encoding changed between opsets: an attribute became
an input, or a default changed.  Each registers one entry per encoding."""

import numpy as np

from pplpy.errors import ModelError
from pplpy.models.onnx.registry import (
    LATEST_OPSET,
    attribute_values,
    generic_parse,
    register_parser,
)
from pplpy.params.onnx import (
    ClipParam,
    ConstantOfShapeParam,
    ConstantParam,
    DropoutParam,
    SoftmaxParam,
    TensorValue,
    UnsqueezeParam,
)


@register_parser("", "Clip", ClipParam, versions=(6, 10))
def parse_clip_attributes(node_proto, opset):
    """Clip-6: min/max attributes, defaulting to the float range."""
    values = attribute_values(node_proto)
    f32 = np.finfo(np.float32)
    return ClipParam(min=float(values.get("min", f32.min)), max=float(values.get("max", f32.max)))


# Clip-11 and later: min and max are optional inputs; nothing to parse.
register_parser("", "Clip", None, versions=(11, LATEST_OPSET))


@register_parser("", "Softmax", SoftmaxParam, versions=(1, 12))
def parse_softmax_coerced(node_proto, opset):
    """Before 13, Softmax flattens to 2-D at ``axis`` (default 1)."""
    return generic_parse(SoftmaxParam, node_proto, overrides={"axis": 1})


@register_parser("", "Softmax", SoftmaxParam, versions=(13, LATEST_OPSET))
def parse_softmax(node_proto, opset):
    """From 13, Softmax normalises along the single axis ``axis`` (default -1)."""
    return generic_parse(SoftmaxParam, node_proto, overrides={"axis": -1})


register_parser("", "Unsqueeze", UnsqueezeParam, versions=(1, 12))  # axes attribute
register_parser("", "Unsqueeze", None, versions=(13, LATEST_OPSET))  # axes input


@register_parser("", "Dropout", DropoutParam, versions=(7, 11))
def parse_dropout_attributes(node_proto, opset):
    return generic_parse(DropoutParam, node_proto)


@register_parser("", "Dropout", DropoutParam, versions=(12, LATEST_OPSET))
def parse_dropout(node_proto, opset):
    """From 12, ratio and training_mode are inputs; only ``seed`` remains an attribute."""
    return generic_parse(DropoutParam, node_proto)


@register_parser("", "ConstantOfShape", ConstantOfShapeParam, versions=(9, LATEST_OPSET))
def parse_constant_of_shape(node_proto, opset):
    param = generic_parse(ConstantOfShapeParam, node_proto)
    if param.value is not None and param.value.array.size != 1:
        raise ModelError(
            f'node "{node_proto.name}" (ConstantOfShape): "value" must hold exactly one '
            f"element, got shape {list(param.value.array.shape)}"
        )
    return param


# Constant's value attributes, with the dtype each one implies.
_CONSTANT_ATTRIBUTES = {
    "value": None,
    "sparse_value": None,
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
    "value_string": np.object_,
    "value_strings": np.object_,
}


@register_parser("", "Constant", ConstantParam, versions=(1, LATEST_OPSET))
def parse_constant(node_proto, opset):
    """Constant carries exactly one of several value attributes; all become one tensor."""
    values = attribute_values(node_proto)
    given = [name for name in values if name in _CONSTANT_ATTRIBUTES]
    unknown = sorted(set(values) - set(_CONSTANT_ATTRIBUTES))
    if unknown or len(given) != 1:
        raise ModelError(
            f'node "{node_proto.name}" (Constant): needs exactly one of '
            f"{sorted(_CONSTANT_ATTRIBUTES)}, got {sorted(values)}"
        )
    name = given[0]
    value = values[name]
    if isinstance(value, TensorValue):
        return ConstantParam(value)
    return ConstantParam(TensorValue(np.array(value, dtype=_CONSTANT_ATTRIBUTES[name])))
