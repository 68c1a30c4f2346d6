"""recognize_add_layer_norm and pplpy::AddLayerNormalization: a residual Add into a
LayerNormalization over the last axis becomes one node, with the sum as a second output when
something else reads it (pre-LN transformers, GPT-2); checked against onnx.reference on the
ORIGINAL model on every ISA tier with 1 and 2 threads.  Near misses keep their nodes and
still match."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from onnx_builders import ISAS

F = TensorProto.FLOAT
_RNG = np.random.default_rng(5)


def _f(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _model(shape, b_shape=None, bias=True, sum_readers=(), axis=-1, runtime_scale=False,
           mean_output=False):
    """a + b -> LayerNormalization -> "y"; sum_readers: "add" (another Add reads the sum,
    output "z") and/or "output" (the sum is a graph output "s")."""
    n = shape[-1]
    norm_shape = shape[axis:]
    inits = [] if runtime_scale else [numpy_helper.from_array(_f(*norm_shape), "scale")]
    ln_inputs = ["s", "scale"]
    if bias:
        inits.append(numpy_helper.from_array(_f(*norm_shape), "bias"))
        ln_inputs.append("bias")
    ln_outputs = ["y"] + (["mean"] if mean_output else [])
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("LayerNormalization", ln_inputs, ln_outputs, axis=axis,
                              epsilon=1e-5)]
    outputs = ["y"] + (["mean"] if mean_output else [])
    if "add" in sum_readers:
        inits.append(numpy_helper.from_array(_f(n), "c"))
        nodes.append(helper.make_node("Add", ["s", "c"], ["z"]))
        outputs.append("z")
    if "output" in sum_readers:
        outputs.append("s")
    inputs = [helper.make_tensor_value_info("a", F, list(shape)),
              helper.make_tensor_value_info("b", F, list(b_shape or shape))]
    if runtime_scale:
        inputs.append(helper.make_tensor_value_info("scale", F, list(norm_shape)))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model):
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = _f(*dims)
    return feeds


def _check(model, isa="avx512", threads=(1, 2)):
    """Runs pplpy against the reference; returns the node types of the last runtime."""
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    for t in threads:
        rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=t)
        got = rt.run(feeds)
        for name, w in zip(names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
    return [n.op_type for n in rt.graph.nodes]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(2, 5, 16), (1, 128, 768), (3, 37), (1, 1, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_post_ln_fuses_to_one_output(shape, bias, isa):
    model = _model(shape, bias=bias)
    types = _check(model, isa)
    assert types == ["AddLayerNormalization"]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("readers", [("add",), ("output",), ("add", "output")])
def test_pre_ln_keeps_the_sum(readers, isa):
    model = _model((2, 9, 48), sum_readers=readers)
    rt = pplpy.load(model.SerializeToString(), max_isa=isa, num_threads=1)
    (node,) = [n for n in rt.graph.nodes if n.op_type == "AddLayerNormalization"]
    assert list(node.outputs) == ["y", "s"]
    assert "LayerNormalization" not in [n.op_type for n in rt.graph.nodes]
    _check(model, isa)


@pytest.mark.parametrize("miss", ["broadcast_b", "broadcast_batch", "axis_not_last",
                                  "runtime_scale", "mean_read"])
def test_near_misses_keep_their_nodes(miss):
    kwargs = {
        "broadcast_b": dict(shape=(2, 5, 16), b_shape=(16,)),
        "broadcast_batch": dict(shape=(2, 5, 16), b_shape=(1, 5, 16)),
        "axis_not_last": dict(shape=(2, 5, 16), axis=1),
        "runtime_scale": dict(shape=(2, 5, 16), runtime_scale=True),
        "mean_read": dict(shape=(2, 5, 16), mean_output=True),
    }[miss]
    types = _check(_model(**kwargs))
    assert "AddLayerNormalization" not in types
    assert "Add" in types and "LayerNormalization" in types


def test_no_fusion_build_keeps_add_and_norm():
    model = _model((2, 5, 16))
    rt = pplpy.load(model.SerializeToString(), num_threads=1, fusion=False)
    assert sorted(n.op_type for n in rt.graph.nodes) == ["Add", "LayerNormalization"]


def test_pass_log_names_the_fusion():
    model = _model((2, 5, 16), sum_readers=("add",))
    rt = pplpy.load(model.SerializeToString(), num_threads=1)
    log = {r.pass_id: r for r in rt.result.pass_log}
    assert log["recognize_add_layer_norm"].details == {
        "Add+LayerNormalization->AddLayerNormalization (sum kept)": 1}
