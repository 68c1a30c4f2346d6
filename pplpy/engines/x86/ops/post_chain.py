"""The post-op chain of a fused node (``op.post_ops``, set by passes/fuse_post_ops.py), as the
kernels of Conv, Gemm, MatMul and pplpy::MatMulBias hand it to their impl's ``make_*_step``.

A constant operand is copied into the kernel once, as float32 (its raw constant is then
released like a packed weight); an operand computed at run time is read at its slot's
address.  The step reads operands by address with no checks of its own, so ``step_chain``
checks, for the shapes of this signature, that every operand still has the size its
broadcast kind promises (fusion only joins static shapes; a failed check is a pplpy error
rather than a read past an operand's end).
"""

import math

import numpy as np

from pplpy.engines.x86.impls.post_ops import Broadcast, chain_args


class PostChain:
    """``op.post_ops`` of a kernel's node, with its constant operands held."""

    def __init__(self, op):
        self.entries = tuple(getattr(op, "post_ops", ()))
        self.held = {}
        for e in self.entries:
            if e.operand is not None and e.operand not in self.held:
                value = op.constant(e.operand)
                if value is not None:
                    self.held[e.operand] = np.ascontiguousarray(value, np.float32)
        self.operands = tuple(sorted({e.operand for e in self.entries
                                      if e.operand is not None}))
        self.op = op

    @property
    def packed_inputs(self):
        """The operand inputs the kernel holds a copy of."""
        return tuple(self.held)

    def step_chain(self, io, channels, keep):
        """The ``post_chain`` argument of make_*_step for this io; appends what the step reads
        to ``keep``.  ``channels``: the output's channel count (per-channel operands)."""
        if not self.entries:
            return ()
        out = io.outputs[0].shape.dims
        size = math.prod(out)
        for e in self.entries:
            if e.operand is None:
                continue
            held = self.held.get(e.operand)
            if held is not None:
                count = held.size
                keep.append(held)
            else:
                slot = io.inputs[e.operand]
                count = math.prod(slot.shape.dims)
                keep.append(slot.array)
            want = {Broadcast.SCALAR: 1, Broadcast.CHANNEL: channels,
                    Broadcast.ELEMENT: size}[e.broadcast]
            if count != want:
                raise self.op.shape_error(
                    f"fused post-op {e.describe()} expects an operand of {want} values for "
                    f"output {list(out)}, got {count}", io.input_shapes)
        return chain_args(self.entries, io.inputs, self.held)
