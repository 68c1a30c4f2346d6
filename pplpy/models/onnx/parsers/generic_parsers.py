"""Ops whose params fill straight from their attributes, or that have none.

One row per op: (op_type, param class or None, first opset, last opset).  The ranges start
where the op's current semantics start in the ONNX spec; anything older is reported as
unsupported rather than run with the wrong meaning.
"""

from pplpy.models.onnx.registry import LATEST_OPSET, register_parser
from pplpy.params.onnx import (
    AveragePoolParam,
    BatchNormalizationParam,
    ConcatParam,
    ConvParam,
    FlattenParam,
    GemmParam,
    LeakyReluParam,
    LRNParam,
    MaxPoolParam,
    ReshapeParam,
    TransposeParam,
)

GENERIC_OPS = (
    ("Conv", ConvParam, 1, LATEST_OPSET),
    ("Relu", None, 6, LATEST_OPSET),
    ("LeakyRelu", LeakyReluParam, 6, LATEST_OPSET),
    ("Sigmoid", None, 6, LATEST_OPSET),
    ("Add", None, 7, LATEST_OPSET),  # 7 introduced numpy broadcasting
    ("Mul", None, 7, LATEST_OPSET),
    ("Sum", None, 8, LATEST_OPSET),  # 8 introduced broadcasting
    ("BatchNormalization", BatchNormalizationParam, 7, LATEST_OPSET),
    ("MaxPool", MaxPoolParam, 1, LATEST_OPSET),
    ("AveragePool", AveragePoolParam, 7, LATEST_OPSET),
    ("GlobalAveragePool", None, 1, LATEST_OPSET),
    ("LRN", LRNParam, 1, LATEST_OPSET),
    ("Gemm", GemmParam, 7, LATEST_OPSET),  # before 7, C needed the "broadcast" attribute
    ("MatMul", None, 1, LATEST_OPSET),
    ("Concat", ConcatParam, 4, LATEST_OPSET),  # axis is required from 4
    ("Reshape", ReshapeParam, 5, LATEST_OPSET),  # shape became an input in 5
    ("Flatten", FlattenParam, 1, LATEST_OPSET),
    ("Transpose", TransposeParam, 1, LATEST_OPSET),
    ("Identity", None, 1, LATEST_OPSET),
)

for _op_type, _param_cls, _first, _last in GENERIC_OPS:
    register_parser("", _op_type, _param_cls, versions=(_first, _last))
