"""pplpy::EltwiseChain: a run of element-wise nodes (Sub -> Div -> Mul -> Add, Pow -> Mul ->
Add -> Tanh -> ...) as one node and one pass over memory, oneDNN Graph's "Unary/Binary
chains" (reference/004), made by the optimiser's ``fuse_eltwise_chains``.

Input 0 is the chain's value x; the other inputs are the binary entries' operands.  Each
entry (``ChainEntry``) is an activation of the table in ops/onnx/elementwise.py (the same
vector code as the stand-alone op and the GEMM epilogue) or Add / Sub / Mul / Div / Max /
Min / Pow / PRelu with the running value on either side.  An operand broadcasts into x
without growing it; the kernel reads it as

- a scalar (one value, read when the step runs),
- NDARRAY: any operand whose non-1 dims are one contiguous run of x's axes (a last-axis
  bias or LayerNorm gamma, a per-channel [C, 1, 1], a tensor of x's shape, x itself),
- N16CX: a per-channel vector (NDARRAY) or a tensor of x's shape (N16CX).

Formats: x's own when it arrives N16CX and every operand is a scalar, a per-channel vector
or of x's shape; NDARRAY otherwise.  On N16CX the kernel writes the padding lanes 0 after
the chain, so any chain (Log, Div included) keeps them finite.
"""

import dataclasses
import json
import math


from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.onnx.elementwise import ACTIVATIONS, is_channel_vector
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ModelError
from pplpy.oputils.onnx.operand_run import operand_run
from pplpy.params import onnx as onnx_params
from pplpy.params.x86 import ChainEntry, EltwiseChainParam

# Activation entries by op type: the attribute form of each row (Clip as Clip-6, its
# bounds in ClipParam).
ACTIVATION_ROWS = {row.op_type: row for row in ACTIVATIONS if row.input_params is None}
# Binary entries: op type -> (impl op with the running value on the left, on the right).
BINARY_ENTRIES = {"Add": ("ADD", "ADD"), "Sub": ("SUB", "RSUB"), "Mul": ("MUL", "MUL"),
                  "Div": ("DIV", "RDIV"), "Max": ("MAX", "MAX"), "Min": ("MIN", "MIN"),
                  "Pow": ("POW", "RPOW"), "PRelu": ("PRELU", None)}
SELF = -1  # ChainEntry.operand: the running value itself


def entry_code(entry):
    """(code, p0, p1) of an activation entry, or (binary op name, None, None); ValueError
    for an entry pplpy does not run."""
    if entry.op_type in ACTIVATION_ROWS:
        row = ACTIVATION_ROWS[entry.op_type]
        p0, p1 = row.params(entry.param)
        return int(row.code), float(p0), float(p1)
    ops = BINARY_ENTRIES.get(entry.op_type)
    if ops is None:
        raise ValueError(f"{entry.op_type} is not an element-wise op of the chain")
    name = ops[0] if entry.chain_left else ops[1]
    if name is None:
        raise ValueError(f"{entry.op_type} takes the running value on the left only")
    return name, None, None


class EltwiseChainKernel(X86Kernel):
    def __init__(self, op):
        super().__init__(op)
        self.codes = [entry_code(e) for e in self.param.entries]

    def make_step(self, io):
        if not self.has_work(io):
            return None
        impl = self.impl("eltchain_fp32")
        x, y = io.inputs[0], io.outputs[0]
        sy = y.shape
        blocked = sy.data_format is DataFormat.N16CX
        out = tuple(sy.dims)
        entries, keep = [], [x.array, y.array]
        for entry, (code, p0, p1) in zip(self.param.entries, self.codes):
            if p0 is not None:
                entries.append((code, impl.NONE, p0, p1, 0, 0, 0))
                continue
            opcode = impl.BINARY[code]
            if entry.operand == SELF:
                entries.append((opcode, impl.SELF, 0.0, 0.0, 0, 0, 0))
                continue
            b = io.inputs[entry.operand]
            if not b.array.flags.c_contiguous:
                raise ValueError(f"operand {entry.operand}: expected a C-contiguous array")
            keep.append(b.array)
            entries.append((opcode, *self._operand(impl, b, out, blocked)))
        kwargs = {}
        if blocked:
            npix = math.prod(out[2:])
            kwargs = {"run": npix * 16, "blocks": sy.physical_dims[1], "channels": out[1]}
        step = impl.make_chain_step(x.address, y.address, y.array.size, entries, keep=keep,
                                    **kwargs)
        step.label = self.node.name
        return step

    @staticmethod
    def _operand(impl, b, out, blocked):
        """(kind, 0, 0, address, m, inner) reading operand slot ``b`` against ``out``."""
        dims = tuple(b.shape.dims)
        while len(dims) > len(out) and dims[0] == 1:
            dims = dims[1:]  # a scalar constant may arrive as [1] for a [] value
        first, last = operand_run(dims, out)
        if first is None:
            return impl.SCALAR, 0.0, 0.0, b.address, 1, 1
        if blocked:
            if b.shape.data_format is DataFormat.N16CX and tuple(b.shape.dims) == out:
                return impl.FULL, 0.0, 0.0, b.address, 0, 0
            if first == last == 1:
                return impl.CHANNEL, 0.0, 0.0, b.address, out[1], 1
            raise ValueError(f"operand {list(b.shape.dims)} cannot be read on N16CX")
        m = math.prod(out[first:last + 1])
        inner = math.prod(out[last + 1:])
        if inner == 1 and m == math.prod(out):
            return impl.FULL, 0.0, 0.0, b.address, 0, 0
        return impl.BLOCK, 0.0, 0.0, b.address, m, inner


def parse_eltwise_chain(node_proto, opset):
    """The param from a saved model's ``entries`` (EltwiseChainParam.onnx_attributes)."""
    attrs = {a.name: a for a in node_proto.attribute}
    if set(attrs) - {"entries"}:
        raise ModelError(f'node "{node_proto.name}" (pplpy::EltwiseChain): attributes '
                         f"{sorted(set(attrs) - {'entries'})} are not known; it takes "
                         f"'entries'")
    entries = []
    for text in (attrs["entries"].strings if "entries" in attrs else ()):
        try:
            e = json.loads(text.decode())
            cls = e["param"] and getattr(onnx_params, e["param"], None)
            if e["param"] and not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                raise ValueError(f"{e['param']!r} is no pplpy param class")
            fields = {k: tuple(v) if isinstance(v, list) else v
                      for k, v in (e["fields"] or {}).items()}
            entries.append(ChainEntry(str(e["op"]), cls(**fields) if cls else None,
                                      e["operand"], bool(e["chain_left"])))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f'node "{node_proto.name}" (pplpy::EltwiseChain): entry '
                             f"{text[:80]!r} cannot be read: {exc}") from None
    return EltwiseChainParam(tuple(entries))


@op("pplpy", "EltwiseChain", since=1, param=EltwiseChainParam, parse=parse_eltwise_chain)
class EltwiseChainOp(X86OptKernel):
    """y = entries applied in order to x, element by element, float32; x's format (NDARRAY,
    or N16CX when every operand can be read blocked)."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)

    def infer_type(self, in_types):
        out = super().infer_type(in_types)
        if any(t is not DataType.FLOAT32 for t in in_types):
            raise self.unsupported(f"every input must be float32, got {in_types}")
        entries = self.param.entries if self.param is not None else ()
        if not entries:
            raise self.unsupported("the chain has no entries")
        for k, entry in enumerate(entries):
            try:
                entry_code(entry)
            except ValueError as exc:
                raise self.unsupported(f"entry {k}: {exc}") from None
            binary = entry.op_type in BINARY_ENTRIES
            if binary and not (entry.operand == SELF or 0 <= (entry.operand or 0) < len(in_types)):
                raise self.unsupported(f"entry {k}: operand {entry.operand} is not an input")
        return out

    def infer_shape(self, in_shapes, in_values):
        out = tuple(in_shapes[0])
        for index, shape in enumerate(in_shapes[1:], start=1):
            try:
                operand_run(shape, out)
            except ValueError as exc:
                raise self.shape_error(f"input {index}: {exc}", in_shapes) from None
        return [out]

    def select_format(self, in_formats, in_shapes):
        ndarray = [DataFormat.NDARRAY] * len(in_formats), [DataFormat.NDARRAY]
        out = in_shapes[0]
        if in_formats[0] is not DataFormat.N16CX or out is None or len(out) < 2:
            return ndarray
        wanted = [DataFormat.N16CX]
        for shape in in_shapes[1:]:
            if shape is None:
                return ndarray
            if tuple(shape) == tuple(out):
                wanted.append(DataFormat.N16CX)
            elif all(d == 1 for d in shape) or is_channel_vector(shape, out):
                wanted.append(DataFormat.NDARRAY)
            else:
                return ndarray
        return wanted, [DataFormat.N16CX]

    def create_kernel(self):
        return EltwiseChainKernel(self)
