"""Post-ops: activation codes, shared by the eltwise kernels and every kernel that can fuse
work into its output (the epilogue of GEMM and convolution), and the chains of post-ops
those kernels apply, after oneDNN's post-op list (reference/000).

The codes are plain ints so that ``nogil`` code can switch on them; each activation is a
vector function in ``_activation_fp32.h``, each chain entry kind a loop of
``_post_chain_fp32.h``.  ``p0`` / ``p1`` are an activation's scalar parameters (LeakyRelu's
alpha; Clip's min and max; Selu's alpha and gamma ...).

A fused node's op context lists its chain in ``op.post_ops`` as :class:`PostOpEntry` values,
in order; an entry with an operand names it by its index in the node's inputs (the fusion
pass appends the operand to them), and the kernel turns it into an address when it makes its
step (``chain_args``).
"""

import enum
from dataclasses import dataclass

MAX_POST_OPS = 32  # oneDNN's limit; PPL_MAX_POST_OPS in _post_chain_fp32.h


class PostOp(enum.IntEnum):
    NONE = 0
    RELU = 1  # y = max(x, 0)
    LEAKY_RELU = 2  # y = x if x >= 0 else p0 * x
    CLIP = 3  # y = min(max(x, p0), p1)
    SIGMOID = 4  # y = 1 / (1 + exp(-x))
    TANH = 5  # y = tanh(x)
    HARD_SWISH = 6  # y = x * min(max(x / 6 + 1/2, 0), 1)
    ABS = 7  # y = |x|
    NEG = 8  # y = -x
    EXP = 9  # y = exp(x)
    LOG = 10  # y = log(x); -inf at 0: NDARRAY only
    SQRT = 11  # y = sqrt(x)
    RECIPROCAL = 12  # y = 1 / x; inf at 0: NDARRAY only
    FLOOR = 13  # y = floor(x)
    CEIL = 14  # y = ceil(x)
    ROUND = 15  # y = x rounded to nearest, ties to even
    SIGN = 16  # y = -1, 0 or 1 (NaN stays NaN)
    ERF = 17  # y = erf(x)
    SIN = 18  # y = sin(x)
    COS = 19  # y = cos(x)
    TAN = 20  # y = tan(x)
    ASIN = 21  # y = asin(x)
    ACOS = 22  # y = acos(x)
    ATAN = 23  # y = atan(x)
    SINH = 24  # y = sinh(x)
    COSH = 25  # y = cosh(x)
    ASINH = 26  # y = asinh(x)
    ACOSH = 27  # y = acosh(x); NaN at 0: NDARRAY only
    ATANH = 28  # y = atanh(x)
    HARD_SIGMOID = 29  # y = min(max(p0 * x + p1, 0), 1)
    SOFTPLUS = 30  # y = log(1 + exp(x))
    SOFTSIGN = 31  # y = x / (1 + |x|)
    ELU = 32  # y = x if x >= 0 else p0 * (exp(x) - 1)
    SELU = 33  # y = p1 * (x if x > 0 else p0 * (exp(x) - 1))
    CELU = 34  # y = max(x, 0) + min(0, p0 * (exp(x / p0) - 1))
    GELU = 35  # y = x * Phi(x); p0 = 1: Phi by the tanh approximation
    MISH = 36  # y = x * tanh(log(1 + exp(x)))
    THRESHOLDED_RELU = 37  # y = x if x > p0 else 0 (NaN: 0, as the spec says)
    SHRINK = 38  # y = x + p0 if x < -p1 else x - p0 if x > p1 else 0 (NaN: 0)
    SWISH = 39  # y = x * sigmoid(p0 * x)


class PostOpKind(enum.IntEnum):
    ELTWISE = 0  # x = activation(x)
    SUM = 1  # x = p0 * other + x, other a tensor of the output's shape and layout
    BINARY = 2  # x = x (alg) operand
    PRELU = 3  # x = x if x >= 0 else slope * x
    SELECT = 4  # x = x if cond else other (alg 1: other if cond else x): ONNX Where


class SelectAlg(enum.IntEnum):
    """Which side of a Where the chain's running value is."""
    KEEP_WHERE_TRUE = 0  # Where(cond, x, other)
    KEEP_WHERE_FALSE = 1  # Where(cond, other, x)


class BinaryAlg(enum.IntEnum):
    ADD = 0
    MUL = 1
    MAX = 2
    MIN = 3


class Broadcast(enum.IntEnum):
    """How an operand reaches the output: one value, one per channel (a conv's C axis, a
    GEMM's or MatMul's last axis), or one per output element (same shape and layout)."""
    SCALAR = 0
    CHANNEL = 1
    ELEMENT = 2


@dataclass(frozen=True)
class PostOpEntry:
    """One post-op of a chain.  ``alg``: the PostOp code (eltwise), BinaryAlg (binary) or
    SelectAlg (select); ``operand``: the index in the fused node's inputs of the operand
    (sum, binary, prelu; select: the other value); ``condition``: a select's bool condition
    input, broadcast as ``condition_broadcast``."""
    kind: PostOpKind
    alg: int = 0
    p0: float = 0.0
    p1: float = 0.0
    operand: int | None = None
    broadcast: Broadcast = Broadcast.ELEMENT
    condition: int | None = None
    condition_broadcast: Broadcast = Broadcast.ELEMENT

    @property
    def operands(self):
        """(input index, broadcast, is a condition) of every input the entry reads."""
        out = []
        if self.operand is not None:
            out.append((self.operand, self.broadcast, False))
        if self.condition is not None:
            out.append((self.condition, self.condition_broadcast, True))
        return tuple(out)

    def describe(self, names=None):
        """A short readable form: ``relu``, ``clip(0, 6)``, ``sum(1 * r)``,
        ``add(bias, channel)`` (names: the node's inputs, to name operands)."""
        operand = None
        if self.operand is not None:
            operand = names[self.operand] if names is not None else f"input {self.operand}"
        if self.kind is PostOpKind.ELTWISE:
            name = PostOp(self.alg).name.lower()
            return name if self.p0 == 0 and self.p1 == 0 else f"{name}({self.p0:g}, {self.p1:g})"
        if self.kind is PostOpKind.SUM:
            return f"sum({self.p0:g} * {operand})"
        if self.kind is PostOpKind.SELECT:
            cond = names[self.condition] if names is not None else f"input {self.condition}"
            sides = ("x", operand) if self.alg == SelectAlg.KEEP_WHERE_TRUE else (operand, "x")
            return (f"select({cond}, {self.condition_broadcast.name.lower()}: {sides[0]}, "
                    f"{sides[1]}, {self.broadcast.name.lower()})")
        name = BinaryAlg(self.alg).name.lower() if self.kind is PostOpKind.BINARY else "prelu"
        return f"{name}({operand}, {self.broadcast.name.lower()})"


def eltwise(code, p0=0.0, p1=0.0):
    """The chain entry of activation ``code``."""
    return PostOpEntry(PostOpKind.ELTWISE, int(code), float(p0), float(p1))


def chain_args(post_ops, inputs, held=None):
    """The (kind, alg, p0, p1, address, broadcast, cond_address, cond_broadcast) entries of
    ``post_ops`` for make_*_step: operand addresses from the step's input slots (``held``:
    input index -> an array the kernel keeps instead, for a constant operand)."""
    def address(index):
        if index is None:
            return 0
        array = (held or {}).get(index)
        return array.ctypes.data if array is not None else inputs[index].address

    return [(int(e.kind), int(e.alg), float(e.p0), float(e.p1), address(e.operand),
             int(e.broadcast), address(e.condition), int(e.condition_broadcast))
            for e in post_ops]
