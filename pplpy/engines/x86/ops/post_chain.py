"""The post-op chain of a fused node (``op.post_ops``, set by passes/fuse_post_ops.py), as the
kernels of Conv, Gemm, MatMul, pplpy::MatMulBias, the pools, the reductions and Resize hand it
to their impl's ``make_*_step``.

A constant operand is copied into the kernel once, as float32 (its raw constant is then
released like a packed weight); an operand computed at run time is read at its slot's
address.  The step reads operands by address with no checks of its own, so ``step_chain``
checks, for the shapes of this signature, that every operand still has the size its
broadcast kind promises (fusion only joins static shapes; a failed check is a pplpy error
rather than a read past an operand's end).
"""

import math

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.impls.post_ops import Broadcast, chain_args
from pplpy.engines.x86.ops.kernel import X86Kernel


class PostChain:
    """``op.post_ops`` of a kernel's node, with its constant operands held."""

    def __init__(self, op):
        self.entries = tuple(getattr(op, "post_ops", ()))
        self.held = {}
        for e in self.entries:
            for index, _, is_condition in e.operands:
                value = op.constant(index) if index not in self.held else None
                if value is not None:  # a select's condition stays bytes (bool)
                    self.held[index] = np.ascontiguousarray(
                        value, np.uint8 if is_condition else np.float32)
        self.operands = tuple(sorted({index for e in self.entries
                                      for index, _, _ in e.operands}))
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
            for index, broadcast, _ in e.operands:
                held = self.held.get(index)
                if held is not None:
                    count = held.size
                    keep.append(held)
                else:
                    slot = io.inputs[index]
                    count = math.prod(slot.shape.dims)
                    keep.append(slot.array)
                want = {Broadcast.SCALAR: 1, Broadcast.CHANNEL: channels,
                        Broadcast.ELEMENT: size}[broadcast]
                if count != want:
                    raise self.op.shape_error(
                        f"fused post-op {e.describe()} expects an operand of {want} values "
                        f"for output {list(out)}, got {count}", io.input_shapes)
        return chain_args(self.entries, io.inputs, self.held)

    def run_kwargs(self, io, keep, axis=1):
        """make_*_step's post_chain, channels, cstride and blocked arguments for a producer
        that writes its output in runs (ppl_post_chain_range): the channels are the output's
        axis ``axis`` (of its logical dims); appends what the step reads to ``keep``."""
        shape = io.outputs[0].shape
        dims = tuple(shape.dims)
        if shape.data_format is DataFormat.N16CX:
            return {"post_chain": self.step_chain(io, dims[1], keep), "channels": dims[1],
                    "cstride": 16 * math.prod(dims[2:]), "blocked": True}
        axis = axis % len(dims) if dims else 0
        channels = dims[axis] if dims else 1
        return {"post_chain": self.step_chain(io, channels, keep), "channels": channels,
                "cstride": math.prod(dims[axis + 1:]), "blocked": False}


class ChainedKernel(X86Kernel):
    """A kernel whose only held inputs are its chain's constant operands (the pools, the
    reductions, Resize): it holds them from the start, and the fusion pass's chain is what
    ``self.post_chain`` reads."""

    def __init__(self, op):
        super().__init__(op)
        self.post_chain = PostChain(op)
        self.packed_inputs = self.post_chain.packed_inputs

