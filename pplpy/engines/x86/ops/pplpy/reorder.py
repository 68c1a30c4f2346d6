"""Op contexts of pplpy's own nodes, which the engine inserts (never in an ONNX file)."""

import math

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.impls import _copy
from pplpy.engines.x86.ops.canned import same_shape_as_input
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.engines.x86.ops.onnx.shape import constant_vector
from pplpy.oputils.onnx.shape_functions import reshape_shape


class ReorderKernel(X86Kernel):
    """NDARRAY (N, C, S) <-> N16CX (N, C/16, S, 16) float32 as one step of the run plan;
    channels-last NDARRAY (N, S, C) <-> N16CX, C a multiple of 16, as one strided copy of
    16-float runs."""

    def make_step(self, io):
        if not self.has_work(io):
            return None
        x, y = io.inputs[0], io.outputs[0]
        src, dst = x.shape, y.shape
        keep = (x.array, y.array)
        if self.param.channels_last:
            return self._channels_last_step(x, y, keep)
        if src.data_format is dst.data_format:
            return _copy.make_copy_step(y.address, x.address, dst.bytes, keep)
        dims = src.dims
        step = self.impl("reorder_fp32").make_reorder_step(
            x.address, y.address, dims[0], dims[1], math.prod(dims[2:]),
            dst.data_format is DataFormat.N16CX)
        step.keep = keep
        return step

    def _channels_last_step(self, x, y, keep):
        """y[n, c // 16, s, c % 16] = x[n, s, c] (into N16CX) or back: both are a transpose of
        (N, C / 16, S, 16) and (N, S, C / 16, 16)."""
        blocked = y if self.param.dst is DataFormat.N16CX else x
        n, c = blocked.shape.dims[:2]
        s = math.prod(blocked.shape.dims[2:])
        if c % 16:
            raise self.op.unsupported(f"a channels-last reorder of {c} channels (not a "
                                      f"multiple of 16)")
        es, cb = 4, c // 16
        if blocked is y:  # x (N, S, CB, 16) read as (N, CB, S, 16)
            dims, strides = [n, cb, s, 16], [s * c * es, 16 * es, c * es, es]
        else:  # x (N, CB, S, 16) read as (N, S, CB, 16)
            dims, strides = [n, s, cb, 16], [c * s * es, 16 * es, s * 16 * es, es]
        step = _copy.make_strided_copy_step(y.address, x.address, es, dims, strides)
        step.keep = keep
        return step


@op("pplpy", "Reorder", since=1)
class ReorderOp(X86OptKernel):
    """Converts between NDARRAY and N16CX; inserted by reorder insertion (and made to read or
    write channels-last NDARRAY by layout folding)."""

    supported_types = (DataType.FLOAT32,)

    @property
    def value_inputs(self):
        """The shape input of a channels-last reorder of rank 3 (its folded Reshape's)."""
        return (1,) if len(self.node.inputs) > 1 else ()

    def infer_shape(self, in_shapes, in_values):
        last = self.param.channels_last
        x = tuple(in_shapes[0])
        if not last:
            return same_shape_as_input(self, in_shapes, in_values)
        if self.param.src is DataFormat.N16CX:  # (N, C, H, W) -> (N, H, W, C) or (N, HW, C)
            if len(x) != 4:
                raise self.shape_error("expected a 4-D input", in_shapes)
            n, c, h, w = x
            if last == 4:
                return [(n, h, w, c)]
            self._check_reshape(in_shapes, in_values, x, (n, c, h * w))
            return [(n, h * w, c)]
        if len(x) != last:
            raise self.shape_error(f"expected a {last}-D channels-last input", in_shapes)
        if last == 4:
            n, h, w, c = x
            return [(n, c, h, w)]
        out = self._reshaped(in_shapes, in_values, (x[0], x[2], x[1]))
        if len(out) != 4 or out[:2] != (x[0], x[2]):
            raise self.shape_error(f"the folded Reshape must keep N and C and split L into "
                                   f"H x W; it gives {list(out)}", in_shapes)
        return [out]

    def _reshaped(self, in_shapes, in_values, dims):
        """The folded Reshape's output dims for its input ``dims`` (N, C, ...)."""
        target = constant_vector(self, in_shapes, in_values, 1, "a shape")
        try:
            return tuple(reshape_shape(dims, target, self.param.allowzero))
        except ValueError as exc:
            raise self.shape_error(str(exc), in_shapes) from exc

    def _check_reshape(self, in_shapes, in_values, dims, want):
        """The fold assumed the Reshape flattens H x W (as the value records said): a shape
        fed at run time that does not is an error here, never a wrong layout."""
        out = self._reshaped(in_shapes, in_values, dims)
        if out != want:
            raise self.shape_error(f"the folded Reshape must flatten H x W to {list(want)}; "
                                   f"it gives {list(out)}", in_shapes)

    def select_format(self, in_formats, in_shapes):
        return [self.param.src] + [DataFormat.NDARRAY] * (len(in_formats) - 1), [self.param.dst]

    def create_kernel(self):
        return ReorderKernel(self)
