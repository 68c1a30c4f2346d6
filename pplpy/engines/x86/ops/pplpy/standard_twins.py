"""pplpy-domain twins of standard ops: how a saved optimised model (pplpy/engines/x86/
save_model.py) writes a node the ONNX domain cannot hold, and how pplpy reads it back.

Two cases need one:

- a Conv / ConvTranspose / Gemm / MatMul / pool / reduction / Resize with post-ops fused
  into its epilogue (``op.post_ops``): written as ``pplpy::Conv`` etc. with the op's own
  attributes plus the post-op attributes of ops/post_op_attributes.py;
- a node the graph optimiser wrote at an opset newer than the model imports (Gelu is opset
  20, LayerNormalization 17, GroupNormalization 21, Attention 23, RMSNormalization 23,
  HardSwish 14, Swish 24 whatever the model says): written as ``pplpy::Gelu`` etc., so the
  model keeps its own ai.onnx opset.

``pplpy::<Op>`` version 1 means the ONNX op at the opset of ``TWINS`` (its attributes are
parsed by that op's parser); its op context is the standard op's class, which it reuses,
with the param and post-ops unwrapped from a ``FusedParam``.  A node of an older opset that the
same op context runs in another form (Reduce* with axes as an attribute, before they became
an input; Resize 11-17) keeps its form: the twin then carries ``onnx_opset`` (STANDARD_OPSET),
the ai.onnx opset it stands for (``twin_opset``).
"""

import dataclasses

import onnx

from pplpy.common.data_format import DataFormat
from pplpy.common.versioned_registry import LATEST_OPSET
from pplpy.engines.x86.impls.post_ops import Broadcast
from pplpy.engines.x86.ops.declare import find_op, op
from pplpy.engines.x86.ops.post_op_attributes import ATTRIBUTE_NAMES, read_post_ops
from pplpy.errors import ModelError
from pplpy.engines.x86.passes.fuse_post_ops import RUN_PRODUCERS
from pplpy.models.onnx.registry import attribute_values, find_parser
from pplpy.optimizer.passes.recognize_attention import ATTENTION_OPSET
from pplpy.optimizer.passes.recognize_gelu import GELU_OPSET, HARD_SWISH_OPSET, SWISH_OPSET
from pplpy.optimizer.passes.recognize_group_norm import GROUP_NORM_OPSET
from pplpy.optimizer.passes.recognize_layer_norm import LAYER_NORM_OPSET, RMS_NORM_OPSET
from pplpy.params.x86 import FusedParam

TWIN_DOMAIN = "pplpy"
TWIN_VERSION = 1
STANDARD_OPSET = "onnx_opset"  # the ai.onnx opset a twin stands for, when not TWINS'


@dataclasses.dataclass(frozen=True)
class Twin:
    opset: int  # the ai.onnx opset whose op pplpy::<op_type> version 1 is
    carries_post_ops: bool  # whether it may carry post-op attributes


TWINS = {
    "Conv": Twin(LATEST_OPSET, True),
    "ConvTranspose": Twin(LATEST_OPSET, True),
    "MaxPool": Twin(LATEST_OPSET, True),
    "AveragePool": Twin(LATEST_OPSET, True),
    "GlobalAveragePool": Twin(LATEST_OPSET, True),
    "GlobalMaxPool": Twin(LATEST_OPSET, True),
    "Gemm": Twin(LATEST_OPSET, True),
    "MatMul": Twin(LATEST_OPSET, True),
    "Gelu": Twin(GELU_OPSET, False),
    "HardSwish": Twin(HARD_SWISH_OPSET, False),
    "Swish": Twin(SWISH_OPSET, False),
    "LayerNormalization": Twin(LAYER_NORM_OPSET, False),
    "GroupNormalization": Twin(GROUP_NORM_OPSET, False),
    "RMSNormalization": Twin(RMS_NORM_OPSET, False),
    "Attention": Twin(ATTENTION_OPSET, False),
    # Reductions and Resize with post-ops (passes/fuse_post_ops.py RUN_PRODUCERS).
    **{op_type: Twin(LATEST_OPSET, True) for op_type in RUN_PRODUCERS},
}


def twin_opset(op_type, opset):
    """The ai.onnx opset the twin of an ai.onnx ``op_type`` node at ``opset`` stands for:
    the twin's own when pplpy reads the op the same at both; ``opset`` itself when the same
    op context runs both forms (written as the STANDARD_OPSET attribute); None when the twin
    cannot stand for it."""
    twin = TWINS.get(op_type)
    if twin is None:
        return None
    ours, theirs = find_parser("", op_type, opset), find_parser("", op_type, twin.opset)
    if ours is None or find_op("", op_type, opset) is not find_op("", op_type, twin.opset):
        return None
    return twin.opset if (ours.first, ours.last) == (theirs.first, theirs.last) else opset


def twin_attributes(op_type, standard):
    """{attribute: value} a twin standing for ai.onnx opset ``standard`` carries besides the
    op's own and its post-ops."""
    return {} if standard == TWINS[op_type].opset else {STANDARD_OPSET: int(standard)}


class ParamFromFusedParam:
    """Mixin of an op context whose node may hold a FusedParam: the standard op's code sees
    its own param in ``self.param`` and the post-ops in ``self.post_ops``, as if the engine's
    fusion had put them there."""

    def __init__(self, node, options):
        super().__init__(node, options)
        twin = TWINS.get(node.op_type) if node.domain == TWIN_DOMAIN else None
        self._standard = twin.opset if twin is not None else node.opset
        if isinstance(node.param, FusedParam):
            self.param = node.param.op
            if node.param.post_ops:
                self.post_ops = list(node.param.post_ops)
            if node.param.opset is not None:
                self._standard = node.param.opset

    @property
    def onnx_opset(self):
        return self._standard

    def select_format(self, in_formats, in_shapes):
        """The standard op's choice for its own inputs; a post-op operand read per element
        in the output's format (as the fusion pass required), any other in NDARRAY."""
        operands = {index: broadcast for e in getattr(self, "post_ops", ()) or ()
                    for index, broadcast, _ in e.operands}
        if not operands:
            return super().select_format(in_formats, in_shapes)
        own = min(operands)
        ins, outs = super().select_format(in_formats[:own], in_shapes[:own])
        ins = list(ins)
        for index in range(own, len(in_formats)):
            ins.append(outs[0] if operands.get(index) is Broadcast.ELEMENT
                       else DataFormat.NDARRAY)
        return ins, outs


def without_post_op_attributes(node_proto, post_ops=()):
    """A copy of ``node_proto`` in the ai.onnx domain without the post-op attributes and
    without the post-ops' operand inputs (the fusion pass appended them after the op's
    own)."""
    rest = onnx.NodeProto()
    rest.CopyFrom(node_proto)
    rest.domain = ""
    del rest.attribute[:]
    rest.attribute.extend(a for a in node_proto.attribute
                          if a.name not in ATTRIBUTE_NAMES and a.name != STANDARD_OPSET)
    operands = [index for e in post_ops for index, _, _ in e.operands]
    if operands:
        del rest.input[min(operands):]
    return rest


def where(node_proto):
    return f'node "{node_proto.name}" ({TWIN_DOMAIN}::{node_proto.op_type})'


def parse_twin(op_type, twin):
    """The parse function of pplpy::<op_type>: the standard parser at ``twin.opset`` for the
    op's own attributes, the post-op attributes beside them."""

    def parse(node_proto, opset):
        post_ops = ()
        values = attribute_values(node_proto)
        if twin.carries_post_ops:
            post_ops = read_post_ops(values, where(node_proto))
        elif any(a.name in ATTRIBUTE_NAMES for a in node_proto.attribute):
            raise ModelError(f"{where(node_proto)}: this op takes no post-ops")
        standard = int(values.get(STANDARD_OPSET, twin.opset))
        if twin_opset(op_type, standard) != standard:
            raise ModelError(f"{where(node_proto)}: {STANDARD_OPSET} {standard}: pplpy's "
                             f"{TWIN_DOMAIN}::{op_type} cannot stand for {op_type}-{standard}")
        entry = find_parser("", op_type, standard)
        param = entry.parse_node(without_post_op_attributes(node_proto, post_ops),
                                 standard, node_proto.name)
        return FusedParam(param, post_ops, standard)

    return parse


def parse_post_ops_only(node_proto, opset):
    """Parse function of a pplpy op without attributes of its own that may carry post-ops
    (MatMulBias): None, or a FusedParam holding only post-ops."""
    values = attribute_values(node_proto)
    unknown = sorted(set(values) - set(ATTRIBUTE_NAMES))
    if unknown:
        raise ModelError(f"{where(node_proto)}: attribute(s) {unknown} are not supported; "
                         f"it takes only {list(ATTRIBUTE_NAMES)}")
    post_ops = read_post_ops(values, where(node_proto))
    return FusedParam(None, post_ops) if post_ops else None


def _declare(op_type, twin):
    base = find_op("", op_type, twin.opset)
    cls = type(f"Pplpy{base.__name__}", (ParamFromFusedParam, base), {
        "__doc__": f"pplpy::{op_type}: ai.onnx {op_type}-{twin.opset}"
                   + (" with post-ops" if twin.carries_post_ops else "")
                   + " (standard_twins.py)",
        "__module__": __name__,
    })
    op(TWIN_DOMAIN, op_type, since=TWIN_VERSION, param=FusedParam,
       parse=parse_twin(op_type, twin))(cls)
    return cls


TWIN_CLASSES = {op_type: _declare(op_type, twin) for op_type, twin in TWINS.items()}
