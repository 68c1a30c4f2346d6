"""Scan (opset 8, and 9 on): run the body once per position along the scan axis of the scan
inputs, threading state values through and stacking the per-step scan outputs.

Inputs (9+): N initial states, M scan inputs (``num_scan_inputs``), then the outer values the
body reads (appended by the parser; see ``control_body.py``).  Body: (N states, M slices) +
captured -> (N states, K scan output slices).  ``scan_input_axes`` / ``scan_output_axes``
(negative counts from the end) and ``*_directions`` (1: reverse) place the axis.

Scan 8 adds a batch axis 0 to every input and output (the scan axis is then axis 1, with
``directions`` per scan input) and an optional sequence_lens first input; pplpy runs each
batch row as a Scan 9 and supports sequence_lens only when it is the full length (known
when the plan is made), refusing shorter sequences with an UnsupportedOpError.

The number of steps is a dim of the inputs, so output shapes are known when the plan is made
whenever the body keeps its states' shapes (a state that changes shape is a ShapeError).
The later opsets only widen the element types.  The kernel is a Python step driving the
body's runtime.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.control_body import (
    BodyRunner,
    body_of,
    python_step,
    write_outputs,
)
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ModelError
from pplpy.params.onnx import Scan8Param, ScanParam


def _normalized(values, count, ranks, what, where):
    """Axes or directions of ``count`` entries (default 0), axes made non-negative."""
    values = list(values) if values is not None else [0] * count
    if len(values) != count:
        raise ModelError(f"{where}: {what} has {len(values)} entries for {count} values")
    if ranks is None:
        if any(v not in (0, 1) for v in values):
            raise ModelError(f"{where}: {what} must be 0 (forward) or 1 (reverse), got "
                             f"{values}")
        return values
    out = []
    for axis, rank in zip(values, ranks):
        if not -rank <= axis < rank:
            raise ModelError(f"{where}: {what} {axis} is out of range for rank {rank}")
        out.append(axis % rank)
    return out


def scan_once(runner, states, scans, captured, in_axes, in_dirs, out_axes, out_dirs):
    """Final states and stacked scan outputs of one Scan-9 style pass over ``scans``."""
    steps = scans[0].shape[in_axes[0]] if scans else 0
    per_step = None
    for t in range(steps):
        slices = [np.take(x, steps - 1 - t if d else t, axis=a)
                  for x, a, d in zip(scans, in_axes, in_dirs)]
        outputs = runner.run([*states, *slices, *captured])
        states = outputs[:len(states)]
        produced = outputs[len(states):]
        if per_step is None:
            per_step = [[] for _ in produced]
        for values, value in zip(per_step, produced):
            values.append(value)
    stacked = []
    for values, axis, direction in zip(per_step or [], out_axes, out_dirs):
        stacked.append(np.stack(values[::-1] if direction else values, axis=axis))
    return states, stacked


class ScanKernel(X86Kernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        op = self.op
        runner = BodyRunner(op.body, op.body.where)

        def run(inputs, outputs):
            write_outputs(op, outputs, op.compute(runner, inputs, outputs))

        return python_step(self, io, run, (runner,))


class ScanBase(X86OptKernel):
    """What both forms share: the body, the counts, types and the shape rule per pass."""

    # Values pass through to the body, whose own ops check the types they compute in.
    supported_types = tuple(DataType)

    batched = False  # Scan 8: a batch axis 0 everywhere, sequence_lens first

    def __init__(self, node, options):
        super().__init__(node, options)
        self.body = body_of(self, "body")
        graph = self.body.graph
        self.first = 1 if self.batched else 0  # index of the first state
        explicit = len(node.inputs) - len(graph.captured)
        self.m = self.param.num_scan_inputs
        self.n = explicit - self.first - self.m
        self.k = len(node.outputs) - self.n
        self.in_types = None

    @property
    def value_inputs(self):
        """The outer values the body needs by value to know its shapes (and Scan 8's
        sequence_lens)."""
        own = (0,) if self.batched else ()
        if self.in_types is None:
            return own
        deciding = self.body.deciding_inputs(self.in_types[self.first:])
        return (*own, *sorted(self.first + i for i in deciding if i >= self.n + self.m))

    def _check_counts(self):
        where, graph = self.node.describe(), self.body.graph
        if self.m < 1 or self.n < 0 or self.k < 0:
            raise ModelError(f"{where}: num_scan_inputs {self.m} does not fit the node's "
                             f"{len(self.node.inputs)} inputs and {len(self.node.outputs)} "
                             f"outputs")
        if len(graph.outputs) != self.n + self.k:
            raise ModelError(f"{where}: the body has {len(graph.outputs)} outputs, the node "
                             f"{self.n + self.k} (states, then scan outputs)")

    def infer_type(self, in_types):
        self._check_counts()
        body_types = list(in_types[self.first:])
        out_types = self.body.output_types(body_types)
        for i, (given, got) in enumerate(zip(body_types[:self.n], out_types[:self.n])):
            if given is not got:
                raise ModelError(f"{self.node.describe()}: state {i} enters as {given} and "
                                 f"leaves the body as {got}")
        self.in_types = list(in_types)
        return out_types

    def pass_shapes(self, states, scans, captured, captured_values, in_axes, in_shapes):
        """(final state shapes, per-step scan output shapes, steps) of one pass."""
        lengths = {s[a] for s, a in zip(scans, in_axes)}
        if len(lengths) != 1:
            raise self.shape_error(f"the scan inputs differ in length along their scan axes "
                                   f"{in_axes}", in_shapes)
        slices = [s[:a] + s[a + 1:] for s, a in zip(scans, in_axes)]
        outs = self.body.infer(self.in_types[self.first:], [*states, *slices, *captured],
                               [None] * (len(states) + len(slices)) + captured_values)
        if outs[:self.n] != list(states):
            raise self.shape_error(f"the body changes the states' shapes from {states} to "
                                   f"{outs[:self.n]}", in_shapes)
        return outs[self.n:], lengths.pop()

    def create_kernel(self):
        return ScanKernel(self)


@op("", "Scan", since=9, param=ScanParam)
class ScanOp(ScanBase):
    """Scan 9+: per-input / per-output scan axes and directions, no batch axis."""

    def layout(self, ranks_in, ranks_out):
        where, p = self.node.describe(), self.param
        return (_normalized(p.scan_input_axes, self.m, ranks_in, "scan_input_axes", where),
                _normalized(p.scan_input_directions, self.m, None, "scan_input_directions",
                            where),
                None if ranks_out is None else
                _normalized(p.scan_output_axes, self.k, ranks_out, "scan_output_axes", where),
                _normalized(p.scan_output_directions, self.k, None, "scan_output_directions",
                            where))

    def infer_shape(self, in_shapes, in_values):
        n, m = self.n, self.m
        states, scans = list(in_shapes[:n]), list(in_shapes[n:n + m])
        in_axes, _, _, _ = self.layout([len(s) for s in scans], None)
        per_step, steps = self.pass_shapes(states, scans, list(in_shapes[n + m:]),
                                           list(in_values[n + m:]), in_axes, in_shapes)
        _, _, out_axes, _ = self.layout([len(s) for s in scans],
                                        [len(s) + 1 for s in per_step])
        return [*states, *(s[:a] + (steps,) + s[a:] for s, a in zip(per_step, out_axes))]

    def compute(self, runner, inputs, outputs):
        n, m, p = self.n, self.m, self.param
        scans = inputs[n:n + m]
        in_axes, in_dirs, _, out_dirs = self.layout([x.ndim for x in scans], None)
        # Output axes as given: np.stack counts a negative axis from the end of the output,
        # as ONNX does (checked against the output ranks by infer_shape).
        out_axes = list(p.scan_output_axes) if p.scan_output_axes is not None else \
            [0] * self.k
        states, stacked = scan_once(runner, inputs[:n], scans, inputs[n + m:], in_axes,
                                    in_dirs, out_axes, out_dirs)
        if not stacked:  # zero steps
            stacked = [np.empty(s.shape.dims, s.array.dtype) if s is not None else None
                       for s in outputs[n:]]
        return [*states, *stacked]


@op("", "Scan", since=8, param=Scan8Param)
class Scan8Op(ScanBase):
    """Scan 8: batch axis 0 on every input and output, scan axis 1, sequence_lens first."""

    batched = True

    def _directions(self):
        return _normalized(self.param.directions, self.m, None, "directions",
                           self.node.describe())

    def infer_shape(self, in_shapes, in_values):
        n, m = self.n, self.m
        states, scans = list(in_shapes[1:1 + n]), list(in_shapes[1 + n:1 + n + m])
        batches = {s[0] for s in states + scans if len(s) > 0}
        if len(batches) != 1 or any(len(s) < 1 for s in states) or any(len(s) < 2
                                                                       for s in scans):
            raise self.shape_error("Scan 8 takes a common batch axis 0 on every state and "
                                   "scan input (scan inputs also have the scan axis 1)",
                                   in_shapes)
        batch = batches.pop()
        per_step, steps = self.pass_shapes([s[1:] for s in states], [s[1:] for s in scans],
                                           list(in_shapes[1 + n + m:]),
                                           list(in_values[1 + n + m:]), [0] * m, in_shapes)
        if self.input_present(0):
            lens = in_values[0]
            if lens is None:
                raise self.value_required(0, "sequence_lens")
            if np.asarray(lens).shape != (batch,) or np.any(np.asarray(lens) != steps):
                raise self.unsupported(f"sequence_lens {np.asarray(lens).tolist()} shorter "
                                       f"than the sequence length {steps} are not supported")
        return [*states, *((batch, steps, *s) for s in per_step)]

    def compute(self, runner, inputs, outputs):
        n, m = self.n, self.m
        states, scans = inputs[1:1 + n], inputs[1 + n:1 + n + m]
        captured, directions = inputs[1 + n + m:], self._directions()
        batch = (states + scans)[0].shape[0]
        rows = [scan_once(runner, [s[b] for s in states], [x[b] for x in scans], captured,
                          [0] * m, directions, [0] * self.k, [0] * self.k)
                for b in range(batch)]
        final = [np.stack([row[0][i] for row in rows]) for i in range(n)]
        stacked = []
        for j, slot in enumerate(outputs[n:]):
            if rows and rows[0][1]:
                stacked.append(np.stack([row[1][j] for row in rows]))
            else:
                stacked.append(np.empty(slot.shape.dims, slot.array.dtype))
        if not rows:
            final = [np.empty(s.shape.dims, s.array.dtype) for s in outputs[:n]]
        return [*final, *stacked]
