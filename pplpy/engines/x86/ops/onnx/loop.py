"""Loop (opset 1 on): run the body while i < M (the trip count) and cond hold, threading
loop-carried values through the iterations and stacking scan outputs along a new axis 0.

Inputs: M (optional int64), cond (optional bool), the N initial loop-carried values, then
the outer values the body reads (appended by the parser; see ``control_body.py``).  Body:
(iteration_num, cond, N carried) + captured -> (cond, N carried, K scan outputs).  Without
a cond input the body's cond output is ignored (a for loop); without M the loop runs while
cond holds; without both it would never end and is refused.  The opsets differ only in the
types a body may carry (sequences and optionals, which pplpy does not support), so one
declaration covers every opset.

Shapes: pplpy plans memory before a run, so the plan must know the output shapes:
- when the carried values keep their shapes and there are no scan outputs, the number of
  iterations does not matter;
- otherwise the count must be known: M (and cond) known when the plan is made
  (``value_inputs``: constants, host-computed values, model inputs) with a body whose cond
  output is its cond input, or else every input of the Loop known on the host, so the op
  context runs the loop at plan time to count (as NonMaxSuppression does).
Any other Loop is refused with an UnsupportedOpError naming the node.  The kernel is a Python
step driving the body's runtime; if a run ever disagreed with the plan it raises a
ShapeError instead of writing a wrong answer.
"""

import numpy as np

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
from pplpy.params.onnx import LoopParam


def run_loop(op, runner, inputs):
    """(final carried values, per-iteration scan outputs as K lists) for ``inputs`` (the
    node's inputs, None where absent)."""
    n = op.carried
    trip, cond = inputs[0], inputs[1]
    limit = scalar(op, trip, "M (the trip count)", int) if trip is not None else None
    going = scalar(op, cond, "cond", bool) if cond is not None else True
    carried, captured = list(inputs[2:2 + n]), list(inputs[2 + n:])
    scans = [[] for _ in range(len(op.node.outputs) - n)]
    i = 0
    while going and (limit is None or i < limit):
        outputs = runner.run([np.array(i, np.int64), np.array(going), *carried, *captured])
        if cond is not None:
            going = scalar(op, outputs[0], "the body's cond output", bool)
        carried = outputs[1:1 + n]
        for scan, value in zip(scans, outputs[1 + n:]):
            scan.append(value)
        i += 1
    return carried, scans


def stacked(values, dims):
    """The scan output of ``values`` (one array per iteration), ``dims`` when empty."""
    return np.stack(values) if values else np.empty(dims, np.float32)


class LoopKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        op = self.op
        runner = BodyRunner(op.body, op.body.where)
        n = op.carried

        def run(inputs, outputs):
            carried, scans = run_loop(op, runner, inputs)
            scanned = [stacked(values, slot.shape.dims).astype(slot.array.dtype, copy=False)
                       if slot is not None else None
                       for values, slot in zip(scans, outputs[n:])]
            write_outputs(op, outputs, [*carried, *scanned])

        return python_step(self, io, run, (runner,))


@op("", "Loop", since=1, param=LoopParam)
class LoopOp(X86OptKernel):
    """Loop-carried values and scan outputs of a for / while loop over a body graph."""

    # Values pass through to the body, whose own ops check the types they compute in.
    supported_types = tuple(DataType)

    def __init__(self, node, options):
        super().__init__(node, options)
        self.body = body_of(self, "body")
        graph = self.body.graph
        self.carried = len(graph.inputs) - len(graph.captured) - 2
        self.in_types = None

    @property
    def value_inputs(self):
        """M, cond, and the outer values the body needs by value to know its shapes."""
        if self.in_types is None:
            return (0, 1)
        first = 2 + self.carried
        deciding = self.body.deciding_inputs(self._body_types())
        return (0, 1, *sorted(i for i in deciding if i >= first))

    def _body_types(self):
        return [DataType.INT64, DataType.BOOL, *self.in_types[2:]]

    def infer_type(self, in_types):
        node, n = self.node, self.carried
        where = node.describe()
        if self.carried < 0 or len(node.inputs) != len(self.body.graph.inputs):
            raise ModelError(f"{where}: the body takes {len(self.body.graph.inputs)} inputs "
                             f"(iteration_num, cond, carried values, captured values); the "
                             f"node gives {len(node.inputs)}")
        for index, want, what in ((0, DataType.INT64, "M"), (1, DataType.BOOL, "cond")):
            if self.input_present(index) and in_types[index] is not want:
                raise ModelError(f"{where}: {what} (input {index}) is {in_types[index]}; "
                                 f"Loop takes {want}")
        self.in_types = list(in_types)
        body_types = self.body.output_types(self._body_types())
        if len(body_types) != 1 + len(node.outputs):
            raise ModelError(f"{where}: the body has {len(body_types)} outputs; a Loop with "
                             f"{len(node.outputs)} outputs needs {1 + len(node.outputs)} "
                             f"(cond, then the carried values and scan outputs)")
        if len(node.outputs) < n:
            raise ModelError(f"{where}: {n} loop-carried values but {len(node.outputs)} "
                             f"outputs")
        if body_types[0] is not DataType.BOOL:
            raise ModelError(f"{where}: the body's cond output is {body_types[0]}; it must be "
                             f"bool")
        for i, (given, got) in enumerate(zip(in_types[2:2 + n], body_types[1:1 + n])):
            if given is not got:
                raise ModelError(f"{where}: loop-carried value {i} enters as {given} and "
                                 f"leaves the body as {got}")
        return body_types[1:]

    # -- shapes --------------------------------------------------------------------------

    def _cond_passes_through(self):
        """Whether the body's cond output is its cond input (through Identity nodes)."""
        graph = self.body.graph
        name = graph.output_names[0]
        while True:
            if name == graph.input_names[1]:
                return True
            node = graph.producer(name)
            if node is None or node.op_type != "Identity":
                return False
            name = node.inputs[0]

    def _static_count(self, in_values):
        """The number of iterations when the plan can tell without running the body."""
        trip, cond = in_values[0], in_values[1]
        has_trip, has_cond = self.input_present(0), self.input_present(1)
        if not has_trip and not has_cond:
            raise self.unsupported("neither M nor cond is given: the loop never ends")
        if (has_trip and trip is None) or (has_cond and cond is None):
            return None
        if has_cond and not scalar(self, cond, "cond", bool):
            return 0
        if has_cond and not self._cond_passes_through():
            return None  # the body decides when to stop
        if not has_trip:
            raise self.unsupported("cond stays true and M is not given: the loop never ends")
        return max(0, scalar(self, trip, "M (the trip count)", int))

    def infer_shape(self, in_shapes, in_values):
        n = self.carried
        types = self._body_types()
        carried, captured = list(in_shapes[2:2 + n]), list(in_shapes[2 + n:])
        captured_values = list(in_values[2 + n:])
        count = self._static_count(in_values)
        if count is None and all(v is not None for v, name in zip(in_values, self.node.inputs)
                                 if name):
            return self._run_on_host(in_values)

        def step(i, shapes):
            counter = None if i is None else np.array(i, np.int64)
            outs = self.body.infer(types, [(), (), *shapes, *captured],
                                   [counter, None, *([None] * n), *captured_values])
            return outs[1:1 + n], outs[1 + n:]

        if count is None:
            after, scans = step(None, carried)
            if scans or after != carried:
                raise ValueRequired(
                    f"{self.node.describe()}: the number of iterations is decided at run "
                    f"time (M or cond computed by another node, or a body that computes its "
                    f"own cond) and the output shapes depend on it (scan outputs, or carried "
                    f"values that change shape); pplpy plans memory before a run, so it "
                    f"needs M and cond known when the plan is made, or every input of the "
                    f"Loop known on the host")
            return carried
        shapes, scan_shapes = carried, None
        for i in range(max(count, 1)):
            after, scans = step(i, shapes)
            if scan_shapes is not None and scans != scan_shapes:
                raise self.shape_error(f"scan outputs change shape between iterations "
                                       f"({scan_shapes} then {scans})", in_shapes)
            scan_shapes = scans
            if i < count:
                same = after == shapes
                shapes = after
                if same and 0 not in self.body.deciding_inputs(types):
                    break  # every later iteration sees the same shapes
        return [*shapes, *((count, *dims) for dims in scan_shapes)]

    def _run_on_host(self, in_values):
        """Output shapes found by running the loop on values known when the plan is made."""
        arrays = [np.asarray(v) if v is not None else None for v in in_values]
        carried, scans = run_loop(self, BodyRunner(self.body, self.body.where), arrays)
        if any(not values for values in scans):  # no iteration: the scan shape from the body
            n = self.carried
            outs = self.body.infer(self._body_types(),
                                   [(), (), *(a.shape for a in arrays[2:2 + n]),
                                    *(a.shape for a in arrays[2 + n:])],
                                   [np.array(0, np.int64), None, *arrays[2:]])
            return [*(a.shape for a in carried), *((0, *dims) for dims in outs[1 + n:])]
        return [*(a.shape for a in carried), *((len(v), *v[0].shape) for v in scans)]

    def create_kernel(self):
        return LoopKernel(self)
