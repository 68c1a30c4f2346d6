"""The loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, float32 scores
(N, C, d1, ..., dk), int32 or int64 targets (N, d1, ..., dk), optional class weights (C,).

    NegativeLogLikelihoodLoss  loss[n, d] = -x[n, t, d] * weight[t],  t = target[n, d]
    SoftmaxCrossEntropyLoss    the same on log_prob = LogSoftmax(x) along axis 1, which is
                               also its optional second output

A target equal to ``ignore_index`` (any value, negative ones included) gives loss 0 and
weight 0.  ``reduction`` "none" outputs the losses (N, d1, ..., dk); "sum" their sum; "mean"
their sum over the sum of the weights of the samples not ignored (the count of those
without weights), NaN when every sample is ignored, as the ONNX reference gives.

Every other target must be a class in [0, C).  Targets known when the plan is made
(constants, host values) are checked then, a ShapeError at load.  Targets read at run time
cannot be checked before the step runs: the step (``impls/_loss.pyx``) gives such a sample
loss 0 without reading outside x or the weights and records where it was, and a check after
it raises an InputError naming the sample, so a bad target never returns numbers.

The opsets where ONNX re-declared these ops (NegativeLogLikelihoodLoss 13 and 22,
SoftmaxCrossEntropyLoss 13) only added element types pplpy does not compute in (bfloat16),
so one declaration from 12 covers them.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _loss
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.movement_common import check_index_type, prod
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import InputError, ModelError
from pplpy.models.onnx.registry import generic_parse
from pplpy.params.onnx import LossParam
from pplpy.runtime.step import PythonStep

_LOG_SOFTMAX_FAMILY = "layernorm_fp32"


def parse_loss(node_proto, opset):
    """LossParam, with ``reduction`` checked: another value has no meaning."""
    param = generic_parse(LossParam, node_proto)
    if param.reduction not in _loss.REDUCTIONS:
        raise ModelError(f'node "{node_proto.name}" ({node_proto.op_type}): attribute '
                         f"'reduction' is {param.reduction!r}; it must be one of "
                         f"{', '.join(repr(r) for r in _loss.REDUCTIONS)}")
    return param


class LossKernel(X86Kernel):
    """[LogSoftmax step (SoftmaxCrossEntropyLoss)], the per-sample step, [the total of a
    "sum"/"mean"], [the check of targets read at run time]."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, target, y = io.inputs[0], io.inputs[1], io.outputs[0]
        weight = io.inputs[2] if len(io.inputs) > 2 else None
        dims = x.shape.dims
        n, c, d = dims[0], dims[1], prod(dims[2:])
        steps, keep = [], [x.array, target.array, y.array]
        scores = x.address if x.shape.element_count else 0
        if self.op.softmax:
            scores, scratch = self._log_softmax(io, steps)
            keep.append(scratch)
        if weight is not None:
            keep.append(weight.array)
        code = _loss.REDUCTIONS[self.param.reduction]
        chunks = _loss.chunks_of(n * d)
        partial = np.zeros((chunks, 2), np.float64)
        bad = np.full(chunks, -1, np.int64)
        steps.append(_loss.make_nll_step(
            scores, target.address if target.shape.element_count else 0,
            target.shape.data_type is DataType.INT64,
            weight.address if weight is not None else 0, y.address, n, c, d, code,
            self.param.ignore_index, partial, bad, keep=tuple(keep)))
        if code != _loss.REDUCTIONS["none"]:
            steps.append(_loss.make_nll_finish_step(partial, code, y.address, keep=y.array))
        if self.op.constant(1) is None:
            shapes = [s.shape.dims if s is not None else None for s in io.inputs]
            steps.append(self._target_check(target.array, bad, shapes))
        return steps

    def _log_softmax(self, io, steps):
        """Append the LogSoftmax step; (address of log_prob, scratch array or None): the
        second output when the node has it, else a buffer of this plan's."""
        x = io.inputs[0]
        out = io.outputs[1] if len(io.outputs) > 1 else None
        scratch = None
        if out is None:
            scratch = np.empty(x.shape.dims, np.float32)
            address = scratch.ctypes.data if scratch.size else 0
        else:
            address = out.address
        if x.shape.element_count:
            dims = x.shape.dims
            steps.append(self.impl(_LOG_SOFTMAX_FAMILY).make_axis_step(
                x.address, address, dims[0], dims[1], prod(dims[2:]), "log_softmax",
                (x.array, out.array if out is not None else scratch)))
        return address, scratch

    def _target_check(self, targets, bad, in_shapes):
        """A step that raises an InputError (bad data fed, as every index a run meets out of
        range) naming the first sample whose target the loss step found outside [0, C)."""
        op_ctx, classes = self.op, in_shapes[0][1]

        def check():
            found = bad[bad >= 0]
            if found.size:
                error = op_ctx.bad_target(int(found.min()), targets, classes, in_shapes)
                raise InputError(str(error))

        return PythonStep(check, label=f"{self.node.name} (target check)")


class LossOp(X86OptKernel):
    """Inputs (scores, target[, weight]); outputs (loss[, log_prob])."""

    softmax = False  # SoftmaxCrossEntropyLoss: the scores go through LogSoftmax first

    def infer_type(self, in_types):
        (scores,) = super().infer_type(in_types)[:1]
        check_index_type(self, in_types, 1, "target")
        return [scores] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        scores = tuple(in_shapes[0])
        if len(scores) < 2:
            raise self.shape_error("the scores need rank >= 2: (N, C) or (N, C, d1, ..., dk)",
                                   in_shapes)
        classes = scores[1]
        samples = (scores[0],) + scores[2:]
        if tuple(in_shapes[1]) != samples:
            raise self.shape_error(f"the target must have shape {list(samples)}: the scores' "
                                   f"(N, C, d1, ...) without C", in_shapes)
        if self.input_present(2) and tuple(in_shapes[2]) != (classes,):
            raise self.shape_error(f"the weight must have shape [{classes}]: one per class",
                                   in_shapes)
        targets = in_values[1] if len(in_values) > 1 else None
        if targets is not None:
            position = self.first_bad_target(np.asarray(targets), classes)
            if position is not None:
                raise self.bad_target(position, targets, classes, in_shapes)
        loss = samples if self.param.reduction == "none" else ()
        return [loss, scores][: len(self.node.outputs)]

    def first_bad_target(self, targets, classes):
        """The flat position of the first target neither in [0, C) nor ignore_index."""
        flat = targets.reshape(-1)
        bad = (flat < 0) | (flat >= classes)
        if self.param.ignore_index is not None:
            bad &= flat != self.param.ignore_index
        where = np.flatnonzero(bad)
        return int(where[0]) if where.size else None

    def bad_target(self, position, targets, classes, in_shapes):
        targets = np.asarray(targets)
        value = int(targets.reshape(-1)[position])
        index = [int(i) for i in np.unravel_index(position, targets.shape)]
        ignore = ("" if self.param.ignore_index is None
                  else f" nor ignore_index ({self.param.ignore_index})")
        return self.shape_error(f"target{index} = {value} is neither a class in [0, "
                                f"{classes}){ignore}", in_shapes)

    def create_kernel(self):
        return LossKernel(self)


@op("", "NegativeLogLikelihoodLoss", since=12, param=LossParam, parse=parse_loss)
class NegativeLogLikelihoodLossOp(LossOp):
    """loss = -x[n, target, d] * weight[target], reduced (none, sum, mean)."""


@op("", "SoftmaxCrossEntropyLoss", since=12, param=LossParam, parse=parse_loss)
class SoftmaxCrossEntropyLossOp(LossOp):
    """loss = -LogSoftmax(x)[n, target, d] * weight[target], reduced; log_prob optional."""

    softmax = True
