"""fuse_eltwise_chains and pplpy::EltwiseChain: runs of element-wise nodes as one pass.

Every positive case checks that the run became ONE EltwiseChain node and that the result
matches ``onnx.reference.ReferenceEvaluator`` on the ORIGINAL model, under every ISA tier and
on 1 and 2 threads; N16CX cases sit between two Convs and check the chain ran blocked; near
misses (an intermediate read twice or a graph output, int tensors, an operand that depends
on the chain's inside, a lone node, an activation the Conv/MatMul epilogue takes) keep their
nodes and still match.
"""

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.pplpy.eltwise_chain import ACTIVATION_ROWS, BINARY_ENTRIES
from pplpy.optimizer.passes.fuse_eltwise_chains import BINARY_OPS, UNARY_OPS

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)
THREADS = (1, 2)


class G:
    """A graph under construction: ``op`` adds a node and returns its output name, ``c`` a
    constant initializer, ``feed`` a graph input with its value."""

    def __init__(self):
        self.nodes, self.inits, self.inputs, self.feeds, self.n = [], [], [], {}, 0

    def fresh(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def op(self, op_type, *inputs, out=None, **attrs):
        out = out or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def c(self, value, dtype=np.float32):
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def feed(self, value, name=None):
        name = name or self.fresh("in")
        value = np.asarray(value)
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
        self.feeds[name] = value
        return name

    def model(self, outputs=("y",), opset=17):
        graph = helper.make_graph(self.nodes, "g", self.inputs,
                                  [helper.make_tensor_value_info(o, F, None) for o in outputs],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(model, feeds, isa="avx512", threads=1, rtol=1e-5, **kwargs):
    """The loaded runtime after checking every output against the reference."""
    rt = pplpy.load(model.SerializeToString(), num_threads=threads, max_isa=isa, **kwargs)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = rt.run(feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        scale = float(np.nanmax(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 1.0
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=rtol * max(1.0, scale))
    return rt


def ops(rt):
    return Counter(n.op_type for n in rt.graph.nodes)


def chain_nodes(rt):
    return [n for n in rt.graph.nodes if n.op_type == "EltwiseChain"]


# ---- the tables agree ----

def test_pass_unary_ops_are_the_engines_activation_rows():
    assert UNARY_OPS == set(ACTIVATION_ROWS)
    assert BINARY_OPS == set(BINARY_ENTRIES)


# ---- every activation of the table, inside a chain ----

# (op, attrs, extra inputs as constants, a prefix that keeps x in the op's domain)
def _in_unit(g, t):  # (-0.9, 0.9)
    return g.op("Mul", g.op("Tanh", t), g.c(0.9))


def _positive(g, t):  # >= 0.5
    return g.op("Add", g.op("Abs", t), g.c(0.5))


def _above_one(g, t):  # >= 1.25
    return g.op("Add", g.op("Abs", t), g.c(1.25))


UNARY_CASES = {
    "Relu": {}, "LeakyRelu": {"alpha": 0.2}, "Sigmoid": {}, "Tanh": {}, "HardSwish": {},
    "Abs": {}, "Neg": {}, "Sign": {}, "Exp": {}, "Log": {"pre": _positive},
    "Sqrt": {"pre": _positive}, "Reciprocal": {"pre": _positive}, "Floor": {}, "Ceil": {},
    "Round": {}, "Erf": {}, "Sin": {}, "Cos": {}, "Tan": {"pre": _in_unit},
    "Asin": {"pre": _in_unit}, "Acos": {"pre": _in_unit}, "Atan": {}, "Sinh": {}, "Cosh": {},
    "Asinh": {}, "Acosh": {"pre": _above_one}, "Atanh": {"pre": _in_unit},
    "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Softplus": {}, "Softsign": {},
    "Elu": {"alpha": 0.7}, "Selu": {"alpha": 1.5, "gamma": 1.1}, "Celu": {"alpha": 0.8},
    "Gelu": {"approximate": "tanh"}, "Mish": {}, "ThresholdedRelu": {"alpha": 0.3},
    "Shrink": {"bias": 0.2, "lambd": 0.4}, "Swish": {"alpha": 1.3},
}


def test_unary_cases_cover_the_table():
    assert set(UNARY_CASES) | {"Clip"} == UNARY_OPS


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type", sorted(UNARY_CASES))
def test_every_activation_in_a_chain(op_type, isa):
    attrs = dict(UNARY_CASES[op_type])
    pre = attrs.pop("pre", None)
    g = G()
    x = g.feed(rand(2, 3, 37), "x")
    t = g.op("Mul", x, g.c(1.5))
    if pre is not None:
        t = pre(g, t)
    t = g.op(op_type, t, **attrs)
    g.op("Sub", t, g.c(rand(37)), out="y")
    model = g.model(opset=24)
    for threads in THREADS:
        rt = run(model, g.feeds, isa, threads, rtol=2e-5)
        assert ops(rt) == {"EltwiseChain": 1}


@pytest.mark.parametrize("isa", ISAS)
def test_clip_bounds_in_a_chain(isa):
    """Clip-11 with constant bounds (one missing) and a NaN bound (NaN everywhere)."""
    for bounds in ([-0.5, 0.25], [-0.5], ["", 0.3], [float("nan"), 1.0]):
        g = G()
        x = g.feed(rand(4, 33), "x")
        names = [b if b == "" else g.c(b) for b in bounds]
        g.op("Neg", g.op("Clip", g.op("Add", x, g.c(0.1)), *names), out="y")
        for threads in THREADS:
            rt = run(g.model(), g.feeds, isa, threads)
            assert ops(rt) == {"EltwiseChain": 1}


# ---- binary entries: every op, both sides, every operand broadcast ----

SHAPE = (2, 3, 5, 8)
OPERANDS = {
    "scalar": lambda: np.float32(0.75),
    "one": lambda: rand(1),
    "last_axis": lambda: rand(8),
    "channel": lambda: rand(3, 1, 1),
    "batch_channel": lambda: rand(2, 3, 1, 1),
    "rows": lambda: rand(5, 8),
    "full": lambda: rand(*SHAPE),
}


def _operand(g, kind, fed):
    # Positive and away from 0: a divisor, or a base of Pow.
    value = np.abs(OPERANDS[kind]()) + np.float32(0.5)
    return g.feed(value) if fed else g.c(value)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"])
def test_binary_entries(op_type, isa):
    for kind in OPERANDS:
        for chain_left in (True, False):
            if op_type == "PRelu" and not chain_left:
                continue
            g = G()
            x = g.feed(rand(*SHAPE), "x")
            t = g.op("Add", g.op("Abs", x), g.c(0.25))  # positive: Pow's base, Div's divisor
            b = _operand(g, kind, fed=kind == "full")
            t = g.op(op_type, *((t, b) if chain_left else (b, t)))
            g.op("Tanh", t, out="y")
            for threads in THREADS:
                rt = run(g.model(), g.feeds, isa, threads, rtol=2e-5)
                assert ops(rt) == {"EltwiseChain": 1}, (kind, chain_left)


@pytest.mark.parametrize("isa", ISAS)
def test_operands_x_itself_and_the_running_value(isa):
    """Swish spelled x * Sigmoid(x) (the operand is the chain's input), t * t and Pow(t, 3)
    / Pow(t, 2) / Pow(t, 4) / Pow(t, 0.5) (products and the general pow), a fed scalar."""
    g = G()
    x = g.feed(rand(3, 50), "x")
    s = g.feed(np.asarray([1.25], np.float32), "s")
    t = g.op("Mul", g.op("Sigmoid", x), x)
    t = g.op("Mul", t, t)
    t = g.op("Pow", g.op("Pow", t, g.c(3.0)), g.c(0.5))
    t = g.op("Pow", g.op("Pow", t, g.c(2.0)), g.c(0.25))
    t = g.op("Pow", g.op("Sub", t, x), g.c(4.0))
    g.op("Div", t, s, out="y")
    for threads in THREADS:
        rt = run(g.model(), g.feeds, isa, threads, rtol=1e-4)
        assert ops(rt) == {"EltwiseChain": 1}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(1, 128, 768), (3, 7, 4099)])
def test_layer_norm_tail_and_gelu_parallel(shape, isa):
    """Big enough for the parallel step (>= 64K elements), an odd size for the tails."""
    g = G()
    x = g.feed(rand(*shape), "x")
    rows = shape[:-1] + (1,)
    mu, sd = g.feed(rand(*rows)), g.feed(np.abs(rand(*rows)) + 0.5)
    t = g.op("Add", g.op("Mul", g.op("Div", g.op("Sub", x, mu), sd), g.c(rand(shape[-1]))),
             g.c(rand(shape[-1])))
    # GELU-tanh as the exporter writes it, with recognize_gelu left out below.
    cube = g.op("Mul", g.op("Pow", t, g.c(3.0)), g.c(0.044715))
    u = g.op("Tanh", g.op("Mul", g.op("Add", t, cube), g.c(0.7978846)))
    g.op("Mul", t, g.op("Mul", g.op("Add", u, g.c(1.0)), g.c(0.5)), out="y")
    from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE
    passes = [e for e in DEFAULT_PIPELINE if e.pass_id != "recognize_gelu"]
    for threads in THREADS:
        rt = run(g.model(), g.feeds, isa, threads, rtol=1e-5, passes=passes)
        # t is read by Pow, Add and the last Mul: the LayerNorm tail is one chain, GELU
        # another with t as its input and operand.
        assert ops(rt) == {"EltwiseChain": 2}


# ---- N16CX between two Convs ----

def _conv(g, x, cin, cout):
    return g.op("Conv", x, g.c(rand(cout, cin, 3, 3) * 0.3), g.c(rand(cout)), pads=[1] * 4)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("channels", [16, 20])
def test_n16cx_chain_between_convs(channels, isa):
    """Conv -> Relu (the epilogue's) -> chain -> Conv, with a full-shape operand (another
    Conv), a fed per-channel vector, scalars and Log / Reciprocal, whose padding lanes the
    kernel writes back to 0 (20 channels: 12 padding lanes).  The chain starts with a Sub,
    which no epilogue takes (an Add there would join the Conv's post-ops)."""
    g = G()
    x = g.feed(rand(2, 4, 9, 11), "x")
    a = g.op("Relu", _conv(g, x, 4, channels))
    other = _conv(g, x, 4, channels)
    scale = g.feed(np.abs(rand(channels, 1, 1)) + 0.5)
    t = g.op("Sub", a, other)
    t = g.op("Mul", t, scale)
    t = g.op("Log", g.op("Add", g.op("Abs", t), g.c(0.5)))
    t = g.op("Reciprocal", g.op("Add", g.op("Sigmoid", t), g.c(0.1)))
    t = g.op("Sub", g.c(1.0), t)
    _ = g.op("Conv", t, g.c(rand(3, channels, 3, 3) * 0.3), g.c(rand(3)), pads=[1] * 4,
             out="y")
    for threads in THREADS:
        rt = run(g.model(), g.feeds, isa, threads, rtol=2e-5)
        (chain,) = chain_nodes(rt)
        assert len(chain.param.entries) == 9
        assert rt.graph.values[chain.outputs[0]].format is DataFormat.N16CX
        assert ops(rt)["Relu"] == 0  # still the first Conv's post-op


@pytest.mark.parametrize("isa", ISAS)
def test_n16cx_falls_back_to_ndarray_for_other_operands(isa):
    """A [N, C, 1, 1] operand cannot be read blocked: the chain runs NDARRAY, still right."""
    g = G()
    x = g.feed(rand(2, 4, 6, 6), "x")
    a = g.op("Relu", _conv(g, x, 4, 18))
    t = g.op("Tanh", g.op("Mul", g.op("Add", a, g.c(rand(2, 18, 1, 1))), g.c(0.5)))
    g.op("Conv", t, g.c(rand(2, 18, 1, 1)), out="y")
    for threads in THREADS:
        rt = run(g.model(), g.feeds, isa, threads)
        (chain,) = chain_nodes(rt)
        assert rt.graph.values[chain.outputs[0]].format is DataFormat.NDARRAY


# ---- near misses ----

def test_intermediate_read_twice_or_graph_output_is_not_fused_through():
    g = G()
    x = g.feed(rand(3, 40), "x")
    t1 = g.op("Exp", g.op("Neg", x))          # Neg -> Exp: a chain
    t2 = g.op("Tanh", t1)                     # t1 is read twice: the chain stops at it
    g.op("Add", g.op("Mul", t2, g.c(2.0)), t1, out="y")   # Tanh -> Mul -> Add(t1)
    rt = run(g.model(), g.feeds)
    assert ops(rt) == {"EltwiseChain": 2}
    first, second = chain_nodes(rt)
    assert [e.op_type for e in first.param.entries] == ["Neg", "Exp"]
    assert [e.op_type for e in second.param.entries] == ["Tanh", "Mul", "Add"]

    g = G()
    x = g.feed(rand(3, 40), "x")
    t = g.op("Sigmoid", g.op("Neg", x), out="mid")  # a graph output inside
    g.op("Abs", g.op("Exp", t), out="y")
    rt = run(g.model(outputs=("y", "mid")), g.feeds)
    assert [len(n.param.entries) for n in chain_nodes(rt)] == [2, 2]


def test_operand_depending_on_the_inside_splits_the_run():
    """y = Neg(Exp(x)) * Abs(Exp(x)): the operand Abs reads the chain's inside, so Exp's
    output has two readers; Exp stays out and Neg -> Mul (operand Abs) is the chain."""
    g = G()
    x = g.feed(rand(5, 21), "x")
    e = g.op("Exp", x)
    g.op("Mul", g.op("Neg", e), g.op("Abs", e), out="y")
    rt = run(g.model(), g.feeds)
    assert ops(rt) == {"Exp": 1, "Abs": 1, "EltwiseChain": 1}


def test_int_tensors_lone_nodes_and_growing_operands_are_not_fused():
    g = G()
    i = g.feed(RNG.integers(-5, 5, (4, 6)).astype(np.int32), "i")
    g.op("Cast", g.op("Mul", g.op("Add", i, g.c(3, np.int32)), g.c(2, np.int32)), to=F,
         out="y")
    rt = run(g.model(), g.feeds)
    assert "EltwiseChain" not in ops(rt)

    g = G()
    x = g.feed(rand(4, 6), "x")
    g.op("Tanh", x, out="y")
    assert ops(run(g.model(), g.feeds)) == {"Tanh": 1}

    g = G()  # the Add's operand [3, 4, 6] would grow the running value [4, 6]: Neg stays,
    x = g.feed(rand(4, 6), "x")  # and a chain starts at the Add with [3, 4, 6] as its input
    g.op("Relu", g.op("Add", g.op("Neg", x), g.c(rand(3, 4, 6))), out="y")
    rt = run(g.model(), g.feeds)
    assert ops(rt) == {"Neg": 1, "EltwiseChain": 1}
    assert [e.op_type for e in chain_nodes(rt)[0].param.entries] == ["Add", "Relu"]

    g = G()  # [4, 1, 6] varies along non-adjacent axes of [4, 5, 6]
    x = g.feed(rand(4, 5, 6), "x")
    g.op("Relu", g.op("Add", g.op("Neg", x), g.c(rand(4, 1, 6))), out="y")
    assert ops(run(g.model(), g.feeds)) == {"Neg": 1, "Add": 1, "Relu": 1}


def test_what_follows_a_matmul_is_left_for_its_epilogue():
    """Relu, Add of a last-axis vector, Mul by a scalar: all three become the MatMul's
    post-ops; the Sub after them (no epilogue takes it) and the Tanh are the chain."""
    g = G()
    x = g.feed(rand(8, 16), "x")
    m = g.op("MatMul", x, g.c(rand(16, 12)))
    t = g.op("Mul", g.op("Add", g.op("Relu", m), g.c(rand(12))), g.c(0.5))
    g.op("Tanh", g.op("Sub", g.c(1.0), t), out="y")
    rt = run(g.model(), g.feeds)
    assert ops(rt) == {"MatMul": 1, "EltwiseChain": 1}
    (chain,) = chain_nodes(rt)
    assert [e.op_type for e in chain.param.entries] == ["Sub", "Tanh"]
    (matmul,) = [n for n in rt.graph.nodes if n.op_type == "MatMul"]
    assert len(rt.result.ops[matmul].post_ops) == 3


def test_no_chain_without_fusion():
    g = G()
    x = g.feed(rand(4, 6), "x")
    g.op("Relu", g.op("Neg", x), out="y")
    assert ops(run(g.model(), g.feeds, fusion=False)) == {"Neg": 1, "Relu": 1}


# ---- random chains (hypothesis) ----

RANDOM_UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Softsign", "Atan", "Erf", "Sin"]
RANDOM_BINARY = ["Add", "Sub", "Mul", "Max", "Min", "Div"]
RANDOM_OPERANDS = ["scalar", "one", "last_axis", "channel", "rows", "full", "x"]


@st.composite
def chains(draw):
    length = draw(st.integers(2, 8))
    steps = []
    for _ in range(length):
        if draw(st.booleans()):
            steps.append(("unary", draw(st.sampled_from(RANDOM_UNARY))))
        else:
            steps.append(("binary", draw(st.sampled_from(RANDOM_BINARY)),
                          draw(st.sampled_from(RANDOM_OPERANDS)), draw(st.booleans()),
                          draw(st.booleans())))
    return steps


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), isa=st.sampled_from(["avx512", "fma", "sse"]),
       threads=st.sampled_from(THREADS))
def test_random_chains_match_the_reference(chain, isa, threads):
    from pplpy.common.isa import supported_isas
    if isa not in supported_isas():
        isa = supported_isas()[-1]
    g = G()
    x = g.feed(rand(*SHAPE), "x")
    t = x
    for k, step in enumerate(chain):
        out = "y" if k == len(chain) - 1 else None
        if step[0] == "unary":
            t = g.op(step[1], t, out=out)
            continue
        _, op_type, kind, chain_left, fed = step
        b = x if kind == "x" else _operand(g, kind, fed)
        if op_type == "Div":  # a divisor away from 0
            if not chain_left:
                t = g.op("Add", g.op("Abs", t), g.c(0.5))
            elif kind == "x":
                b = g.op("Add", g.op("Abs", b), g.c(0.5))
        t = g.op(op_type, *((t, b) if chain_left else (b, t)), out=out)
    rt = run(g.model(), g.feeds, isa, threads, rtol=1e-4)
    # Sigmoid(x) * x, the whole chain, is recognised as one Swish and stays that op.
    if [s[:3] for s in chain] == [("unary", "Sigmoid"), ("binary", "Mul", "x")]:
        assert ops(rt) == {"Swish": 1}
        return
    # One chain; only a divisor made from x (Abs, Add: nodes, or a chain of their own) may
    # stand outside it.
    divisor = ["Abs", "Add"]
    chains = chain_nodes(rt)
    final = [c for c in chains if "y" in c.outputs]
    assert len(final) == 1 and set(ops(rt)) <= {"EltwiseChain", "Abs", "Add"}
    assert all([e.op_type for e in c.param.entries] == divisor for c in chains
               if c is not final[0])


def test_sigmoid_times_its_input_is_one_swish():
    # The case hypothesis found: a two-step chain that is a recognised activation stays one op.
    g = G()
    x = g.feed(rand(*SHAPE), "x")
    g.op("Mul", x, g.op("Sigmoid", x), out="y")
    assert ops(run(g.model(), g.feeds)) == {"Swish": 1}


@pytest.mark.parametrize("isa", ISAS)
def test_rank_0_value(isa):
    """A chain on a rank-0 value with scalar operands (which may arrive as [1]).  The
    computed scalar comes from a Gather: after a ReduceMax the run would be that reduction's
    post-ops (fuse_post_ops) rather than a chain."""
    g = G()
    x = g.feed(np.asarray(0.7, np.float32), "x")
    s = g.op("Max", g.op("Mul", x, g.c(3.0)),
             g.op("Gather", g.feed(rand(5)), g.c(2, np.int64)))
    g.op("Sqrt", g.op("Abs", s), out="y")
    for threads in THREADS:
        rt = run(g.model(), g.feeds, isa, threads)
        assert ops(rt)["EltwiseChain"] == 1
