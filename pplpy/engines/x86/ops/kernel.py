"""X86Kernel: what runs one node.  A kernel is made once per node when the runtime is built
(it packs constant weights then), and turns into one step of the compiled run plan for each
input-shape signature:

    kernel.make_step(io) -> Step        io: StepIO, where every input and output lives

A compiled kernel overrides ``make_step`` and returns the Step its impl module builds (a C
function with pre-bound arguments; see ``pplpy/runtime/step.pxd``).  A kernel written in
Python overrides ``do_execute(ctx)`` instead: the default ``make_step`` wraps it in a
PythonStep, which takes the GIL for its own call and sees numpy views of the arena.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.errors import PluginError
from pplpy.runtime.fork import reset_after_fork
from pplpy.runtime.step import PythonStep


class ShapeCache:
    """Arrays a kernel derives for one input shape (weights expanded to it, offset tables),
    made once per shape and shared by the steps made for it.

    A kernel lives as long as its build, so a plain dict grew by one entry for every shape a
    model was ever fed (a LayerNorm over (S, D) with a free S: 650 MB over 400 lengths); the
    least recently used entries go past ``size``.  A step keeps its own reference to what
    it uses (``Step.keep``), so an entry can go while plans made from it still run."""

    def __init__(self, size=8):
        self.size = size
        self._entries = OrderedDict()
        self._lock = threading.Lock()  # runtimes sharing a build make plans at once
        reset_after_fork(self)

    def _after_fork_in_child(self):
        self._lock = threading.Lock()

    def get(self, key, make):
        """The entry for ``key``, made by ``make()`` the first time (or after eviction)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = make()
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def __len__(self):
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class Slot:
    """One input or output of a step.

    ``shape`` is the logical TensorShape (dims, element type, format); ``array`` a numpy view
    of the memory in its physical layout (N16CX arrays are (N, C/16, *S, 16)); ``address``
    the address of its first byte, for compiled steps.  A step may keep ``address`` (the
    memory outlives the step); it must not write to inputs.  The slot of a constant the
    kernel packed (``packed_inputs``) has ``array`` None: the raw weight is gone.
    """

    shape: object  # TensorShape
    array: np.ndarray | None

    @property
    def address(self):
        if self.array is None:
            raise ValueError("this input was packed into the kernel; its raw data is gone")
        return self.array.__array_interface__["data"][0]


class StepIO:
    """Everything ``make_step`` needs: the node's inputs and outputs (None where an optional
    one is absent) and the size of the runtime's thread team."""

    __slots__ = ("inputs", "outputs", "num_threads")

    def __init__(self, inputs, outputs, num_threads):
        self.inputs = inputs
        self.outputs = outputs
        self.num_threads = num_threads

    @property
    def input_shapes(self):
        return [s.shape if s is not None else None for s in self.inputs]

    @property
    def output_shapes(self):
        return [s.shape if s is not None else None for s in self.outputs]

    def context(self):
        """The numpy view of this IO that Python kernels see."""
        return KernelContext(
            [s.array if s is not None else None for s in self.inputs],
            self.input_shapes,
            [s.array if s is not None else None for s in self.outputs],
            self.output_shapes,
            self.num_threads,
        )


class KernelContext:
    """What a Python kernel sees for one node: arrays in their physical layout (N16CX
    arrays are (N, C/16, *S, 16)), their logical TensorShapes, and the thread count.
    Write results into ``outputs[i]`` (views of the arena); rebinding them has no effect."""

    __slots__ = ("inputs", "input_shapes", "outputs", "output_shapes", "num_threads")

    def __init__(self, inputs, input_shapes, outputs, output_shapes, num_threads):
        self.inputs = inputs
        self.input_shapes = input_shapes
        self.outputs = outputs
        self.output_shapes = output_shapes
        self.num_threads = num_threads


class X86Kernel:
    """Base class of kernels.  One object per node, shared by every Runtime built from the
    same builder: keep it free of per-run state (packed constant weights are fine)."""

    # Input indices whose constant values the kernel copied (packed) when it was made: the
    # engine then drops the raw weights, so they are held once.
    packed_inputs = ()
    # True when output 0 is input 0's bytes unchanged (Reshape, Squeeze, BitCast): the plan
    # may then place the output on the input's memory and run no step (inplace_reshape.py).
    views_input = False
    # The input index of a leading sum post-op (output += scale * input, same shape and
    # layout) that the step reads element by element just before it writes the same output
    # element, and writes each element once: the plan may then place the output on that
    # input's memory where the input dies at this node, so the sum accumulates into the
    # destination as oneDNN's sum post-op does (inplace_sum.py).  None: it may not.
    sum_in_place = None

    def __init__(self, op):
        self.op = op
        self.node = op.node
        self.param = op.param
        self.isa = op.options.isa

    def impl(self, family):
        """The Cython module of ``family`` for this engine's ISA."""
        return load_variant(family, self.isa)

    def has_work(self, io):
        """False when every output is empty: nothing to compute, no step."""
        return any(s is not None and s.shape.element_count > 0 for s in io.outputs)

    def make_step(self, io):
        """The step that computes this node for the shapes in ``io`` (None: nothing to do;
        a list of steps for phases that need a barrier between them, e.g. pack then multiply).

        Default, for kernels written in Python: a PythonStep calling ``do_execute``."""
        if not self.has_work(io):
            return None
        ctx = io.context()
        outputs = list(ctx.outputs)
        do_execute, kernel, node = self.do_execute, type(self), self.node

        def run():
            do_execute(ctx)
            for i, (now, then) in enumerate(zip(ctx.outputs, outputs)):
                if now is not then:  # the result went nowhere: say so instead of a wrong answer
                    ctx.outputs[i] = then
                    raise PluginError(
                        f"{node.describe()}: {kernel.__name__}.do_execute rebound "
                        f"ctx.outputs[{i}] instead of writing into it; write with "
                        f"out=ctx.outputs[{i}] or ctx.outputs[{i}][...] = ...",
                        node=node.name, plugin=kernel.__module__.split(".")[0])

        return PythonStep(run, label=self.node.name)

    def do_execute(self, ctx):
        """Compute the outputs of ``ctx`` from its inputs (Python kernels)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither make_step nor "
                                  f"do_execute")

    # Older name of has_work for Python kernels that test their KernelContext.
    def can_do_execute(self, ctx):
        return any(s is not None and s.element_count > 0 for s in ctx.output_shapes)
