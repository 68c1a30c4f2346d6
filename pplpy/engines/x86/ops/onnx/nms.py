"""Op context of NonMaxSuppression (opsets 10 and 11).

For each (batch, class), boxes above score_threshold are taken by descending score (lower
index first among equal scores) and kept unless their IoU with a box already kept exceeds
iou_threshold, up to max_output_boxes_per_class; the output lists the kept
(batch, class, box) triples.

How many boxes survive depends on the values of every input, and pplpy plans each run's
memory before it runs.  So NonMaxSuppression is planned only when all its inputs are known
on the host when the plan is made: constants, host-computed values, or model inputs (their
values then join the plan's signature, so new boxes make a new plan).  The op context runs
the selection on the host to size the output; the step repeats it on the same values.  Boxes
computed at run time by another node (a detector's head) raise ValueRequired, and the
runtime cuts the plan there (``pplpy/runtime/staged_plan.py``): the head runs first, then
the rest is planned with its boxes and scores known.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls.dispatch import load_variant
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import ValueRequired, X86OptKernel
from pplpy.params.onnx import NonMaxSuppressionParam

_FAMILY = "resize_fp32"
_NAMES = ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold")


def _scalar(value, default):
    """First element of an optional scalar input (absent or empty: ``default``)."""
    if value is None:
        return default
    value = np.asarray(value).reshape(-1)
    return value[0] if value.size else default


class NonMaxSuppressionKernel(X86Kernel):
    def make_step(self, io):
        boxes, scores, y = io.inputs[0], io.inputs[1], io.outputs[0]
        rows = y.shape.dims[0]
        if rows == 0:
            return None
        b, n, _ = boxes.shape.dims
        c = scores.shape.dims[1]
        values = [s.array if s is not None else None for s in io.inputs]
        max_per_class, iou, score = self.op.thresholds(values + [None] * 5)
        return self.impl(_FAMILY).make_nms_step(
            boxes.address, scores.address, y.address, b, c, n, rows, max_per_class, iou,
            score, bool(self.param.center_point_box),
            keep=(boxes.array, scores.array, y.array))


@op("", "NonMaxSuppression", since=10, param=NonMaxSuppressionParam)
class NonMaxSuppressionOp(X86OptKernel):
    """y = (batch, class, box) of the boxes greedy IoU suppression keeps, (S, 3) int64."""

    value_inputs = (0, 1, 2, 3, 4)

    def thresholds(self, values):
        """(max_output_boxes_per_class, iou_threshold, score_threshold or None)."""
        max_per_class = int(_scalar(values[2], 0))
        iou = float(_scalar(values[3], 0.0))
        score = _scalar(values[4], None)
        return max_per_class, iou, None if score is None else float(score)

    def infer_type(self, in_types):
        if self.param.center_point_box not in (0, 1):
            raise self.unsupported(f"center_point_box {self.param.center_point_box} "
                                   f"(expected 0 or 1)")
        wanted = (DataType.FLOAT32, DataType.FLOAT32, DataType.INT64, DataType.FLOAT32,
                  DataType.FLOAT32)
        for i, (t, want) in enumerate(zip(in_types, wanted)):
            if self.input_present(i) and t is not want:
                raise self.unsupported(f"input {i} ({_NAMES[i]}) of type {t} (expected {want})")
        return [DataType.INT64]

    def infer_shape(self, in_shapes, in_values):
        boxes, scores = in_shapes[0], in_shapes[1]
        if len(boxes) != 3 or boxes[2] != 4:
            raise self.shape_error("boxes must be (num_batches, spatial_dimension, 4)",
                                   in_shapes)
        if len(scores) != 3 or scores[0] != boxes[0] or scores[2] != boxes[1]:
            raise self.shape_error("scores must be (num_batches, num_classes, "
                                   "spatial_dimension), matching boxes", in_shapes)
        values = list(in_values) + [None] * (5 - len(in_values))
        for i in range(5):
            if self.input_present(i) and values[i] is None:
                raise ValueRequired(
                    f"{self.node.describe()}: the number of boxes NonMaxSuppression selects "
                    f"depends on the values of its inputs, and input {i} ({_NAMES[i]}) is "
                    f"computed at run time by another node; pplpy plans memory before a run, "
                    f"so it plans NonMaxSuppression once its inputs are known (constants, "
                    f"host-computable values, model inputs, or values a staged plan's first "
                    f"stage computed)")
        max_per_class, iou, score = self.thresholds(values)
        impl = load_variant(_FAMILY, self.options.isa)
        selected = impl.non_max_suppression(values[0], values[1], max_per_class, iou, score,
                                            bool(self.param.center_point_box))
        return [(len(selected), 3)]

    def create_kernel(self):
        return NonMaxSuppressionKernel(self)
