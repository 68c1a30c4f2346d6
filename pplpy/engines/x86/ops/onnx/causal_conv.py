"""CausalConvWithState (opset 27): the stateful depthwise causal 1-D convolution of Gated
DeltaNet and Mamba layers, replacing Concat + Conv + Slice.

    padded = [past_state | input]                      (B, C, k - 1 + L), zeros without past
    output = act(depthwise_conv(padded, weight) + bias)    act: none, or SiLU ("silu"/"swish")
    present_state = the last k - 1 positions of padded

float32, NDARRAY; one compiled step (``_stateful_fp32.pxi``) whose SiLU is the activation
table's Swish.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.params.onnx import CausalConvWithStateParam

_ACTIVATIONS = {"none": False, "silu": True, "swish": True}
_NAMES = ("input", "weight", "bias", "past_state")


def optional(slots, index):
    """Slot ``index`` of a node's inputs or outputs, None when omitted."""
    return slots[index] if index < len(slots) else None


def address(slot):
    return slot.address if slot is not None and slot.array.size else 0


class CausalConvKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, w = io.inputs[0], io.inputs[1]
        bias, past = optional(io.inputs, 2), optional(io.inputs, 3)
        y, present = io.outputs[0], optional(io.outputs, 1)
        B, C, L = x.shape.dims
        k = w.shape.dims[2]
        keep = tuple(s.array for s in (*io.inputs, *io.outputs) if s is not None)
        step = self.impl("stateful_fp32").make_causal_conv_step(
            address(x), address(w), address(bias), address(past), address(y),
            address(present), (B, C, L, k), _ACTIVATIONS[self.param.activation],
            io.num_threads, keep)
        step.label = self.node.name
        return step


@op("", "CausalConvWithState", since=27, param=CausalConvWithStateParam)
class CausalConvWithStateOp(X86OptKernel):
    """output, present_state = causal depthwise conv of [past_state | input]; float32."""

    def infer_type(self, in_types):
        if self.param.activation not in _ACTIVATIONS:
            raise self.unsupported(f"activation {self.param.activation!r}: expected 'none', "
                                   "'silu' or 'swish'")
        for index, data_type in enumerate(in_types):
            if data_type is not None and data_type is not DataType.FLOAT32:
                raise self.unsupported(f"input {_NAMES[index]} is {data_type}; pplpy's "
                                       "CausalConvWithState runs on float32")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        x, w = tuple(in_shapes[0]), tuple(in_shapes[1])
        if len(x) != 3:
            raise self.shape_error(f"input must be (batch, channels, length), got rank "
                                   f"{len(x)}", in_shapes)
        B, C, _ = x
        if len(w) != 3 or w[:2] != (C, 1) or w[2] < 1:
            raise self.shape_error(f"weight must be ({C}, 1, k) with k >= 1 (depthwise), got "
                                   f"{list(w)}", in_shapes)
        k = w[2]
        bias, past = (tuple(s) if s is not None else None
                      for s in (list(in_shapes) + [None, None])[2:4])
        if bias is not None and bias != (C,):
            raise self.shape_error(f"bias must be ({C},), got {list(bias)}", in_shapes)
        if past is not None and past != (B, C, k - 1):
            raise self.shape_error(f"past_state must be ({B}, {C}, {k - 1}), got {list(past)}",
                                   in_shapes)
        return [x, (B, C, k - 1)][:len(self.node.outputs)]

    def create_kernel(self):
        return CausalConvKernel(self)
