"""What the x86 engine knows about each operator, one file per op (or op family).

An op file holds the op's declaration (``@op``: parser, param class, op context), its op
context (type and shape inference, format selection, kernel choice) and its kernel (how the
node becomes a step of the compiled run plan):

    NodeProto --@op parser--> Node(param) --op context: types, shapes, formats-->
              --create_kernel() (weights packed once)--> kernel
              --make_step(io) per input-shape signature--> Step (C function + arguments)

    ops/op_context.py   X86OptKernel, the op-context base class
    ops/kernel.py       X86Kernel, the kernel base class; StepIO, what make_step sees
    ops/declare.py      @op and the op-context registry
    ops/canned.py       inference and format functions many ops share
    ops/onnx/           ONNX-domain ops, imported by scanning the folder
    ops/pplpy/          pplpy's own nodes (Reorder), inserted by the engine
"""

from pplpy.engines.x86.ops import onnx, pplpy  # noqa: F401  (registers every op)
