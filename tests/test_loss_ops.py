"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss through pplpy.load against
onnx.reference on random inputs: every reduction, with and without weights (fed and
constant), ignore_index absent, a class, negative, and on every sample; scores of rank 2 to 4
with free dims, int32 and int64 targets, SCE's log_prob output, sizes that run the parallel
path, under every ISA cap and on 1 and 2 threads.  Bad inputs are pplpy errors: targets out of
range (at load when constant, at run time when fed, leaving the runtime usable), mismatched
shapes, an unknown reduction, float64 scores.

onnx's reference NegativeLogLikelihoodLoss divides a "mean" without weights and with
ignore_index = -1 by every sample, ignored ones included (it tests ``ignore_index != -1``
where it means ``is not None``); the spec, onnxruntime and the expanded function divide by the
samples not ignored, so that one combination is checked against onnxruntime.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import ISAS, ort_session

import pplpy

RNG = np.random.default_rng(41)
FLOAT, INT32, INT64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
OPS = {"NegativeLogLikelihoodLoss": 22, "SoftmaxCrossEntropyLoss": 13}
# (scores shape, free dims of the model's declaration)
SHAPES = [((5, 4), ("N", 4)), ((3, 6, 7), ("N", 6, "d1")), ((2, 3, 4, 5), ("N", 3, 4, "d2"))]


def loss_model(op, scores_dims, reduction, ignore_index=None, weight=None, target=None,
               log_prob=False, target_type=INT64, opset=None):
    """weight/target: None (absent / fed), "fed" (weight), or a numpy constant."""
    c = scores_dims[1]
    inputs = [helper.make_tensor_value_info("x", FLOAT, list(scores_dims))]
    inits, names = [], ["x", "t"]
    if target is None:
        inputs.append(helper.make_tensor_value_info(
            "t", target_type, [scores_dims[0], *scores_dims[2:]]))
    else:
        inits.append(numpy_helper.from_array(target, "t"))
    if isinstance(weight, str):
        inputs.append(helper.make_tensor_value_info("w", FLOAT, [c]))
        names.append("w")
    elif weight is not None:
        inits.append(numpy_helper.from_array(weight, "w"))
        names.append("w")
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph([node], "loss", inputs,
                              [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or OPS[op])])


def _load(model, tmp_path, isa, threads=1):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return pplpy.load(path, max_isa=isa, num_threads=threads)


def _targets(shape, classes, ignore_index, dtype):
    """Random classes, about a quarter of them ignore_index when there is one."""
    t = RNG.integers(0, classes, shape)
    if ignore_index is not None:
        t = np.where(RNG.random(shape) < 0.25, ignore_index, t)
    return t.astype(dtype)


def _expected(model, feeds, op, reduction, ignore_index, weighted):
    if (op == "NegativeLogLikelihoodLoss" and reduction == "mean" and ignore_index == -1
            and not weighted):
        return ort_session(model).run(None, feeds)
    with np.errstate(invalid="ignore"):  # a "mean" over ignored samples only is 0/0
        return ReferenceEvaluator(model).run(None, feeds)


def _compare(got, want, names):
    for name, w in zip(names, want):
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_loss_matches_reference(op, reduction, isa, tmp_path):
    case = 0
    for shape, declared in SHAPES:
        classes = shape[1]
        for weighted in (None, "fed", "constant"):
            for ignore_index in (None, 1, -1, -7):
                case += 1
                threads = 1 + case % 2
                target_type = INT32 if case % 3 == 0 else INT64
                weight = RNG.random(classes).astype(np.float32) + np.float32(0.1)
                log_prob = op == "SoftmaxCrossEntropyLoss" and case % 2 == 0
                model = loss_model(op, declared, reduction, ignore_index,
                                   weight if weighted == "constant" else weighted,
                                   log_prob=log_prob, target_type=target_type)
                rt = _load(model, tmp_path, isa, threads)
                for n in (shape[0], 1):  # a second batch size: the free dims change
                    dims = (n,) + shape[1:]
                    feeds = {"x": RNG.standard_normal(dims).astype(np.float32),
                             "t": _targets((n,) + shape[2:], classes, ignore_index,
                                           np.int32 if target_type == INT32 else np.int64)}
                    if weighted == "fed":
                        feeds["w"] = weight
                    want = _expected(model, feeds, op, reduction, ignore_index, weighted)
                    _compare(rt.run(feeds), want, rt.output_names)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(OPS))
def test_constant_target_and_every_sample_ignored(op, isa, tmp_path):
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    target = _targets((4, 5), 3, 2, np.int64)
    for reduction in ("none", "sum", "mean"):
        model = loss_model(op, x.shape, reduction, 2, target=target)
        _compare(_load(model, tmp_path, isa).run({"x": x}),
                 ReferenceEvaluator(model).run(None, {"x": x}), ["loss"])
    # Every sample ignored: a "mean" is 0/0 (NaN), as the reference gives; the others 0.
    for reduction in ("none", "sum", "mean"):
        model = loss_model(op, x.shape, reduction, 2, weight="fed")
        feeds = {"x": x, "t": np.full((4, 5), 2, np.int64),
                 "w": np.ones(3, np.float32)}
        with np.errstate(invalid="ignore"):
            want = ReferenceEvaluator(model).run(None, feeds)
        _compare(_load(model, tmp_path, isa).run(feeds), want, ["loss"])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_large_inputs_run_in_parallel(op, reduction, isa, tmp_path):
    """70 000 samples: the per-sample step runs on both threads; the result does not depend
    on the thread count (the chunk sums are added in order)."""
    shape = (2, 5, 175, 200)
    x = RNG.standard_normal(shape).astype(np.float32)
    feeds = {"x": x, "t": _targets((2, 175, 200), 5, 0, np.int64),
             "w": RNG.random(5).astype(np.float32)}
    model = loss_model(op, shape, reduction, 0, weight="fed")
    got = [_load(model, tmp_path, isa, threads).run(feeds)["loss"] for threads in (1, 2)]
    np.testing.assert_array_equal(got[0], got[1])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got[1], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(OPS))
def test_targets_out_of_range_are_pplpy_errors(op, isa, tmp_path):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    # Known when the plan is made: refused at load.
    for bad, ignore_index in ((4, None), (-1, None), (-2, -1), (7, 1)):
        target = np.zeros((3, 2), np.int64)
        target[2, 1] = bad
        model = loss_model(op, x.shape, "mean", ignore_index, target=target)
        with pytest.raises(pplpy.ShapeError, match=rf"target\[2, 1\] = {bad} is neither"):
            _load(model, tmp_path, isa)
    # Read at run time: bad data fed, an InputError naming the sample; the next good run is
    # right.
    for reduction in ("none", "sum"):
        for threads in (1, 2):
            model = loss_model(op, ("N", 4, 2), reduction, -100, weight="fed")
            rt = _load(model, tmp_path, isa, threads)
            w = np.ones(4, np.float32)
            target = np.zeros((3, 2), np.int64)
            target[1, 0] = -3
            with pytest.raises(pplpy.InputError, match=r"target\[1, 0\] = -3 is neither a "
                                                       r"class in \[0, 4\) nor ignore_index"):
                rt.run({"x": x, "t": target, "w": w})
            good = {"x": x, "t": np.ones((3, 2), np.int64), "w": w}
            _compare(rt.run(good), ReferenceEvaluator(model).run(None, good), ["loss"])
    # Past the end, deep in a large input that runs in parallel.
    model = loss_model(op, (2, 5, 175, 200), "mean", weight=None)
    rt = _load(model, tmp_path, isa, 2)
    target = np.zeros((2, 175, 200), np.int64)
    target[1, 170, 3] = 5
    with pytest.raises(pplpy.InputError, match=r"target\[1, 170, 3\] = 5"):
        rt.run({"x": np.zeros((2, 5, 175, 200), np.float32), "t": target})


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", list(OPS))
def test_bad_shapes_types_and_attributes_are_pplpy_errors(op, isa, tmp_path):
    def build(inputs, attrs=None, outputs=("loss",), opset=None):
        names = [name for name, _, _ in inputs]
        node = helper.make_node(op, names, list(outputs), **(attrs or {}))
        graph = helper.make_graph(
            [node], "bad", [helper.make_tensor_value_info(*i) for i in inputs],
            [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or
                                                                            OPS[op])])
        return _load(model, tmp_path, isa)

    with pytest.raises(pplpy.ShapeError, match="rank >= 2"):
        build([("x", FLOAT, [5]), ("t", INT64, [5])])
    with pytest.raises(pplpy.ShapeError, match=r"target must have shape \[3, 7\]"):
        build([("x", FLOAT, [3, 4, 7]), ("t", INT64, [2, 7])])  # N differs
    with pytest.raises(pplpy.ShapeError, match=r"target must have shape \[3\]"):
        build([("x", FLOAT, [3, 4]), ("t", INT64, [3, 1])])  # rank differs
    with pytest.raises(pplpy.ShapeError, match=r"weight must have shape \[4\]"):
        build([("x", FLOAT, [3, 4]), ("t", INT64, [3]), ("w", FLOAT, [3])])
    with pytest.raises(pplpy.ShapeError, match="target"):
        build([("x", FLOAT, [3, 4]), ("t", FLOAT, [3])])
    with pytest.raises(pplpy.ShapeError, match="weight"):
        build([("x", FLOAT, [3, 4]), ("t", INT64, [3]), ("w", INT64, [4])])
    with pytest.raises(pplpy.UnsupportedOpError, match="DOUBLE|float64"):
        build([("x", TensorProto.DOUBLE, [3, 4]), ("t", INT64, [3])])
    with pytest.raises(pplpy.ModelError, match="'reduction' is 'avg'"):
        build([("x", FLOAT, [3, 4]), ("t", INT64, [3])], {"reduction": "avg"})
    # Free dims that disagree are caught when the run's shapes are known.
    rt = build([("x", FLOAT, ["N", 4]), ("t", INT64, ["M"])])
    with pytest.raises(pplpy.ShapeError, match=r"target must have shape \[3\]"):
        rt.run({"x": np.zeros((3, 4), np.float32), "t": np.zeros(2, np.int64)})


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("opset", [12, 13, 22, 28])
def test_every_opset_from_12_runs(op, opset, tmp_path):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    feeds = {"x": x, "t": np.array([0, 3, 1], np.int64)}
    model = loss_model(op, x.shape, "sum", opset=opset)
    got = _load(model, tmp_path, None).run(feeds)
    model = loss_model(op, x.shape, "sum", opset=min(opset, 22 if op[0] == "N" else 13))
    _compare(got, ReferenceEvaluator(model).run(None, feeds), ["loss"])
