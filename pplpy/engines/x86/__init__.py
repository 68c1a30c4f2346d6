"""The x86 engine and its public extension API.

    register_op(domain, op_type, versions)  -> op context class (X86OptKernel subclass)
    X86OptKernel.create_kernel()            -> X86Kernel subclass, do_execute() calls impls
    impls/_<family>_<isa>.pyx               -> Cython kernels per ISA, chosen at run time

See docs/add_op.md for a walk through all four layers.
"""

from pplpy.engines.x86.kernels.kernel import KernelContext, X86Kernel
from pplpy.engines.x86.optimizer.op_kernel import X86OptKernel
from pplpy.engines.x86.optimizer.registry import register_op
from pplpy.engines.x86.engine import X86Engine  # noqa: E402  (after the base classes)

__all__ = ["KernelContext", "X86Engine", "X86Kernel", "X86OptKernel", "register_op"]
