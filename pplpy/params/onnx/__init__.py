"""Param dataclasses of the ONNX ops, one small frozen dataclass per op family.

Field names are ONNX attribute names and defaults are ONNX defaults, so a generic parse
fills them from a NodeProto and ``==`` / ``hash`` let passes compare nodes (CSE).
"""

from pplpy.params.onnx.activation_param import CeluParam, ClipParam, EluParam, GeluParam, HardSigmoidParam, LeakyReluParam, SeluParam, ShrinkParam, SwishParam, ThresholdedReluParam  # noqa: F401,E501
from pplpy.params.onnx.binary_param import BitShiftParam, IsInfParam, ModParam  # noqa: F401
from pplpy.params.onnx.control_flow_param import IfParam, LoopParam, Scan8Param, ScanParam  # noqa: F401
from pplpy.params.onnx.constant_param import ConstantOfShapeParam, ConstantParam, DropoutParam
from pplpy.params.onnx.conv_param import ConvParam
from pplpy.params.onnx.conv_transpose_param import ConvTransposeParam, LpPoolParam, MaxUnpoolParam  # noqa: F401,E501
from pplpy.params.onnx.gemm_param import GemmParam
from pplpy.params.onnx.indexing_param import CompressParam, GatherParam, ShapeParam, SliceParam, SqueezeParam  # noqa: F401,E501
from pplpy.params.onnx.layer_norm_param import (
    CoercedAxisParam,
    GroupNormalizationParam,
    HardmaxParam,
    InstanceNormalizationParam,
    LayerNormalizationParam,
    LogSoftmaxParam,
    LpNormalizationParam,
    MeanVarianceNormalizationParam,
    RMSNormalizationParam,
)
from pplpy.params.onnx.loss_param import LossParam  # noqa: F401
from pplpy.params.onnx.movement_param import (
    CastParam,
    DepthToSpaceParam,
    EyeLikeParam,
    GatherElementsParam,
    GatherNDParam,
    OneHotParam,
    PadParam,
    RangeParam,
    ReverseSequenceParam,
    ScatterParam,
    SplitParam,
    TopKParam,
    TriluParam,
)
from pplpy.params.onnx.normalization_param import (
    BatchNormalizationParam,
    LRNParam,
    SoftmaxParam,
)
from pplpy.params.onnx.pooling_param import AveragePoolParam, MaxPoolParam
from pplpy.params.onnx.reduce_param import ArgReduceParam, CumSumParam, ReduceAxesInputParam, ReduceParam  # noqa: F401,E501
from pplpy.params.onnx.rnn_param import GRUParam, LSTMParam, RNNParam  # noqa: F401
from pplpy.params.onnx.resize_param import NonMaxSuppressionParam, Resize10Param, Resize18Param, ResizeParam, RoiAlign10Param, RoiAlignParam, UpsampleParam, Upsample9Param  # noqa: F401,E501
from pplpy.params.onnx.shape_param import (
    ConcatParam,
    FlattenParam,
    ReshapeParam,
    TransposeParam,
    UnsqueezeParam,
)
from pplpy.params.onnx.signal_param import BitCastParam, DFT17Param, DFTParam, MelWeightMatrixParam, STFTParam, WindowParam  # noqa: F401,E501
from pplpy.params.onnx.spatial_param import AffineGridParam, CenterCropPadParam, Col2ImParam, DeformConvParam, GridSample16Param, GridSampleParam  # noqa: F401,E501
from pplpy.params.onnx.tensor_value import TensorValue
from pplpy.params.onnx.xformer_param import CausalConvWithStateParam, FlexAttentionParam, LinearAttentionParam, TensorScatterParam  # noqa: F401,E501
from pplpy.params.onnx.transformer_param import AttentionParam, BernoulliParam, DequantizeLinearParam, EinsumParam, QuantizeLinearParam, RandomNormalLikeParam, RandomNormalParam, RandomUniformLikeParam, RandomUniformParam, RotaryEmbeddingParam  # noqa: F401,E501
from pplpy.params.onnx.unique_tfidf_param import TfIdfVectorizerParam, UniqueParam  # noqa: F401

__all__ = [
    "AveragePoolParam", "BatchNormalizationParam", "ClipParam", "ConcatParam",
    "ConstantOfShapeParam", "ConstantParam", "ConvParam", "DropoutParam", "FlattenParam",
    "GatherParam", "GemmParam", "LRNParam", "LeakyReluParam", "MaxPoolParam", "ReshapeParam",
    "ShapeParam", "SliceParam", "SoftmaxParam", "SqueezeParam", "TensorValue", "TransposeParam",
    "UnsqueezeParam",
    "CoercedAxisParam", "GroupNormalizationParam", "HardmaxParam", "InstanceNormalizationParam",
    "LayerNormalizationParam", "LogSoftmaxParam", "LpNormalizationParam",
    "MeanVarianceNormalizationParam", "RMSNormalizationParam",
    "CastParam", "DepthToSpaceParam", "EyeLikeParam", "GatherElementsParam", "GatherNDParam",
    "OneHotParam", "PadParam", "RangeParam", "ReverseSequenceParam", "ScatterParam",
    "SplitParam", "TopKParam", "TriluParam",
]
