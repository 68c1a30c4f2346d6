"""The x86 engine and its public extension API.

    @op(domain, op_type, since, param)   declares an op: parser, param class, op context
    X86OptKernel                         op context: types, shapes, formats, create_kernel()
    X86Kernel                            kernel: make_step(io) (compiled) or do_execute(ctx)
    impls/_<family>_<isa>.pyx            Cython kernels per ISA, chosen at run time

See docs/add_op.md for a walk through all the layers, and docs/architecture.md for the
pipeline that turns a graph into a compiled run plan.
"""

from pplpy.engines.x86.ops.declare import op, register_op
from pplpy.engines.x86.ops.kernel import KernelContext, Slot, StepIO, X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.engine import X86Engine  # noqa: E402  (after the base classes)

__all__ = ["KernelContext", "Slot", "StepIO", "X86Engine", "X86Kernel", "X86OptKernel", "op",
           "register_op"]
