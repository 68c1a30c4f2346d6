"""RNN, GRU and LSTM (opset 7 on; ``layout`` from 14), float32, every direction.

    RNN   h = f(x W^T + h R^T + Wb + Rb)
    GRU   z = f(x Wz^T + h Rz^T + b),  r = f(x Wr^T + h Rr^T + b)
          h~ = g(x Wh^T + (r * h) Rh^T + Rbh + Wbh)         linear_before_reset = 0
          h~ = g(x Wh^T + r * (h Rh^T + Rbh) + Wbh)         linear_before_reset = 1
          h = (1 - z) * h~ + z * h
    LSTM  i = f(.. + Pi * c),  f = f(.. + Pf * c) (1 - i with input_forget),  c~ = g(..)
          c = f * c + i * c~,  o = f(.. + Po * c),  h = o * h(c)

The kernel runs up to three steps: the input projection X W^T of every time step, batch
entry and direction as one GEMM on gemm_fp32's microkernel (W packed once when the kernel is
made, or packed by the GEMM step when W is fed); R^T packed into scratch when R is fed; and
the recurrence of ``_rnn_fp32``.  Directions and batch entries are independent over the
whole sequence, so the recurrence is ONE step whose work items are (direction, block of
batch rows), each running its own time loop: no barrier per time step.  The price: a
batch-1, one-direction op runs its recurrence on one thread (splitting hidden units inside
a time step would need a barrier, i.e. one step per time step, and gains only for hidden
sizes in the many hundreds).

Spec points pplpy settles as ONNX Runtime does: activation_alpha / activation_beta are
consumed in order by the activations that take them; clip bounds the input of every gate
activation (not that of LSTM's h(c)); an entry past sequence_lens[b] is 0 in Y, and Y_h /
Y_c hold the state after the last step computed (0 for an empty sequence); lengths outside
[0, seq] are clamped.  Where it departs from the spec, the spec wins: an alpha / beta not
given takes the default of the ONNX op of that name (Affine 1, 0; ThresholdedRelu 1;
ScaledTanh 1, 1), where ONNX Runtime takes 0.
"""

import numpy as np

from pplpy.common.data_type import DataType
from pplpy.engines.x86.ops.declare import op
from pplpy.engines.x86.ops.kernel import X86Kernel
from pplpy.engines.x86.ops.op_context import X86OptKernel
from pplpy.errors import ModelError
from pplpy.models.onnx.registry import generic_parse
from pplpy.params.onnx import GRUParam, LSTMParam, RNNParam

# Activation name (lowercase) -> (default alpha, default beta); None: takes no such value.
ACTIVATION_ARGUMENTS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None),
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
    "softsign": (None, None), "softplus": (None, None),
}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
# Inputs: X W R B sequence_lens initial_h initial_c P
INPUT_NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def parse_before_14(param_cls):
    """Opsets 7-13 have no ``layout`` attribute."""

    def parse(node_proto, opset):
        if any(a.name == "layout" for a in node_proto.attribute):
            raise ModelError(f'node "{node_proto.name}" ({node_proto.op_type}-{opset}): the '
                             f"layout attribute exists from opset 14")
        return generic_parse(param_cls, node_proto)

    return parse


class RecurrentKernel(X86Kernel):
    """GEMM step for X W^T, an R^T pack step when R is fed, the recurrence step."""

    def __init__(self, op_ctx):
        super().__init__(op_ctx)
        self.kind, self.gates = op_ctx.kind, op_ctx.gates
        self.activations = op_ctx.resolved_activations()
        packed = []
        w = op_ctx.constant(1)
        self.packed_w = None
        if w is not None:
            w = np.ascontiguousarray(w, np.float32)
            self.packed_w = self.impl("gemm_fp32").gemm_pack_b(
                w.reshape(-1, w.shape[-1]), True)  # B = W^T: (input, dirs * gates * hidden)
            packed.append(1)
        r = op_ctx.constant(2)
        self.rt = None
        if r is not None:
            self.rt = np.ascontiguousarray(np.asarray(r, np.float32).transpose(0, 2, 1))
            packed.append(2)
        self.weights = {}  # B, P copied as float32
        for index in (3, 7):
            value = op_ctx.constant(index) if op_ctx.input_present(index) else None
            if value is not None:
                self.weights[index] = np.ascontiguousarray(value, np.float32)
                packed.append(index)
        self.packed_inputs = tuple(packed)

    def _address(self, io, index, keep):
        """Address of input ``index`` (a packed copy or the slot), 0 when absent."""
        if index in self.weights:
            keep.append(self.weights[index])
            return self.weights[index].ctypes.data
        slot = io.inputs[index] if index < len(io.inputs) else None
        if slot is None:
            return 0
        keep.append(slot.array)
        return slot.address

    def make_step(self, io):
        if not self.has_work(io):
            return None
        p = self.param
        x = io.inputs[0]
        seq, batch, size = x.shape.dims
        if p.layout:
            seq, batch = batch, seq
        dirs, gh, hidden = io.inputs[2].shape.dims
        n = dirs * gh
        m = seq * batch
        outs = list(io.outputs) + [None] * (3 - len(io.outputs))
        y, yh, yc = outs[:3]
        keep = [x.array]
        steps = []
        xw = None
        gemm = self.impl("gemm_fp32")
        if m > 0:
            xw = np.empty((m, n), np.float32)
            keep.append(xw)
            if self.packed_w is not None:
                steps.append(gemm.make_gemm_step(
                    x.address, self.packed_w.ctypes.data, xw.ctypes.data, m, size, n,
                    io.num_threads, keep=(x.array, self.packed_w, xw)))
            else:
                w = io.inputs[1]
                steps.append(gemm.make_gemm_step(
                    x.address, w.address, xw.ctypes.data, m, size, n, io.num_threads,
                    b_packed=False, trans_b=True, ldb=size, keep=(x.array, w.array, xw)))
        impl = self.impl("rnn_fp32")
        if self.rt is not None:
            rt = self.rt
        else:
            rt = np.empty((dirs, hidden, gh), np.float32)
            r = io.inputs[2]
            steps.append(impl.make_pack_r_step(r.address, rt.ctypes.data, dirs, gh, hidden,
                                               (r.array, rt)))
        keep.append(rt)
        if p.layout:  # X, Y batch-major; initial_h, Y_h (batch, dirs, hidden)
            xw_st, xw_sb = n, seq * n
            y_st, y_sd, y_sb = dirs * hidden, hidden, seq * dirs * hidden
            s_d, s_b = hidden, dirs * hidden
        else:
            xw_st, xw_sb = batch * n, n
            y_st, y_sd, y_sb = dirs * batch * hidden, batch * hidden, hidden
            s_d, s_b = batch * hidden, hidden
        outputs = {}
        for name, slot in (("y", y), ("yh", yh), ("yc", yc)):
            if slot is not None and slot.shape.element_count > 0:
                keep.append(slot.array)
                outputs[name] = slot.address
        codes = [[(impl.ACTIVATIONS[name], alpha, beta) for name, alpha, beta in acts]
                 for acts in self.activations]
        lstm = self.kind == "LSTM"
        steps.append(impl.make_recurrence_step(
            self.kind, seq, batch, dirs, hidden, 0 if xw is None else xw.ctypes.data,
            xw_st, xw_sb, rt.ctypes.data, reverse=p.direction == "reverse",
            bias=self._address(io, 3, keep), peep=self._address(io, 7, keep) if lstm else 0,
            lens=self._address(io, 4, keep), h0=self._address(io, 5, keep),
            c0=self._address(io, 6, keep) if lstm else 0, s_d=s_d, s_b=s_b,
            y=outputs.get("y", 0), y_st=y_st, y_sd=y_sd, y_sb=y_sb, yh=outputs.get("yh", 0),
            yc=outputs.get("yc", 0), activations=codes, clip=self.op.clip(),
            input_forget=bool(getattr(p, "input_forget", 0)),
            linear_before_reset=bool(getattr(p, "linear_before_reset", 0)),
            num_threads=io.num_threads, keep=tuple(keep)))
        return steps


class _RecurrentOp(X86OptKernel):
    kind = "RNN"
    gates = 1
    default_activations = ("Tanh",)

    @property
    def num_directions(self):
        return DIRECTIONS[self.param.direction]

    def clip(self):
        return None if self.param.clip is None else float(self.param.clip)

    def resolved_activations(self):
        """[(name, alpha, beta)] per slot, per direction; raises UnsupportedOpError."""
        p = self.param
        if p.direction not in DIRECTIONS:
            raise self.unsupported(f"direction {p.direction!r}: expected forward, reverse or "
                                   f"bidirectional")
        dirs, slots = self.num_directions, len(self.default_activations)
        names = list(p.activations) or list(self.default_activations) * dirs
        if len(names) != slots * dirs:
            raise self.unsupported(f"{len(names)} activations {list(names)}: {self.kind} "
                                   f"{p.direction} takes {slots * dirs}")
        alphas, betas = list(p.activation_alpha), list(p.activation_beta)
        resolved = []
        for name in names:
            key = name.lower()
            if key not in ACTIVATION_ARGUMENTS:
                raise self.unsupported(f"activation {name!r} is not supported (pplpy has: "
                                       f"{', '.join(sorted(ACTIVATION_ARGUMENTS))})")
            default_alpha, default_beta = ACTIVATION_ARGUMENTS[key]
            alpha = beta = 0.0
            if default_alpha is not None:
                alpha = float(alphas.pop(0)) if alphas else default_alpha
            if default_beta is not None:
                beta = float(betas.pop(0)) if betas else default_beta
            resolved.append((key, alpha, beta))
        return [resolved[d * slots:(d + 1) * slots] for d in range(dirs)]

    def infer_type(self, in_types):
        for index, data_type in enumerate(in_types):
            if data_type is None:
                continue
            want = DataType.INT32 if index == 4 else DataType.FLOAT32
            if data_type is not want:
                raise self.unsupported(f"input {INPUT_NAMES[index]} is {data_type}; pplpy "
                                       f"runs {self.kind} on float32 (sequence_lens int32)")
        self.resolved_activations()
        p = self.param
        if p.layout not in (0, 1):
            raise self.unsupported(f"layout={p.layout}: expected 0 or 1")
        if getattr(p, "linear_before_reset", 0) not in (0, 1):
            raise self.unsupported(f"linear_before_reset={p.linear_before_reset}: expected 0/1")
        if getattr(p, "input_forget", 0) not in (0, 1):
            raise self.unsupported(f"input_forget={p.input_forget}: expected 0 or 1")
        if p.clip is not None and not p.clip > 0:
            raise self.unsupported(f"clip={p.clip}: expected a positive threshold")
        return [DataType.FLOAT32] * len(self.node.outputs)

    def infer_shape(self, in_shapes, in_values):
        p = self.param
        x, w, r = (in_shapes[i] if i < len(in_shapes) else None for i in range(3))
        if x is None or w is None or r is None:
            raise self.shape_error("X, W and R must be given", in_shapes)
        if len(x) != 3 or len(w) != 3 or len(r) != 3:
            raise self.shape_error("X, W and R must have rank 3", in_shapes)
        seq, batch = (x[1], x[0]) if p.layout else (x[0], x[1])
        dirs = self.num_directions
        hidden = p.hidden_size if p.hidden_size is not None else r[2]

        def check(index, want):
            shape = in_shapes[index] if index < len(in_shapes) else None
            if shape is None:
                return
            if len(shape) != len(want) or any(
                    isinstance(a, int) and isinstance(b, int) and a != b
                    for a, b in zip(shape, want)):
                raise self.shape_error(f"{INPUT_NAMES[index]} must have shape {list(want)}",
                                       in_shapes)

        gh = self.gates * hidden if isinstance(hidden, int) else None
        check(1, (dirs, gh, x[2]))
        check(2, (dirs, gh, hidden))
        check(3, (dirs, 2 * gh if gh is not None else None))
        check(4, (batch,))
        state = (batch, dirs, hidden) if p.layout else (dirs, batch, hidden)
        check(5, state)
        if self.kind == "LSTM":
            check(6, state)
            check(7, (dirs, 3 * hidden if isinstance(hidden, int) else None))
        y = (batch, seq, dirs, hidden) if p.layout else (seq, dirs, batch, hidden)
        return [y, state, state][:len(self.node.outputs)]

    def create_kernel(self):
        return RecurrentKernel(self)


@op("", "RNN", since=7, param=RNNParam, parse=parse_before_14(RNNParam))
@op("", "RNN", since=14, param=RNNParam)  # layout
class RNNOp(_RecurrentOp):
    """h = f(x W^T + h R^T + Wb + Rb); NDARRAY."""


@op("", "GRU", since=7, param=GRUParam, parse=parse_before_14(GRUParam))
@op("", "GRU", since=14, param=GRUParam)  # layout
class GRUOp(_RecurrentOp):
    """Gated recurrent unit (gates z, r, h; linear_before_reset); NDARRAY."""

    kind = "GRU"
    gates = 3
    default_activations = ("Sigmoid", "Tanh")


@op("", "LSTM", since=7, param=LSTMParam, parse=parse_before_14(LSTMParam))
@op("", "LSTM", since=14, param=LSTMParam)  # layout
class LSTMOp(_RecurrentOp):
    """Long short-term memory (gates i, o, f, c; peepholes, input_forget); NDARRAY."""

    kind = "LSTM"
    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
