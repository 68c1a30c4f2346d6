"""Compress through pplpy.load against onnx.reference: along every axis (negative from opset
11) and on the flattened input, with the condition a constant or a fed input (a new value
makes a new plan), shorter than the axis, all false, longer with a false tail; several element
types, under every ISA cap and on 1 and 2 threads.  Conditions pplpy cannot use are pplpy
errors: true past the axis, not 1-D, not bool, or computed by another node at run time."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS

import pplpy

RNG = np.random.default_rng(31)
BOOL = TensorProto.BOOL
ELEMS = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64, BOOL: np.bool_,
         TensorProto.FLOAT16: np.float16, TensorProto.UINT8: np.uint8}


def compress_model(shape, elem, axis, condition=None, opset=13, cond_len=None):
    """condition: a constant (numpy) or None for a fed input of length ``cond_len``."""
    attrs = {} if axis is None else {"axis": axis}
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    inits = []
    if condition is None:
        inputs.append(helper.make_tensor_value_info("cond", BOOL, [cond_len]))
    else:
        inits.append(numpy_helper.from_array(condition, "cond"))
    node = helper.make_node("Compress", ["x", "cond"], ["y"], **attrs)
    graph = helper.make_graph([node], "compress", inputs,
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _load(model, tmp_path, isa, threads=1):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(path, max_isa=isa, num_threads=threads)


def _conditions(length):
    yield RNG.random(length) < 0.5              # as long as the axis
    yield RNG.random(max(length - 2, 0)) < 0.6  # shorter: the rest is dropped
    yield np.zeros(length, np.bool_)            # nothing kept
    yield np.concatenate([RNG.random(length) < 0.5, [False, False]])  # false past the end


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("elem", list(ELEMS))
@pytest.mark.parametrize("fed", [False, True])
def test_compress_matches_reference(elem, fed, isa, tmp_path):
    for shape in [(6,), (3, 5), (2, 4, 3), (4, 70, 300)]:
        x = RNG.integers(0, 2, shape).astype(np.bool_) if elem == BOOL else \
            (RNG.standard_normal(shape) * 10).astype(ELEMS[elem])
        for axis in [None, *range(-len(shape), len(shape))]:
            length = x.size if axis is None else shape[axis]
            for condition in _conditions(length):
                if fed:
                    model = compress_model(shape, elem, axis, cond_len=condition.size)
                    feeds = {"x": x, "cond": condition}
                else:
                    model = compress_model(shape, elem, axis, condition)
                    feeds = {"x": x}
                want = ReferenceEvaluator(model).run(None, feeds)[0]
                for threads in (1, 2):
                    got = _load(model, tmp_path, isa, threads).run(feeds)["y"]
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
def test_fed_condition_values_make_new_plans(isa, tmp_path):
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    rt = _load(compress_model([5, 4], TensorProto.FLOAT, 0, cond_len=5), tmp_path, isa)
    for condition in ([1, 0, 1, 0, 0], [0, 1, 1, 1, 1], [1, 0, 1, 0, 0]):
        condition = np.array(condition, np.bool_)
        np.testing.assert_array_equal(rt.run({"x": x, "cond": condition})["y"],
                                      np.compress(condition, x, axis=0))


@pytest.mark.parametrize("isa", ISAS)
def test_opset_9_and_11_axis_rules(isa, tmp_path):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    condition = np.array([True, False, True, True])
    for opset in (9, 11):
        model = compress_model([3, 4], TensorProto.FLOAT, 1, condition, opset=opset)
        np.testing.assert_array_equal(_load(model, tmp_path, isa).run({"x": x})["y"],
                                      np.compress(condition, x, axis=1))
    rt = _load(compress_model([3, 4], TensorProto.FLOAT, -1, condition, opset=11), tmp_path,
               isa)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.compress(condition, x, axis=1))
    with pytest.raises(pplpy.ShapeError, match="negative axis needs opset 11"):
        _load(compress_model([3, 4], TensorProto.FLOAT, -1, condition, opset=9), tmp_path, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_bad_conditions_are_pplpy_errors(isa, tmp_path):
    float_ = TensorProto.FLOAT
    with pytest.raises(pplpy.ShapeError, match="past the end of axis 0"):
        _load(compress_model([3, 4], float_, 0, np.array([0, 0, 0, 1], np.bool_)), tmp_path,
              isa)
    with pytest.raises(pplpy.ShapeError, match="past the end of the flattened input"):
        _load(compress_model([2, 2], float_, None, np.eye(5, dtype=np.bool_)[4]), tmp_path,
              isa)
    with pytest.raises(pplpy.ShapeError, match="must be 1-D"):
        _load(compress_model([3, 4], float_, 0, np.ones((3, 1), np.bool_)), tmp_path, isa)
    with pytest.raises(pplpy.ShapeError, match="out of range"):
        _load(compress_model([3, 4], float_, 2, np.ones(3, np.bool_)), tmp_path, isa)
    # A fed condition that is true past the end fails the run, and the next good run works.
    rt = _load(compress_model([3, 4], float_, 0, cond_len=4), tmp_path, isa)
    x = np.ones((3, 4), np.float32)
    with pytest.raises(pplpy.ShapeError, match="past the end"):
        rt.run({"x": x, "cond": np.array([0, 0, 0, 1], np.bool_)})
    np.testing.assert_array_equal(rt.run({"x": x, "cond": np.array([1, 0, 0, 0], np.bool_)})
                                  ["y"], x[:1])
    # Not bool.
    model = compress_model([3, 4], float_, 0, np.ones(3, np.int64))
    with pytest.raises(pplpy.PplError, match="condition"):
        _load(model, tmp_path, isa)
    # Computed by another node at run time: the Compress is planned once the condition is
    # known (a staged plan), again for each new condition; one true past the end fails the
    # run, and the next good run works.
    nodes = [helper.make_node("Greater", ["x0", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["y"], axis=0)]
    graph = helper.make_graph(
        nodes, "computed", [helper.make_tensor_value_info("x", float_, [3, 4]),
                            helper.make_tensor_value_info("x0", float_, [3])],
        [helper.make_tensor_value_info("y", float_, None)],
        [numpy_helper.from_array(np.float32(0), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rt = _load(model, tmp_path, isa)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for x0 in ([1, -1, 1], [-1, -1, -1], [1, 1, 1], [1, -1, 1]):
        x0 = np.array(x0, np.float32)
        np.testing.assert_array_equal(rt.run({"x": x, "x0": x0})["y"], x[x0 > 0])
