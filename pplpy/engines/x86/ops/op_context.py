"""X86OptKernel: the op context, everything the x86 engine must know about one node
before it runs: output types, output shapes, data formats, and how to build its kernel.

Shapes are tuples of ints; ``values`` holds the numpy value of each input that is a
constant (None otherwise), for ops whose output shape depends on an input's value (Reshape,
Unsqueeze-13).  Inference runs again whenever a run's input shapes change.
"""

import abc

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.errors import PplError, ShapeError, UnsupportedOpError


class ValueRequired(PplError):
    """Shape inference needs the value of an input that is not known yet (neither a constant
    nor, at run time, a fed input)."""


class X86OptKernel(abc.ABC):
    """Base class of op contexts.  Subclasses set or override:

    - ``supported_types``: element types accepted on input 0 (checked by the default
      ``infer_type``);
    - ``infer_type(in_types) -> out types``;
    - ``infer_shape(in_shapes, in_values) -> out shapes``;
    - ``select_format(in_formats, in_shapes) -> (formats wanted for inputs, output formats)``;
    - ``create_kernel() -> X86Kernel``.
    """

    supported_types = (DataType.FLOAT32,)
    # Inputs whose *values* (not just shapes) decide the output shape, e.g. Reshape's shape.
    # At run time, fed inputs in these positions join the shape signature.
    value_inputs = ()
    # False for ops whose outputs are not a function of their inputs (the random ops):
    # constant folding and host evaluation leave them as steps, so each run draws anew.
    deterministic = True
    # Formats the op can run in (documentation and docs/supported_ops.md; select_format
    # decides per node).
    formats = (DataFormat.NDARRAY,)
    # The N16CX padding rule.  In N16CX the channels are padded to a multiple of 16 and the
    # padding lanes hold zeros that the next op (a Conv's reduction) reads.  An op that runs
    # in N16CX must leave them finite (f(0) finite: 1/x and log(x) do not).  pplpy's own ops
    # are written to; a plugin op is given N16CX only if its own class sets this to True,
    # otherwise the engine hands it NDARRAY (reorders around it) whatever select_format says.
    # See docs/op_context_contract.md.
    keeps_padding_finite = False

    def __init__(self, node, options):
        self.node = node
        self.param = node.param
        self.options = options  # EngineOptions: isa, num_threads
        self.constants = {}  # input index -> numpy value, for inputs that are constants

    @property
    def onnx_opset(self):
        """The ai.onnx opset whose form of the op the node has: its own opset, or for a
        saved optimised model's pplpy-domain twin the one it stands for (standard_twins)."""
        return self.node.opset

    # -- helpers for subclasses ----------------------------------------------------------

    def constant(self, index):
        """The constant value of input ``index`` or None if it is computed at run time."""
        return self.constants.get(index)

    def input_present(self, index):
        inputs = self.node.inputs
        return index < len(inputs) and inputs[index] != ""

    def shape_error(self, message, in_shapes):
        shapes = ", ".join("-" if s is None else str(list(s)) for s in in_shapes)
        return ShapeError(f"{self.node.describe()}: {message} (input shapes: {shapes})")

    def value_required(self, index, what):
        return ValueRequired(
            f"{self.node.describe()}: {what} (input {index}) is computed at run time by another "
            f"node; pplpy needs it as a constant, a foldable expression or a model input"
        )

    def unsupported(self, message):
        node = self.node
        return UnsupportedOpError(
            f"{node.describe()}: {message}",
            nodes=[(node.name, node.domain, node.op_type, node.opset)],
        )

    # -- the interface -------------------------------------------------------------------

    def infer_type(self, in_types):
        first = in_types[0] if in_types else None
        if first not in self.supported_types:
            names = ", ".join(str(t) for t in self.supported_types)
            raise self.unsupported(f"input type {first} is not supported (pplpy has: {names})")
        return [first] * len(self.node.outputs)

    @abc.abstractmethod
    def infer_shape(self, in_shapes, in_values):
        """Output shapes (tuples) from input shapes and constant input values."""

    def select_format(self, in_formats, in_shapes):
        """Default: plain NDARRAY everywhere."""
        return (
            [DataFormat.NDARRAY] * len(in_formats),
            [DataFormat.NDARRAY] * len(self.node.outputs),
        )

    @abc.abstractmethod
    def create_kernel(self):
        """The X86Kernel that runs this node."""
