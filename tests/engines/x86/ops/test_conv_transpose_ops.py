"""ConvTranspose through pplpy.load: compiled steps, right against onnx.reference, in NDARRAY
and (2-D, after a Conv) N16CX, under every ISA tier, and the same bytes with 1 and 2 threads.

An identity 1x1 Conv in front puts the op in N16CX; C = 20 is not a multiple of 16 (padding
lanes matter) and allows groups of 2 and 4.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(21)
C = 20

# name -> (x spatial, W shape (C, M/group, *K), attributes, bias?, weight constant?, opset)
CASES = {
    "basic": ((5, 6), (C, 7, 3, 3), {}, True, True, 17),
    "strides_pads": ((5, 6), (C, 9, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1]), True,
                     True, 17),
    "output_padding": ((5, 6), (C, 5, 3, 3), dict(strides=[3, 2], output_padding=[1, 1]),
                       True, True, 11),
    "output_shape": ((4, 4), (C, 5, 3, 3), dict(strides=[3, 2], output_shape=[12, 9]), False,
                     True, 17),
    # output_shape past the full size (13 and 14 of 13): output padding at the end
    "output_shape_past_full": ((5, 5), (C, 5, 1, 1), dict(strides=[3, 3],
                                                          output_shape=[15, 14]), True, True,
                               17),
    "same_upper": ((5, 6), (C, 6, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER"), True,
                   True, 17),
    "same_lower": ((5, 6), (C, 6, 4, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER"), True,
                   True, 17),
    "dilations": ((5, 6), (C, 6, 3, 2), dict(dilations=[2, 3], strides=[1, 2]), True, True,
                  17),
    "group2": ((5, 6), (C, 3, 3, 3), dict(group=2, strides=[2, 2]), True, True, 17),
    "group4_16": ((5, 6), (C, 8, 2, 2), dict(group=4, strides=[2, 2]), True, True, 17),
    "depthwise": ((5, 6), (C, 1, 4, 4), dict(group=C, strides=[2, 2], pads=[1, 1, 1, 1]),
                  True, True, 17),
    "wide_out": ((5, 6), (C, 40, 2, 2), dict(strides=[2, 2]), True, True, 17),
    "runtime_weight": ((5, 6), (C, 7, 3, 3), dict(strides=[2, 1]), True, False, 17),
    "opset1": ((5, 6), (C, 7, 3, 3), dict(strides=[2, 2], kernel_shape=[3, 3]), True, True, 1),
    "1d": ((11,), (C, 6, 4), dict(strides=[3], pads=[1, 2]), True, True, 17),
    "3d": ((3, 4, 5), (C, 4, 2, 3, 3), dict(strides=[2, 1, 2], pads=[0, 1, 1, 0, 0, 1]), True,
           True, 17),
}


def build(name, blocked, batch=2, spatial=None):
    sp, w_shape, attrs, with_bias, constant_w, opset = CASES[name]
    sp = spatial or sp
    x_shape = (batch, C) + sp
    w = RNG.standard_normal(w_shape).astype(np.float32)
    out_c = w_shape[1] * attrs.get("group", 1)
    b = RNG.standard_normal(out_c).astype(np.float32)
    inits, fed = {}, {}
    (inits if constant_w else fed)["w"] = w
    inputs = ["t", "w"]
    if with_bias:
        (inits if constant_w else fed)["b"] = b
        inputs.append("b")
    if blocked:
        inits["eye"] = np.eye(C, dtype=np.float32).reshape(C, C, 1, 1)
        front = helper.make_node("Conv", ["x", "eye"], ["t"])
    else:
        front = helper.make_node("Identity", ["x"], ["t"])
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [front, helper.make_node("ConvTranspose", inputs, ["y"], **attrs)], name,
        [vi("x", TensorProto.FLOAT, list(x_shape))]
        + [vi(k, TensorProto.FLOAT, list(v.shape)) for k, v in fed.items()],
        [vi("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32), **fed}
    return model, feeds


def reference(name, model, feeds):
    """onnx.reference's answer; with groups, group by group (its grouped path mis-reshapes
    W in onnx 1.23), concatenated along the channels."""
    attrs = dict(CASES[name][2])
    group = attrs.pop("group", 1)
    if group == 1:
        return ReferenceEvaluator(model).run(None, feeds)[0]
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values.update(feeds)
    x, w, b = values["x"], values["w"], values.get("b")
    icg, ocg = C // group, w.shape[1]
    outs = []
    for g in range(group):
        inputs = ["x", "w"] + (["b"] if b is not None else [])
        graph = helper.make_graph(
            [helper.make_node("ConvTranspose", inputs, ["y"], **attrs)], "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        one = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        part = {"x": x[:, g * icg:(g + 1) * icg], "w": w[g * icg:(g + 1) * icg]}
        if b is not None:
            part["b"] = b[g * ocg:(g + 1) * ocg]
        outs.append(ReferenceEvaluator(one).run(None, part)[0])
    return np.concatenate(outs, axis=1)


def run(model, tmp_path, isa, num_threads, feeds):
    path = tmp_path / f"model_{num_threads}.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=num_threads, max_isa=isa, fusion=False)
    outputs = rt.run(feeds)
    (plan,) = rt._plans.plans()
    return rt, outputs, plan.plan.steps


PARAMS = [(name, blocked) for name, case in CASES.items()
          for blocked in ((False, True) if len(case[0]) == 2 else (False,))]
IDS = [f"{n}-{'n16cx' if b else 'ndarray'}" for n, b in PARAMS]


@pytest.mark.parametrize("name,blocked", PARAMS, ids=IDS)
def test_conv_transpose_is_compiled_and_right(name, blocked, isa, tmp_path):
    model, feeds = build(name, blocked)
    rt, got, steps = run(model, tmp_path, isa, 2, feeds)
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == "ConvTranspose"]
    op_steps = [s for s in steps if s.label == op_node.name]
    assert op_steps and not [s for s in op_steps if isinstance(s, PythonStep)]
    assert len(op_steps) == (1 if CASES[name][4] else 2)  # a run-time W is packed first
    want_format = DataFormat.N16CX if blocked else DataFormat.NDARRAY
    assert rt.formats[op_node.outputs[0]] is want_format
    want = reference(name, model, feeds)
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,blocked", [("strides_pads", False), ("strides_pads", True),
                                          ("group2", True), ("runtime_weight", False)])
def test_one_and_two_threads_give_the_same_bytes(name, blocked, isa, tmp_path):
    model, feeds = build(name, blocked, spatial=(24, 24))
    _, one, _ = run(model, tmp_path, isa, 1, feeds)
    rt, two, steps = run(model, tmp_path, isa, 2, feeds)
    (op_node,) = [n for n in rt.graph.nodes if n.op_type == "ConvTranspose"]
    assert [s for s in steps if s.label == op_node.name][-1].parallel
    assert one["y"].tobytes() == two["y"].tobytes()
    want = reference(name, model, feeds)
    np.testing.assert_allclose(one["y"], want, rtol=1e-4, atol=1e-4)


def test_output_shape_overrides_pads(tmp_path):
    """The spec: with output_shape, pads are derived from it (onnx.reference keeps the
    given pads instead); the result equals the same op with those pads written out."""
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    outs = []
    for attrs in (dict(strides=[2, 2], output_shape=[7, 8], pads=[5, 5, 5, 5]),
                  # ONNX Runtime also reads an output_shape that starts with N and C
                  dict(strides=[2, 2], output_shape=[1, 3, 7, 8]),
                  # total padding 9 - 7 = 2 and 9 - 8 = 1: begins 1 and 1, ends 1 and 0
                  dict(strides=[2, 2], pads=[1, 1, 1, 0])):
        graph = helper.make_graph(
            [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w")])
        path = tmp_path / "m.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        outs.append(pplpy.load(path, num_threads=1).run({"x": x})["y"])
    assert outs[0].shape == (1, 3, 7, 8)
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_array_equal(outs[1], outs[2])


def test_constant_weight_and_bias_are_packed(tmp_path):
    model, _ = build("basic", True)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, num_threads=1, fusion=False)
    (kernel,) = [k for k in rt.result.kernels.values()
                 if type(k).__name__ == "ConvTransposeKernel"]
    assert kernel.packed_inputs == (1, 2)


@pytest.mark.parametrize("attrs,match", [
    (dict(kernel_shape=[2, 2]), "kernel_shape"),
    (dict(group=3), "channels"),
    (dict(strides=[2]), "strides"),
])
def test_bad_attributes_raise(attrs, match, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros((C, 2, 3, 3), np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(pplpy.PplError, match=match):
        pplpy.load(path)
