"""GatherElements, GatherND, ScatterND and ScatterElements: element and slice indexing with
int32 or int64 indices (negative ones count from the end), any element type; scatter
reductions (add, mul from opset 16; max, min from 18) on the numeric types.

Indices known when the plan is made (constants, host values, fed value inputs) are checked
and an index out of range is a ShapeError naming it.  Indices computed at run time are
checked by the step: a gather writes zeros for an index out of range and a scatter skips it,
so no step reads or writes outside its tensors, and the run then raises an InputError naming
the index (a ``ppl_fault``; see pplpy_step.h), as ONNX Runtime does.  Duplicate scatter indices
apply in order (the last wins for "none"), as onnx's reference does.
"""

import numpy as np

from pplpy.engines.x86.impls import _index
from pplpy.engines.x86.ops.canned import ANY_TYPE
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.onnx.movement_common import (
    NUMERIC_TYPES,
    check_index_type,
    parse_with,
    prod,
)
from pplpy.engines.x86.ops.onnx.shape import DataMovementKernel, keep_arrays
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ShapeError
from pplpy.oputils.onnx.shape_functions import normalize_axis
from pplpy.params.onnx import GatherElementsParam, GatherNDParam, ScatterParam


def check_in_range(op, indices, dims, in_shapes):
    """ShapeError for the first index (last axis of ``indices`` runs over ``dims``) outside
    [-dim, dim)."""
    if indices is None or indices.size == 0:
        return
    idx = np.asarray(indices).reshape(-1, len(dims)) if len(dims) else None
    limit = np.asarray(dims, np.int64)
    bad = (idx < -limit) | (idx >= limit)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise op.shape_error(f"index {int(idx[row, col])} is out of range for a dim of "
                             f"{int(limit[col])}", in_shapes)


class IndexOp(X86OptKernel):
    supported_types = ANY_TYPE
    reduction_ops = False

    def infer_type(self, in_types):
        check_index_type(self, in_types, 1, "indices")
        reduction = self.reduction()
        if reduction != "none" and in_types[0] not in NUMERIC_TYPES:
            raise self.unsupported(f'reduction "{reduction}" on {in_types[0]} is not supported '
                                   f"(numeric types only)")
        if len(in_types) > 2 and in_types[2] is not in_types[0]:
            raise ShapeError(f"{self.node.describe()}: updates must have the data's type "
                             f"{in_types[0]}, got {in_types[2]}")
        return [in_types[0]]

    def reduction(self):
        reduction = getattr(self.param, "reduction", "none")
        allowed = ("none",) + (("add", "mul") if self.node.opset >= 16 else ()) + (
            ("max", "min") if self.node.opset >= 18 else ())
        if reduction not in allowed:
            raise self.unsupported(f'reduction "{reduction}" is not one of {allowed} at opset '
                                   f"{self.node.opset}")
        return reduction

    def axis(self, in_shapes):
        try:
            return normalize_axis(self.param.axis if self.param else 0, len(in_shapes[0]))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc


class ElementsKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        data, indices, y = io.inputs[0], io.inputs[1], io.outputs[0]
        shapes = [s.shape.dims if s else None for s in io.inputs]
        axis = self.op.axis(shapes)
        self.op.check(shapes, self.op.constant(1))
        common = dict(index_size=indices.shape.data_type.itemsize,
                      es=data.shape.data_type.itemsize, data_dims=list(data.shape.dims),
                      index_dims=list(indices.shape.dims), axis=axis)
        if self.node.op_type == "GatherElements":
            step = _index.make_gather_elements_step(y.address, data.address, indices.address,
                                                    **common)
        else:
            step = _index.make_scatter_elements_step(
                y.address, data.address, indices.address, io.inputs[2].address, **common,
                code=data.shape.data_type.value,
                reduction=_index.REDUCTIONS[self.op.reduction()])
        step.keep = keep_arrays(io)
        return step


class ElementsOp(IndexOp):
    def check(self, in_shapes, indices):
        data, idx = in_shapes[0], in_shapes[1]
        axis = self.axis(in_shapes)
        if len(idx) != len(data) or any(i > d for k, (i, d) in enumerate(zip(idx, data))
                                         if k != axis):
            raise self.shape_error("indices must have the data's rank and no larger dims "
                                   "off the axis", in_shapes)
        if len(in_shapes) > 2 and in_shapes[2] is not None and tuple(in_shapes[2]) != tuple(idx):
            raise self.shape_error("updates must have the shape of indices", in_shapes)
        if indices is not None and indices.size:
            check_in_range(self, indices.reshape(-1, 1), [data[axis]], in_shapes)

    def infer_shape(self, in_shapes, in_values):
        self.check(in_shapes, in_values[1])
        return [in_shapes[1] if self.node.op_type == "GatherElements" else in_shapes[0]]

    def create_kernel(self):
        return ElementsKernel(self)


@op("", "GatherElements", since=11, param=GatherElementsParam)
class GatherElementsOp(ElementsOp):
    """y[p] = data[p with p[axis] = indices[p]]."""


@op("", "ScatterElements", since=11, param=ScatterParam, parse=parse_with(ScatterParam))
@op("", "ScatterElements", since=16, param=ScatterParam, parse=parse_with(ScatterParam))
@op("", "ScatterElements", since=18, param=ScatterParam, parse=parse_with(ScatterParam))
class ScatterElementsOp(ElementsOp):
    """y = data; y[p with p[axis] = indices[p]] (reduction)= updates[p]."""


class NDKernel(DataMovementKernel):
    def make_step(self, io):
        if not self.has_work(io):
            return None
        data, indices, y = io.inputs[0], io.inputs[1], io.outputs[0]
        shapes = [s.shape.dims if s else None for s in io.inputs]
        b, q, m = self.op.geometry(shapes, self.op.constant(1))
        index_size = indices.shape.data_type.itemsize
        es = data.shape.data_type.itemsize
        if self.node.op_type == "GatherND":
            step = _index.make_gather_nd_step(y.address, data.address, indices.address,
                                              index_size, es, list(data.shape.dims), b, m, q)
        else:
            step = _index.make_scatter_nd_step(
                y.address, data.address, indices.address, io.inputs[2].address, index_size,
                es, list(data.shape.dims), m, q, data.shape.data_type.value,
                _index.REDUCTIONS[self.op.reduction()])
        step.keep = keep_arrays(io)
        return step


class NDOp(IndexOp):
    def geometry(self, in_shapes, indices):
        """(batch_dims, tuple length q, tuples per batch m); checks shapes and known
        indices."""
        data, idx = in_shapes[0], in_shapes[1]
        b = getattr(self.param, "batch_dims", 0) or 0
        if len(idx) < 1 or b < 0 or b >= len(idx):
            raise self.shape_error(f"indices need rank > batch_dims ({b})", in_shapes)
        q = idx[-1]
        if b + q > len(data) or tuple(idx[:b]) != tuple(data[:b]):
            raise self.shape_error(f"index tuples of length {q} after {b} batch dims do not "
                                   f"fit the data", in_shapes)
        m = prod(idx[b:-1])
        if len(in_shapes) > 2 and in_shapes[2] is not None:
            want = tuple(idx[:-1]) + tuple(data[q:])
            if tuple(in_shapes[2]) != want:
                raise self.shape_error(f"updates must have shape {list(want)}", in_shapes)
        if indices is not None and q:
            check_in_range(self, indices, data[b:b + q], in_shapes)
        return b, q, m

    def infer_shape(self, in_shapes, in_values):
        b, q, _ = self.geometry(in_shapes, in_values[1])
        if self.node.op_type == "GatherND":
            return [tuple(in_shapes[1][:-1]) + tuple(in_shapes[0][b + q:])]
        return [in_shapes[0]]

    def create_kernel(self):
        return NDKernel(self)


@op("", "GatherND", since=11)
@op("", "GatherND", since=12, param=GatherNDParam)  # batch_dims
class GatherNDOp(NDOp):
    """y[b, j] = data[b, indices[b, j, 0], ..., indices[b, j, q-1]]."""


@op("", "ScatterND", since=11)
@op("", "ScatterND", since=16, param=ScatterParam, parse=parse_with(ScatterParam))  # add, mul
@op("", "ScatterND", since=18, param=ScatterParam, parse=parse_with(ScatterParam))  # max, min
class ScatterNDOp(NDOp):
    """y = data; y[indices[j]] (reduction)= updates[j]."""

