"""X86Kernel: runs one node.  ``can_do_execute`` says whether there is work (empty
outputs need none); ``do_execute`` unpacks the arrays and calls the Cython impl of the
ISA the engine chose."""

import abc

from pplpy.engines.x86.impls.dispatch import load_variant


class KernelContext:
    """What a kernel sees for one node in one run: arrays in their physical layout
    (N16CX arrays are (N, C/16, *S, 16)), their logical TensorShapes, and the thread count."""

    __slots__ = ("inputs", "input_shapes", "outputs", "output_shapes", "num_threads")

    def __init__(self, inputs, input_shapes, outputs, output_shapes, num_threads):
        self.inputs = inputs
        self.input_shapes = input_shapes
        self.outputs = outputs
        self.output_shapes = output_shapes
        self.num_threads = num_threads


class X86Kernel(abc.ABC):
    """Base class of kernels.  One object per node, shared by every Runtime built from the
    same builder: keep it free of per-run state (packed constant weights are fine)."""

    def __init__(self, op):
        self.op = op
        self.node = op.node
        self.param = op.param
        self.isa = op.options.isa

    def impl(self, family):
        """The Cython module of ``family`` for this engine's ISA."""
        return load_variant(family, self.isa)

    def can_do_execute(self, ctx):
        """False when every output is empty: nothing to compute."""
        return any(s is not None and s.element_count > 0 for s in ctx.output_shapes)

    @abc.abstractmethod
    def do_execute(self, ctx):
        """Compute the outputs of ``ctx`` from its inputs."""

    def execute(self, ctx):
        if self.can_do_execute(ctx):
            self.do_execute(ctx)
