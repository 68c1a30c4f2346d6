"""Reshape, Flatten, Transpose, Unsqueeze, Identity, Dropout, Constant and ConstantOfShape
through the public API, against onnx's ReferenceEvaluator, under every ISA cap.

These ops only move data, so results must match the reference exactly (values, dtype and
shape).
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_builders import random_array

import pplpy

# Keeps Constant nodes and every other node as nodes, so their kernels run.
NO_FOLDING = [("dead_code_elimination", "once")]

RNG = np.random.default_rng(0)


def value_info(name, array_or_dtype, shape=None):
    if isinstance(array_or_dtype, np.ndarray):
        dtype = array_or_dtype.dtype
        shape = array_or_dtype.shape if shape is None else shape
    else:
        dtype = array_or_dtype
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(v, n) for n, v in initializers]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(tmp_path, model, feeds, isa, passes=None, in_shapes=None, want=None):
    """Run ``model`` with pplpy and the reference (or the outputs ``want``); assert identical
    outputs.  Returns the Runtime for further checks."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    rt = pplpy.load(str(path), max_isa=isa, passes=passes, in_shapes=in_shapes)
    got = rt.run(feeds)
    if want is None:
        want = ReferenceEvaluator(model).run(None, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for name, expected in zip(got, want):
        expected = np.asarray(expected)
        actual = got[name]
        assert actual.dtype == expected.dtype, name
        assert actual.shape == expected.shape, name
        np.testing.assert_array_equal(actual, expected, err_msg=name)
    return rt


def load(tmp_path, model, isa, **kwargs):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(str(path), max_isa=isa, **kwargs)


# -- Reshape -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize(
    "in_shape, target",
    [
        ((2, 3, 4), (0, -1)),
        ((2, 3, 4), (-1,)),
        ((2, 3, 4), (4, 0, 2)),
        ((2, 3, 4), (2, -1, 3, 1)),
        ((6,), (3, 2)),
        ((1,), ()),
        ((2, 3, 4), (24,)),
    ],
)
@pytest.mark.parametrize("opset", [13, 14])
def test_reshape(tmp_path, isa, dtype, in_shape, target, opset):
    x = random_array(in_shape, dtype)
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
        [("shape", np.array(target, np.int64))],
        opset=opset,
    )
    check(tmp_path, model, {"x": x}, isa)


def test_reshape_allowzero(tmp_path, isa):
    """allowzero=1: a 0 in the shape is a real zero dim, not a copy of the input's."""
    x = np.zeros((3, 0), np.float32)
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=1)],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
        [("shape", np.array([0, 3], np.int64))],
        opset=14,
    )
    rt = check(tmp_path, model, {"x": x}, isa, in_shapes={"x": (3, 0)})
    assert rt.run({"x": x})["y"].shape == (0, 3)


def test_reshape_allowzero_with_nonzero_dims(tmp_path, isa):
    x = random_array((2, 3, 4), np.int64)
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=1)],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
        [("shape", np.array([4, -1], np.int64))],
        opset=14,
    )
    check(tmp_path, model, {"x": x}, isa)


def test_reshape_zero_copies_dim_without_allowzero(tmp_path, isa):
    """The same shape [0, 3] without allowzero copies dim 0 (3): 3x3 != 0 elements."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="zero_copy")],
        [value_info("x", np.float32, (3, 0))],
        [value_info("y", np.float32, None)],
        [("shape", np.array([0, 3], np.int64))],
        opset=14,
    )
    with pytest.raises(pplpy.ShapeError, match='node "zero_copy"'):
        load(tmp_path, model, isa, in_shapes={"x": (3, 0)})


def test_reshape_dynamic_batch(tmp_path, isa):
    """Shapes are inferred again when the fed batch changes."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [value_info("x", np.float32, ("N", 3, 4))],
        [value_info("y", np.float32, None)],
        [("shape", np.array([0, -1], np.int64))],
    )
    rt = load(tmp_path, model, isa)
    for batch in (1, 5, 2):
        x = random_array((batch, 3, 4), np.float32)
        np.testing.assert_array_equal(rt.run({"x": x})["y"], x.reshape(batch, 12))


def test_reshape_incompatible_size_names_the_node(tmp_path, isa):
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")],
        [value_info("x", np.float32, (2, 3, 4))],
        [value_info("y", np.float32, None)],
        [("shape", np.array([5, -1], np.int64))],
    )
    with pytest.raises(pplpy.ShapeError) as info:
        load(tmp_path, model, isa)
    message = str(info.value)
    assert 'node "bad_reshape"' in message and "Reshape" in message and "[2, 3, 4]" in message


def test_reshape_incompatible_size_at_run_time(tmp_path, isa):
    """A fed shape that no longer fits the constant target shape fails before any kernel."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="fixed_reshape")],
        [value_info("x", np.float32, ("N", 4))],
        [value_info("y", np.float32, None)],
        [("shape", np.array([2, 4], np.int64))],
    )
    rt = load(tmp_path, model, isa)  # "N" stays free: the plan for N = 3 fails
    with pytest.raises(pplpy.ShapeError, match='node "fixed_reshape"'):
        rt.run({"x": np.zeros((3, 4), np.float32)})


def test_reshape_shape_fed_as_input_and_computed_by_a_node(tmp_path, isa):
    """A shape fed as a model input works (re-planned when its value changes); so does one
    computed by another node at run time (a staged plan: the Reshape is planned once the
    shape is known), and a computed shape that does not fit is the run's ShapeError."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="fed_shape")],
        [value_info("x", np.float32, (2, 3)), value_info("shape", np.int64, (2,))],
        [value_info("y", np.float32, None)],
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check(tmp_path, model, {"x": x, "shape": np.array([3, 2])}, isa)
    check(tmp_path, model, {"x": x, "shape": np.array([1, -1])}, isa)
    model = make_model(
        [helper.make_node("Add", ["s1", "s2"], ["shape"]),
         helper.make_node("Reshape", ["x", "shape"], ["y"], name="runtime_shape")],
        [value_info("x", np.float32, (2, 3)), value_info("s1", np.int64, (2,)),
         value_info("s2", np.int64, (2,))],
        [value_info("y", np.float32, None)],
    )
    rt = check(tmp_path, model, {"x": x, "s1": np.array([1, 1]), "s2": np.array([2, 1])}, isa)
    with pytest.raises(pplpy.ShapeError, match='"runtime_shape"'):
        rt.run({"x": x, "s1": np.array([1, 1]), "s2": np.array([3, 1])})
    got = rt.run({"x": x, "s1": np.array([0, 1]), "s2": np.array([1, 5])})["y"]
    np.testing.assert_array_equal(got, x.reshape(1, 6))


def test_reshape_shape_must_be_int64(tmp_path, isa):
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="int32_shape")],
        [value_info("x", np.float32, (2, 3))],
        [value_info("y", np.float32, None)],
        [("shape", np.array([3, 2], np.int32))],
    )
    with pytest.raises(pplpy.ShapeError, match="must be int64, got int32"):
        load(tmp_path, model, isa)


# -- Flatten -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(tmp_path, isa, dtype, axis):
    x = random_array((2, 3, 4), dtype)
    model = make_model(
        [helper.make_node("Flatten", ["x"], ["y"], axis=axis)],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
    )
    check(tmp_path, model, {"x": x}, isa)


def test_flatten_axis_out_of_range(tmp_path, isa):
    model = make_model(
        [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=4)],
        [value_info("x", np.float32, (2, 3, 4))],
        [value_info("y", np.float32, None)],
    )
    with pytest.raises(pplpy.ShapeError, match='node "flat"'):
        load(tmp_path, model, isa)


# -- Transpose -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.uint8])
@pytest.mark.parametrize("perm", [None, (0, 2, 1, 3), (3, 1, 0, 2), (0, 1, 2, 3)])
def test_transpose(tmp_path, isa, dtype, perm):
    x = random_array((2, 3, 4, 5), dtype)
    attrs = {} if perm is None else {"perm": list(perm)}
    model = make_model(
        [helper.make_node("Transpose", ["x"], ["y"], **attrs)],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
    )
    check(tmp_path, model, {"x": x}, isa)


def test_transpose_bad_perm(tmp_path, isa):
    model = make_model(
        [helper.make_node("Transpose", ["x"], ["y"], name="bad_perm", perm=[0, 0, 1])],
        [value_info("x", np.float32, (2, 3, 4))],
        [value_info("y", np.float32, None)],
    )
    with pytest.raises(pplpy.ShapeError, match='node "bad_perm"'):
        load(tmp_path, model, isa)


# -- Unsqueeze -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("axes", [(0,), (-1,), (0, -1), (1, 3), (-4, 2)])
@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze(tmp_path, isa, dtype, axes, opset):
    """Opset 11: axes attribute; opset 13: axes input.  Axes count in the output's rank.

    The reference's Unsqueeze-1/11 inserts the axes one after another, which misplaces a
    negative axis (-4 on a 2-D input fails there), so opset 11 compares with numpy."""
    x = random_array((3, 4), dtype)
    if opset < 13:
        node = helper.make_node("Unsqueeze", ["x"], ["y"], axes=list(axes))
        initializers = []
    else:
        node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"])
        initializers = [("axes", np.array(axes, np.int64))]
    model = make_model(
        [node], [value_info("x", x)], [value_info("y", x.dtype, None)], initializers, opset=opset
    )
    want = [np.expand_dims(x, axes)] if opset < 13 else None
    check(tmp_path, model, {"x": x}, isa, want=want)


def test_unsqueeze_axes_fed_as_input_and_computed_by_a_node(tmp_path, isa):
    model = make_model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="fed_axes")],
        [value_info("x", np.float32, (2, 3)), value_info("axes", np.int64, (1,))],
        [value_info("y", np.float32, None)],
        opset=13,
    )
    x = np.ones((2, 3), np.float32)
    check(tmp_path, model, {"x": x, "axes": np.array([1])}, isa)
    model = make_model(
        [helper.make_node("Add", ["a1", "a2"], ["axes"]),
         helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="runtime_axes")],
        [value_info("x", np.float32, (2, 3)), value_info("a1", np.int64, (1,)),
         value_info("a2", np.int64, (1,))],
        [value_info("y", np.float32, None)],
        opset=13,
    )
    check(tmp_path, model, {"x": x, "a1": np.array([0]), "a2": np.array([1])}, isa)
    check(tmp_path, model, {"x": x, "a1": np.array([-1]), "a2": np.array([-2])}, isa)


@pytest.mark.parametrize("op_type, axis", [("Unsqueeze", -1), ("Unsqueeze", 0),
                                           ("Squeeze", 1), ("Squeeze", -2)])
def test_squeeze_unsqueeze_take_a_scalar_axes(tmp_path, isa, op_type, axis):
    """A rank-0 axes is one axis (ONNX Runtime's reading; ONNX's AffineGrid function passes
    one to Unsqueeze).  onnx.reference takes it for Unsqueeze only: numpy is Squeeze's."""
    model = make_model(
        [helper.make_node(op_type, ["x", "axes"], ["y"])],
        [value_info("x", np.float32, (2, 1, 3))],
        [value_info("y", np.float32, None)],
        [("axes", np.array(axis, np.int64))],
        opset=13,
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    want = [np.squeeze(x, axis)] if op_type == "Squeeze" else None
    check(tmp_path, model, {"x": x}, isa, want=want)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_shape_and_size_read_dims_of_any_type(tmp_path, isa, dtype):
    """Shape and Size read only dims: a float16 / float64 input is no math pplpy refuses."""
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"])],
        [value_info("x", dtype, ("N", 3))],
        [value_info("s", np.int64, None), value_info("n", np.int64, None)],
    )
    check(tmp_path, model, {"x": np.zeros((5, 3), dtype)}, isa)


def test_unsqueeze_duplicate_axes(tmp_path, isa):
    model = make_model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="dup_axes")],
        [value_info("x", np.float32, (2, 3))],
        [value_info("y", np.float32, None)],
        [("axes", np.array([1, -3], np.int64))],
        opset=13,
    )
    with pytest.raises(pplpy.ShapeError, match='node "dup_axes"'):
        load(tmp_path, model, isa)


# -- Identity ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_identity(tmp_path, isa, dtype):
    """Input straight to output: the remove_identity pass cannot bypass it, so it runs."""
    x = random_array((2, 3, 5), dtype)
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
    )
    rt = check(tmp_path, model, {"x": x}, isa)
    assert any(node.op_type == "Identity" for node in rt.graph.nodes)


def test_identity_chain_without_passes(tmp_path, isa):
    x = random_array((4, 3), np.int64)
    model = make_model(
        [
            helper.make_node("Identity", ["x"], ["t"]),
            helper.make_node("Transpose", ["t"], ["u"]),
            helper.make_node("Identity", ["u"], ["y"]),
        ],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
    )
    check(tmp_path, model, {"x": x}, isa, passes=NO_FOLDING)


# -- Dropout -------------------------------------------------------------------------------


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout(tmp_path, isa, with_mask, dtype):
    x = random_array((2, 3, 4), dtype)
    outputs = ["y", "mask"] if with_mask else ["y"]
    out_infos = [value_info("y", x.dtype, None)]
    if with_mask:
        out_infos.append(value_info("mask", np.bool_, None))
    model = make_model(
        [helper.make_node("Dropout", ["x"], outputs)], [value_info("x", x)], out_infos, opset=13
    )
    check(tmp_path, model, {"x": x}, isa)


@pytest.mark.parametrize("with_mask", [False, True])
def test_dropout_training_mode_false(tmp_path, isa, with_mask):
    x = random_array((3, 5), np.float32)
    outputs = ["y", "mask"] if with_mask else ["y"]
    out_infos = [value_info("y", x.dtype, None)]
    if with_mask:
        out_infos.append(value_info("mask", np.bool_, None))
    model = make_model(
        [helper.make_node("Dropout", ["x", "ratio", "training_mode"], outputs)],
        [value_info("x", x)],
        out_infos,
        [("ratio", np.array(0.3, np.float32)), ("training_mode", np.array(False))],
        opset=13,
    )
    check(tmp_path, model, {"x": x}, isa)


def test_dropout_mask_consumed_and_not_folded(tmp_path, isa):
    """The Dropout node stays (its mask is read) and runs on an intermediate tensor."""
    x = random_array((2, 4), np.float32)
    model = make_model(
        [
            helper.make_node("Transpose", ["x"], ["t"]),
            helper.make_node("Dropout", ["t"], ["d", "mask"]),
            helper.make_node("Flatten", ["mask"], ["y"], axis=0),
            helper.make_node("Identity", ["d"], ["z"]),
        ],
        [value_info("x", x)],
        [value_info("y", np.bool_, None), value_info("z", x.dtype, None)],
        opset=12,
    )
    check(tmp_path, model, {"x": x}, isa, passes=NO_FOLDING)


def test_dropout_opset10_mask_is_bool(tmp_path, isa):
    x = random_array((2, 3), np.float32)
    model = make_model(
        [helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.25)],
        [value_info("x", x)],
        [value_info("y", x.dtype, None), value_info("mask", np.bool_, None)],
        opset=10,
    )
    check(tmp_path, model, {"x": x}, isa)


def test_dropout_opset7_mask_has_the_input_type(tmp_path, isa):
    """Before opset 10 ONNX types the mask like the input; nothing is dropped: all ones."""
    x = random_array((2, 3), np.float32)
    model = make_model(
        [helper.make_node("Dropout", ["x"], ["y", "mask"])],
        [value_info("x", x)],
        [value_info("y", x.dtype, None), value_info("mask", x.dtype, None)],
        opset=7,
    )
    got = load(tmp_path, model, isa).run({"x": x})
    np.testing.assert_array_equal(got["y"], x)
    assert got["mask"].dtype == np.float32
    np.testing.assert_array_equal(got["mask"], np.ones_like(x))


@pytest.mark.parametrize("training", ["constant_true", "runtime"])
def test_dropout_training_mode_is_unsupported(tmp_path, isa, training):
    inputs = [value_info("x", np.float32, (2, 3))]
    initializers = [("ratio", np.array(0.5, np.float32))]
    if training == "constant_true":
        initializers.append(("training_mode", np.array(True)))
    else:
        inputs.append(value_info("training_mode", np.bool_, ()))
    model = make_model(
        [helper.make_node("Dropout", ["x", "ratio", "training_mode"], ["y"], name="train")],
        inputs,
        [value_info("y", np.float32, None)],
        initializers,
        opset=13,
    )
    with pytest.raises(pplpy.UnsupportedOpError, match="training_mode"):
        load(tmp_path, model, isa)


# -- Constant ------------------------------------------------------------------------------


CONSTANT_ATTRIBUTES = {
    "value_float32": {"value": numpy_helper.from_array(
        np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "v")},
    "value_int64": {"value": numpy_helper.from_array(np.array([[-3, 7]], np.int64), "v")},
    "value_bool": {"value": numpy_helper.from_array(np.array([True, False]), "v")},
    "value_float": {"value_float": 1.25},
    "value_floats": {"value_floats": [1.5, -2.0, 3.25]},
    "value_int": {"value_int": -42},
    "value_ints": {"value_ints": [1, 2, -3, 4]},
}


@pytest.mark.parametrize("pipeline", [None, NO_FOLDING], ids=["default", "no_folding"])
@pytest.mark.parametrize("attribute", sorted(CONSTANT_ATTRIBUTES))
def test_constant(tmp_path, isa, attribute, pipeline):
    """With the default pipeline the Constant becomes a graph constant; without folding its
    kernel runs."""
    attrs = CONSTANT_ATTRIBUTES[attribute]
    expected = ReferenceEvaluator(
        make_model([helper.make_node("Constant", [], ["c"], **attrs)], [],
                   [helper.make_tensor_value_info("c", TensorProto.UNDEFINED, None)])
    ).run(None, {})[0]
    model = make_model(
        [helper.make_node("Constant", [], ["c"], **attrs)], [], [value_info("c", expected.dtype)]
    )
    rt = check(tmp_path, model, {}, isa, passes=pipeline)
    if pipeline is NO_FOLDING:
        assert [node.op_type for node in rt.graph.nodes] == ["Constant"]


def test_constant_feeds_reshape(tmp_path, isa):
    """A Constant node's value is the constant shape Reshape needs."""
    x = random_array((2, 6), np.float32)
    model = make_model(
        [
            helper.make_node("Constant", [], ["shape"], value_ints=[3, -1]),
            helper.make_node("Reshape", ["x", "shape"], ["y"]),
        ],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
    )
    check(tmp_path, model, {"x": x}, isa)


# -- ConstantOfShape -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, np.array([7], np.int64), np.array([2.5], np.float32), np.array([True]),
     np.array([-1], np.int32)],
    ids=["default", "int64", "float32", "bool", "int32"],
)
@pytest.mark.parametrize("shape", [(2, 3), (4,), (), (2, 0, 3)])
def test_constant_of_shape(tmp_path, isa, value, shape):
    """The output is a graph output, so the node is not folded: its kernel runs."""
    attrs = {} if value is None else {"value": numpy_helper.from_array(value, "value")}
    dtype = np.float32 if value is None else value.dtype
    model = make_model(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], **attrs)],
        [],
        [value_info("y", dtype, None)],
        [("shape", np.array(shape, np.int64))],
    )
    rt = check(tmp_path, model, {}, isa)
    assert [node.op_type for node in rt.graph.nodes] == ["ConstantOfShape"]


def test_constant_of_shape_folded_into_a_consumer(tmp_path, isa):
    """Folding evaluates ConstantOfShape with pplpy's kernel; Concat reads the result."""
    x = random_array((2, 3), np.int64)
    model = make_model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["c"],
                             value=numpy_helper.from_array(np.array([5], np.int64), "value")),
            helper.make_node("Concat", ["x", "c"], ["y"], axis=1),
        ],
        [value_info("x", x)],
        [value_info("y", x.dtype, None)],
        [("shape", np.array([2, 4], np.int64))],
    )
    check(tmp_path, model, {"x": x}, isa)


def test_constant_of_shape_fed_as_input_and_computed_by_a_node(tmp_path, isa):
    model = make_model(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fed_cos")],
        [value_info("shape", np.int64, (2,))],
        [value_info("y", np.float32, None)],
    )
    check(tmp_path, model, {"shape": np.array([2, 5])}, isa)
    model = make_model(
        [helper.make_node("Add", ["s1", "s2"], ["shape"]),
         helper.make_node("ConstantOfShape", ["shape"], ["y"], name="runtime_cos")],
        [value_info("s1", np.int64, (2,)), value_info("s2", np.int64, (2,))],
        [value_info("y", np.float32, None)],
    )
    check(tmp_path, model, {"s1": np.array([1, 1]), "s2": np.array([2, 1])}, isa)
    check(tmp_path, model, {"s1": np.array([0, 1]), "s2": np.array([0, 4])}, isa)
