"""If (opset 1 on): run then_branch or else_branch, as cond says, and return its outputs.

Inputs: cond (a one-element bool), then the outer values the branches read (appended by the
parser; see ``control_body.py``).  The branches are built into pplpy runtimes and the kernel
is a Python step that runs one of them (control flow is the documented exception to
"every op is a compiled step": it drives nested runtimes whose own steps are compiled).

Shapes: pplpy plans memory before a run.  When both branches give the same output shapes,
cond may be computed at run time.  When they differ, cond must be known when the plan is
made (a constant, a host-computed value or a model input: ``value_inputs``), otherwise the
node is refused with an UnsupportedOpError saying so.  The opsets differ only in the element
types the branches may return, which pplpy does not restrict, so one declaration covers all.
"""

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.control_body import (
    BodyRunner,
    body_of,
    python_step,
    scalar,
    write_outputs,
)
from pplpy.engines.x86.ops.op_context import ValueRequired, X86OptKernel
from pplpy.errors import ModelError
from pplpy.params.onnx import IfParam


class IfKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        op = self.op
        runners = (BodyRunner(op.then_body, op.then_body.where),
                   BodyRunner(op.else_body, op.else_body.where))

        def run(inputs, outputs):
            taken = runners[0] if scalar(op, inputs[0], "cond", bool) else runners[1]
            write_outputs(op, outputs, taken.run(inputs[1:]))

        return python_step(self, io, run, runners)


@op("", "If", since=1, param=IfParam)
class IfOp(X86OptKernel):
    """outputs = then_branch() if cond else else_branch(), on tensors of any type."""

    # Values pass through to the body, whose own ops check the types they compute in.
    supported_types = tuple(DataType)

    def __init__(self, node, options):
        super().__init__(node, options)
        self.then_body = body_of(self, "then_branch")
        self.else_body = body_of(self, "else_branch")
        self.in_types = None  # set by infer_type: the captured values' types feed the bodies

    @property
    def value_inputs(self):
        """cond, and the outer values a branch needs by value to know its shapes."""
        if self.in_types is None:
            return (0,)
        captured = self.in_types[1:]
        deciding = set(self.then_body.deciding_inputs(captured))
        deciding |= set(self.else_body.deciding_inputs(captured))
        return (0, *sorted(1 + i for i in deciding))

    def infer_type(self, in_types):
        if in_types[0] is not DataType.BOOL:
            raise ModelError(f"{self.node.describe()}: cond is {in_types[0]}; If takes a bool "
                             f"condition")
        captured = list(in_types[1:])
        then_types = self.then_body.output_types(captured)
        else_types = self.else_body.output_types(captured)
        outputs = len(self.node.outputs)
        for name, types in (("then_branch", then_types), ("else_branch", else_types)):
            if len(types) != outputs:
                raise ModelError(f"{self.node.describe()}: {name} has {len(types)} outputs, "
                                 f"the node has {outputs}")
        for i, (a, b) in enumerate(zip(then_types, else_types)):
            if a is not b:
                raise ModelError(f"{self.node.describe()}: output {i} is {a} in then_branch "
                                 f"and {b} in else_branch")
        self.in_types = list(in_types)
        return then_types

    def infer_shape(self, in_shapes, in_values):
        types, shapes, values = self.in_types[1:], in_shapes[1:], in_values[1:]
        if in_values[0] is not None:
            body = self.then_body if scalar(self, in_values[0], "cond", bool) else \
                self.else_body
            return body.infer(types, shapes, values)
        then_shapes = self.then_body.infer(types, shapes, values)
        else_shapes = self.else_body.infer(types, shapes, values)
        if then_shapes != else_shapes:
            raise ValueRequired(
                f"{self.node.describe()}: the branches give outputs of different shapes "
                f"({then_shapes} and {else_shapes}) and cond (input 0) is computed at run "
                f"time; pplpy plans memory before a run, so it needs cond as a constant, a "
                f"host-computable value or a model input")
        return then_shapes

    def create_kernel(self):
        return IfKernel(self)
