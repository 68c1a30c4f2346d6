"""RNN, GRU and LSTM through pplpy.load, under every ISA tier, at 1 and 2 threads: against
onnx.reference where it implements the case (default activations, no clip, no
sequence_lens, no input_forget) and against the numpy oracle of the spec (tests/rnn_oracle.py)
for the rest; the oracle itself is checked against ONNX Runtime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS, ort_session
from rnn_oracle import GATES, rnn_oracle

import pplpy
from pplpy.errors import PplError, UnsupportedOpError

RNG = np.random.default_rng(41)
FLOAT = TensorProto.FLOAT
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def make_case(op, seq, batch, size, hidden, direction="forward", layout=0, bias=True,
              lens=False, initial=True, peep=False):
    """Input name -> array of one random case (absent optional inputs left out)."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = randn(batch, seq, size) if layout else randn(seq, batch, size)
    arrays = {"X": x, "W": randn(dirs, g * hidden, size, scale=0.5),
              "R": randn(dirs, g * hidden, hidden, scale=0.5)}
    if bias:
        arrays["B"] = randn(dirs, 2 * g * hidden, scale=0.5)
    if lens:
        arrays["sequence_lens"] = RNG.integers(1, seq + 1, batch).astype(np.int32)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if initial:
        arrays["initial_h"] = randn(*state)
        if op == "LSTM":
            arrays["initial_c"] = randn(*state)
    if peep:
        arrays["P"] = randn(dirs, 3 * hidden)
    return arrays


def model_of(op, arrays, fed=("X",), opset=14, outputs=None, **attrs):
    """One-node model: inputs named in ``fed`` are graph inputs, the others initializers."""
    n_out = 3 if op == "LSTM" else 2
    outputs = list(outputs or ["Y", "Y_h", "Y_c"][:n_out])
    last = max(i for i, n in enumerate(INPUTS) if n in arrays)
    names = [n if n in arrays else "" for n in INPUTS[:last + 1]]
    node = helper.make_node(op, names, outputs, **attrs)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "g",
        [vi(n, TensorProto.INT32 if n == "sequence_lens" else FLOAT, arrays[n].shape)
         for n in fed if n in arrays],
        [vi(o, FLOAT, None) for o in outputs if o],
        [numpy_helper.from_array(arrays[n], n) for n in arrays if n not in fed])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, feeds, isa, tmp_path, num_threads):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=num_threads)
    got = rt.run(feeds)
    return [got[o.name] for o in model.graph.output]


def check(model, feeds, isa, tmp_path, want):
    for num_threads in (1, 2):
        got = run(model, feeds, isa, tmp_path, num_threads)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == np.asarray(w).shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def oracle(op, arrays, attrs, outputs=None):
    args = [arrays.get(n) for n in INPUTS[3:]]
    if op != "LSTM":
        args = args[:3]
    want = rnn_oracle(op, arrays["X"], arrays["W"], arrays["R"], *args, **attrs)
    if outputs is not None:
        want = [w for w, o in zip(want, outputs) if o]
    return want


SHAPES = [(1, 1, 3, 4), (3, 2, 5, 6), (7, 3, 4, 5)]   # (seq, batch, input, hidden)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_against_reference(op, shape, direction, layout, isa, tmp_path):
    seq, batch, size, hidden = shape
    arrays = make_case(op, seq, batch, size, hidden, direction, layout,
                       peep=op == "LSTM", initial=seq != 1)
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "GRU" and seq == 3:
        attrs["linear_before_reset"] = 1
    model = model_of(op, arrays, **attrs)
    feeds = {"X": arrays["X"]}
    want = ReferenceEvaluator(model).run(None, feeds)
    check(model, feeds, isa, tmp_path, want)
    np.testing.assert_allclose(want[0], oracle(op, arrays, attrs)[0], rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens_and_fed_weights(op, direction, layout, isa, tmp_path):
    """sequence_lens (Y 0 past each end), every input fed at run time (W packed by the GEMM
    step, R^T by the pack step), in both layouts."""
    arrays = make_case(op, 6, 3, 4, 5, direction, layout, lens=True, peep=op == "LSTM")
    attrs = {"hidden_size": 5, "direction": direction, "layout": layout}
    model = model_of(op, arrays, fed=tuple(arrays), **attrs)
    check(model, arrays, isa, tmp_path, oracle(op, arrays, attrs))


# (op, attributes) for what onnx.reference ignores.
ATTRIBUTE_CASES = [
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    ("RNN", {"activations": ["Affine"], "activation_alpha": [0.6], "activation_beta": [0.1]}),
    ("RNN", {"activations": ["Affine"]}),                      # spec defaults 1, 0
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.3]}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [1.5],
             "activation_beta": [0.5]}),
    ("RNN", {"activations": ["Elu", "Softsign"], "direction": "bidirectional"}),
    ("RNN", {"activations": ["Softplus"], "clip": 0.5}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3],
             "activation_beta": [0.6]}),
    ("GRU", {"clip": 0.4, "linear_before_reset": 1}),
    ("GRU", {"activations": ["Sigmoid", "Relu", "HardSigmoid", "Elu"],
             "activation_alpha": [0.25, 0.5], "direction": "bidirectional"}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"clip": 0.3}),
    ("LSTM", {"activations": ["HardSigmoid", "LeakyRelu", "Affine"],
              "activation_alpha": [0.3, 0.2, 0.5], "activation_beta": [0.4, 0.1]}),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Elu", "ScaledTanh"],
              "activation_alpha": [0.3, 0.2, 0.5], "activation_beta": [0.4, 0.1],
              "direction": "bidirectional", "input_forget": 1}),
    ("LSTM", {"activations": ["sigmoid", "tanh", "softsign", "Sigmoid", "Relu", "Tanh"],
              "direction": "bidirectional"}),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", ATTRIBUTE_CASES, ids=str)
def test_attributes(case, isa, tmp_path):
    op, extra = case
    direction = extra.get("direction", "forward")
    arrays = make_case(op, 5, 3, 4, 6, direction, lens=True, peep=op == "LSTM")
    attrs = {"hidden_size": 6, **extra}
    model = model_of(op, arrays, fed=("X", "sequence_lens"), **attrs)
    feeds = {"X": arrays["X"], "sequence_lens": arrays["sequence_lens"]}
    check(model, feeds, isa, tmp_path, oracle(op, arrays, attrs))


@pytest.mark.parametrize("case", [c for c in ATTRIBUTE_CASES
                                  if "Affine" not in str(c) or "activation_beta" in c[1]],
                         ids=str)
def test_oracle_agrees_with_onnxruntime(case):
    """Where the spec leaves room (alpha/beta order, clip, lengths), the oracle reads it as
    ONNX Runtime does (Affine without alpha/beta is left out: there ORT takes 0, not 1)."""
    op, extra = case
    direction = extra.get("direction", "forward")
    arrays = make_case(op, 5, 3, 4, 6, direction, lens=True, peep=op == "LSTM")
    attrs = {"hidden_size": 6, **extra}
    model = model_of(op, arrays, fed=tuple(arrays), **attrs)
    got = ort_session(model).run(None, arrays)  # onnxruntime: in the test extra, never skipped
    for g, w in zip(got, oracle(op, arrays, attrs)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


# Only LSTM has the third output, Y_c.
OPTIONAL_OUTPUT_CASES = [
    pytest.param(op, outputs, id=f"{op}-{outputs}")
    for op in ("RNN", "GRU", "LSTM")
    for outputs in (["", "Y_h"], ["Y"], ["", "", "Y_c"], ["Y", "", "Y_c"])
    if op == "LSTM" or len(outputs) <= 2]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op, outputs", OPTIONAL_OUTPUT_CASES)
def test_optional_outputs_and_inputs(op, outputs, isa, tmp_path):
    """Outputs left empty, B / initial_h absent, zero-length sequences, opset 7."""
    arrays = make_case(op, 4, 3, 3, 5, "bidirectional", bias=False, initial=False, lens=True)
    arrays["sequence_lens"][1] = 0
    attrs = {"hidden_size": 5, "direction": "bidirectional"}
    model = model_of(op, arrays, fed=("X", "sequence_lens"), outputs=outputs, opset=7,
                     **attrs)
    feeds = {"X": arrays["X"], "sequence_lens": arrays["sequence_lens"]}
    check(model, feeds, isa, tmp_path, oracle(op, arrays, attrs, outputs))


def test_larger_shapes_run_in_parallel(tmp_path):
    """Many batch rows and a wide hidden state: the recurrence step is parallel and every
    thread count gives the same bits."""
    arrays = make_case("LSTM", 9, 16, 40, 64, "bidirectional", lens=True, peep=True)
    attrs = {"hidden_size": 64, "direction": "bidirectional"}
    model = model_of("LSTM", arrays, fed=("X", "sequence_lens"), **attrs)
    feeds = {"X": arrays["X"], "sequence_lens": arrays["sequence_lens"]}
    want = oracle("LSTM", arrays, attrs)
    one = run(model, feeds, None, tmp_path, 1)
    two = run(model, feeds, None, tmp_path, 2)
    for a, b, w in zip(one, two, want):
        assert np.array_equal(a, b)
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=5e-6)


@pytest.mark.parametrize("attrs,match", [
    ({"activations": ["Gelu"]}, "activation 'Gelu'"),
    ({"activations": ["Tanh", "Tanh"]}, "2 activations"),
    ({"activations": ["Tanh"], "direction": "bidirectional"}, "1 activations"),
    ({"direction": "sideways"}, "direction"),
    ({"layout": 2}, "layout"),
    ({"clip": -1.0}, "clip"),
])
def test_unsupported_attributes_raise_at_load(attrs, match, tmp_path):
    arrays = make_case("RNN", 2, 1, 3, 4)
    model = model_of("RNN", arrays, hidden_size=4, **attrs)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedOpError, match=match):
        pplpy.load(path)


def test_float64_and_layout_before_14_raise(tmp_path):
    arrays = make_case("GRU", 2, 1, 3, 4)
    model = model_of("GRU", arrays, opset=13, hidden_size=4, layout=1)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(PplError, match="layout"):
        pplpy.load(path)
    arrays = {k: v.astype(np.float64) for k, v in arrays.items()}
    model = model_of("GRU", arrays, hidden_size=4)
    for t in list(model.graph.input) + list(model.graph.output):
        t.type.tensor_type.elem_type = TensorProto.DOUBLE
    onnx.save(model, path)
    with pytest.raises(UnsupportedOpError, match="float32"):
        pplpy.load(path)


def test_wrong_shapes_name_the_input(tmp_path):
    arrays = make_case("LSTM", 2, 2, 3, 4)
    arrays["R"] = randn(1, 16, 5)
    model = model_of("LSTM", arrays, hidden_size=4)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(PplError, match="R must have shape"):
        pplpy.load(path)
