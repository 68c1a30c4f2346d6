"""Op contexts of MaxPool, AveragePool and GlobalAveragePool.

Window geometry (auto_pad, ceil_mode, dilations) follows ``oputils.onnx.pool_geometry``,
shared with Conv: ``pool_window`` gives shape inference and the kernels one PoolWindow.
2-D pools keep N16CX when their input arrives blocked; 1-D and 3-D pools and MaxPool with
an Indices output run in NDARRAY.  Each kernel hands the plan one compiled step from the
pool_fp32 impls (``make_*_step``), which split output rows across the thread team.
Element-wise nodes after a pool may run in its step as a post-op chain on each output row
(passes/fuse_post_ops.py; ``op.post_ops``), except after a MaxPool with Indices.

A NaN anywhere in a max window makes that output NaN (numpy's max, PyTorch's max_pool, and
pplpy's ReduceMax); onnx.reference keeps a NaN only as a window's first tap and ONNX
Runtime only as its last, so on NaN input the three can differ.  With Indices, the first
NaN of the window is the index.
"""

import math

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.canned import follow_input_format
from pplpy.engines.x86.ops.declare import op
from pplpy.params.onnx import AveragePoolParam, MaxPoolParam
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.post_chain import ChainedKernel
from pplpy.oputils.onnx.pool_geometry import pool_window


def _physical(slot):
    """The slot's dims as its memory holds them: (N, C, *S) or (N, C/16, *S, 16)."""
    shape = slot.shape
    return tuple(shape.physical_dims if shape.data_format is DataFormat.N16CX else shape.dims)


class ChainedPoolKernel(ChainedKernel):
    """A pool kernel whose step may carry the node's post-op chain."""

    def chain_kwargs(self, io):
        """make_*_step's post_chain, channels and keep arguments for this io."""
        keep = []
        chain = self.post_chain.step_chain(io, io.outputs[0].shape.dims[1], keep)
        return {"post_chain": chain, "channels": io.outputs[0].shape.dims[1],
                "keep": tuple(keep)}


class WindowPoolKernel(ChainedPoolKernel):
    def window(self, io):
        """The PoolWindow of this step's input shape."""
        return self.op.geometry(io.inputs[0].shape.dims)


class MaxPoolKernel(WindowPoolKernel):
    """y = max over the window's in-bounds taps; Indices (NDARRAY) as ONNX flattens them."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("pool_fp32")
        w = self.window(io)
        x, y = io.inputs[0], io.outputs[0]
        if y.shape.data_format is DataFormat.N16CX:
            return impl.make_maxpool_n16cx_step(x.address, y.address, _physical(x),
                                                _physical(y), w.kernel, w.strides,
                                                w.pads_begin, w.dilations,
                                                **self.chain_kwargs(io))
        indices = io.outputs[1] if len(io.outputs) > 1 else None
        return impl.make_maxpool_ndarray_step(
            x.address, y.address, indices.address if indices is not None else 0, _physical(x),
            _physical(y), w.kernel, w.strides, w.pads_begin, w.dilations,
            getattr(self.param, "storage_order", 0) or 0, **self.chain_kwargs(io))


class AveragePoolKernel(WindowPoolKernel):
    """y = sum of the window's in-bounds taps / count (count_include_pad: + explicit pads)."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("pool_fp32")
        w = self.window(io)
        include_pad = bool(self.param.count_include_pad)
        x, y = io.inputs[0], io.outputs[0]
        make = (impl.make_avgpool_n16cx_step if y.shape.data_format is DataFormat.N16CX
                else impl.make_avgpool_ndarray_step)
        return make(x.address, y.address, _physical(x), _physical(y), w.kernel, w.strides,
                    w.pads_begin, w.pads_end, w.dilations, include_pad,
                    **self.chain_kwargs(io))


class GlobalPoolKernel(ChainedPoolKernel):
    """y[n, c] = mean (kind "avg") or max (kind "max") of x[n, c, ...]."""

    def __init__(self, op, kind):
        super().__init__(op)
        self.kind = kind

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("pool_fp32")
        x, y = io.inputs[0], io.outputs[0]
        n, c, *spatial = x.shape.dims
        size = math.prod(spatial)
        if x.shape.data_format is DataFormat.N16CX:
            make = getattr(impl, f"make_global_{self.kind}pool_n16cx_step")
            return make(x.address, y.address, n * _physical(x)[1], size,
                        **self.chain_kwargs(io))
        make = getattr(impl, f"make_global_{self.kind}pool_ndarray_step")
        return make(x.address, y.address, n * c, size, **self.chain_kwargs(io))


class WindowPoolOp(X86OptKernel):
    """Shared shape inference of the windowed pools."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def geometry(self, in_shape):
        """The PoolWindow (output size, pads, defaulted attributes) for an input shape."""
        p = self.param
        return pool_window(in_shape[2:], p.kernel_shape, p.strides, p.dilations, p.pads,
                           p.auto_pad, bool(p.ceil_mode))

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        if len(shape) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if self.param.kernel_shape is not None and len(self.param.kernel_shape) != len(shape) - 2:
            raise self.shape_error(
                f"kernel_shape {list(self.param.kernel_shape)} does not match "
                f"{len(shape) - 2} spatial dims", in_shapes)
        if len(shape) > 5:
            raise self.unsupported(f"{len(shape) - 2}-D pooling is not supported (1-D to 3-D)")
        out = tuple(shape[:2]) + self.geometry(shape).out
        return [out] * len([o for o in self.node.outputs if o])

    def select_format(self, in_formats, in_shapes):
        two_d = in_shapes[0] is not None and len(in_shapes[0]) == 4
        with_indices = len(self.node.outputs) > 1 and bool(self.node.outputs[1])
        if two_d and not with_indices:
            return follow_input_format(self, in_formats, in_shapes)
        return [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY] * len(
            self.node.outputs)


@op("", "MaxPool", since=1, param=MaxPoolParam)
class MaxPoolOp(WindowPoolOp):
    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        return [out[0], DataType.INT64][: len(self.node.outputs)]

    def create_kernel(self):
        return MaxPoolKernel(self)


@op("", "AveragePool", since=7, param=AveragePoolParam)
class AveragePoolOp(WindowPoolOp):
    def create_kernel(self):
        return AveragePoolKernel(self)


class GlobalPoolOp(X86OptKernel):
    """y[n, c] = ``reduction`` of x[n, c, ...], keeping size-1 spatial dims."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format
    reduction = None  # "avg" or "max": GlobalPoolKernel's kind

    def infer_shape(self, in_shapes, in_values):
        shape = in_shapes[0]
        if len(shape) < 3:
            raise self.shape_error("input must be (N, C, spatial...)", in_shapes)
        if any(d == 0 for d in shape[2:]):
            what = "mean" if self.reduction == "avg" else self.reduction
            raise self.shape_error(f"the {what} of an empty spatial extent is undefined",
                                   in_shapes)
        return [tuple(shape[:2]) + (1,) * (len(shape) - 2)]

    def create_kernel(self):
        return GlobalPoolKernel(self, self.reduction)


@op("", "GlobalAveragePool", since=1)
class GlobalAveragePoolOp(GlobalPoolOp):
    """y[n, c] = mean of x[n, c, ...], keeping size-1 spatial dims."""

    reduction = "avg"
