"""Parse functions for ops whose ONNX encoding is awkward: an attribute that became an input,
a default that changed between opsets, a value given in one of several attributes.  The op
declarations (``@op(..., parse=...)`` in engines/x86/ops) name them."""

import numpy as np

from pplpy.errors import ModelError
from pplpy.models.onnx.registry import attribute_values, generic_parse
from pplpy.params.onnx import (
    ClipParam,
    ConstantOfShapeParam,
    ConstantParam,
    DropoutParam,
    SoftmaxParam,
    TensorValue,
)


def parse_clip_attributes(node_proto, opset):
    """Clip-6: min/max attributes, defaulting to the float range."""
    values = attribute_values(node_proto)
    f32 = np.finfo(np.float32)
    return ClipParam(min=float(values.get("min", f32.min)), max=float(values.get("max", f32.max)))


def parse_softmax_coerced(node_proto, opset):
    """Before 13, Softmax flattens to 2-D at ``axis`` (default 1)."""
    return generic_parse(SoftmaxParam, node_proto, overrides={"axis": 1})


def parse_softmax(node_proto, opset):
    """From 13, Softmax normalises along the single axis ``axis`` (default -1)."""
    return generic_parse(SoftmaxParam, node_proto, overrides={"axis": -1})




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


def parse_dropout(node_proto, opset):
    """Dropout's ``ratio`` is an attribute until opset 11 and an input from 12 (only ``seed``
    stays an attribute); one param class holds either encoding."""
    return generic_parse(DropoutParam, node_proto)
