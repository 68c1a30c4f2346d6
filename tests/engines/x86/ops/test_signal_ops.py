"""BitwiseAnd/Or/Xor/Not (compare_logic.py), BitCast (bitcast.py), DFT, STFT, the window
ops, MelWeightMatrix (signal.py) and Det (det.py) through pplpy.load against
onnx.reference on random inputs, under every ISA tier; the impls (_signal, _linalg) against
numpy; and bad inputs raising pplpy errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.engines.x86.impls import _linalg, _signal
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(11)
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _onnx_type(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _model(op_type, feeds, opset, attrs=None, consts=(), n_out=1):
    """A one-node model; ``feeds`` (name -> array) become graph inputs, ``consts``
    (name -> array) initializers; "" in an input list is an omitted input."""
    names = list(feeds) + [n for n, _ in consts]
    node = helper.make_node(op_type, attrs.pop("_inputs", names) if attrs else names,
                            [f"y{i}" for i in range(n_out)], **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _onnx_type(a.dtype), a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None)
         for i in range(n_out)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feeds, isa, tmp_path, threads=1, compiled=True):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rt = pplpy.load(path, max_isa=isa, num_threads=threads)
    got = rt.run(feeds)["y0"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    if compiled:
        assert not any(isinstance(s, PythonStep) for s in rt._last.plan.steps)
    return got, want


def _check(got, want, rtol=0.0, atol=0.0):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                   want.dtype, want.shape)
    if rtol or atol:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def _ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _load_error(model, tmp_path, feeds, error=pplpy.PplError):
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(error):
        pplpy.load(path).run(feeds)


# -- bitwise -----------------------------------------------------------------------------

BITWISE_SHAPES = [((3, 4, 5), (3, 4, 5)), ((3, 4, 5), (5,)), ((2, 1, 6), (4, 1)), ((), (3, 2)),
                  ((0, 3), (1, 3)), ((3, 200, 130), (200, 1))]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", BITWISE_SHAPES, ids=str)
@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op_type, shapes, threads, isa, tmp_path):
    for dtype in INT_TYPES:
        feeds = {"a": _ints(shapes[0], dtype), "b": _ints(shapes[1], dtype)}
        _check(*_run(_model(op_type, feeds, 18), feeds, isa, tmp_path, threads))


@pytest.mark.parametrize("shape", [(), (7,), (3, 4, 5), (0, 2), (2, 70000)], ids=str)
def test_bitwise_not(shape, isa, tmp_path):
    for dtype in INT_TYPES:
        feeds = {"x": _ints(shape, dtype)}
        _check(*_run(_model("BitwiseNot", feeds, 18), feeds, isa, tmp_path, threads=2))


def test_bitwise_bad_inputs(tmp_path):
    a = _ints((3,), np.int32)
    for b in (np.ones(3, np.int64), np.ones(3, np.float32)):  # mixed or float types
        _load_error(_model("BitwiseAnd", {"a": a, "b": b}, 18), tmp_path, {"a": a, "b": b},
                    pplpy.UnsupportedOpError)
    f = np.ones(3, np.float32)
    _load_error(_model("BitwiseNot", {"x": f}, 18), tmp_path, {"x": f},
                pplpy.UnsupportedOpError)
    b = _ints((4,), np.int32)  # shapes that do not broadcast
    _load_error(_model("BitwiseXor", {"a": a, "b": b}, 18), tmp_path, {"a": a, "b": b})


# -- BitCast -----------------------------------------------------------------------------

SAME_WIDTH = [(np.float32, np.int32), (np.int32, np.float32), (np.uint32, np.float32),
              (np.float64, np.int64), (np.int64, np.uint64), (np.uint64, np.float64),
              (np.int8, np.uint8), (np.uint16, np.int16), (np.int16, np.float16),
              (np.float16, np.uint16), (np.bool_, np.uint8), (np.uint8, np.bool_),
              (np.int8, np.bool_)]


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4), (0, 3)], ids=str)
def test_bitcast(shape, isa, tmp_path):
    for src, dst in SAME_WIDTH:
        x = (RNG.random(shape) < 0.5 if src is np.bool_ else
             RNG.standard_normal(shape).astype(src) if np.dtype(src).kind == "f" else
             _ints(shape, src))
        feeds = {"x": x}
        got, want = _run(_model("BitCast", feeds, 26, {"to": _onnx_type(dst)}), feeds, isa,
                         tmp_path)
        if dst is np.bool_:  # pplpy's bools are 0/1: the truth value of each byte
            want = (x.view(np.uint8) != 0).reshape(shape)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), (src, dst)  # bit for bit, NaNs included


def test_bitcast_bad_inputs(tmp_path):
    x = np.ones(3, np.float32)
    for to in (TensorProto.INT64, TensorProto.UINT8, TensorProto.BFLOAT16,
               TensorProto.FLOAT8E4M3FN, TensorProto.STRING):
        _load_error(_model("BitCast", {"x": x}, 26, {"to": to}), tmp_path, {"x": x},
                    pplpy.UnsupportedOpError)
    _load_error(_model("BitCast", {"x": x}, 26), tmp_path, {"x": x}, pplpy.PplError)


# -- DFT ---------------------------------------------------------------------------------

def _signal_input(shape, dtype):
    return RNG.standard_normal(shape).astype(dtype)


# (input shape, axis, inverse, onesided, dft_length)
DFT_CASES = [((2, 10, 3, 1), 1, 0, 0, None), ((2, 10, 3, 2), 1, 0, 0, None),
             ((2, 10, 3, 1), 2, 0, 1, None), ((4, 16, 2), 1, 0, 0, None),
             ((4, 16, 2), 1, 1, 0, None), ((4, 16, 1), 1, 1, 0, None),
             ((3, 6, 2), 1, 1, 1, None), ((3, 6, 2), 1, 1, 1, 9), ((3, 5, 2), -2, 1, 1, 8),
             ((2, 7, 1), 1, 0, 0, 12), ((2, 12, 2), 1, 0, 0, 5), ((2, 9, 1), 1, 0, 1, 16),
             ((5, 32, 1), -2, 0, 1, 32), ((1, 1, 1), 1, 0, 0, None), ((60, 256, 2), 1, 0, 0, 256),
             ((2, 3, 33, 2), 2, 1, 0, 33)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("case", DFT_CASES, ids=str)
def test_dft(case, opset, dtype, isa, tmp_path):
    shape, axis, inverse, onesided, length = case
    x = _signal_input(shape, dtype)
    consts, inputs, attrs = [], ["x"], {"inverse": inverse, "onesided": onesided}
    inputs.append("n" if length is not None else "")
    if length is not None:
        consts.append(("n", np.array(length, np.int64)))
    if opset >= 20:
        consts.append(("axis", np.array(axis, np.int64)))
        inputs.append("axis")
    else:
        attrs["axis"] = axis
    attrs["_inputs"] = inputs
    feeds = {"x": x}
    got, want = _run(_model("DFT", feeds, opset, attrs, consts), feeds, isa, tmp_path,
                     threads=2)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    _check(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max(initial=0)))


def test_dft_length_fed_at_run_time(isa, tmp_path):
    x = _signal_input((2, 8, 1), np.float32)
    for n in (8, 5, 12):
        feeds = {"x": x, "n": np.array(n, np.int64)}
        got, want = _run(_model("DFT", feeds, 20), feeds, isa, tmp_path)
        _check(got, want, rtol=1e-4, atol=1e-4)


def test_dft_bad_inputs(tmp_path):
    x = _signal_input((2, 8, 3), np.float32)  # last dim must be 1 or 2
    _load_error(_model("DFT", {"x": x}, 20), tmp_path, {"x": x}, pplpy.ShapeError)
    x = _signal_input((2, 8, 1), np.float32)
    for axis in (2, -1, 5):  # the complex dim, out of range
        feeds = {"x": x}
        _load_error(_model("DFT", feeds, 17, {"axis": axis}), tmp_path, feeds, pplpy.ShapeError)
    _load_error(_model("DFT", {"x": x}, 20, consts=[("n", np.array(0, np.int64))]), tmp_path,
                {"x": x}, pplpy.ShapeError)
    xi = np.ones((2, 8, 1), np.int32)
    _load_error(_model("DFT", {"x": xi}, 20), tmp_path, {"x": xi}, pplpy.UnsupportedOpError)
    xh = np.ones((2, 8, 1), np.float16)
    _load_error(_model("DFT", {"x": xh}, 20), tmp_path, {"x": xh}, pplpy.UnsupportedOpError)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 12, 64])
def test_dft_impl(n):
    for dtype in (np.float32, np.float64):
        for cin in (1, 2):
            x = _signal_input((5, n + 2, cin), dtype)
            c = x[..., 0] + (1j * x[..., 1] if cin == 2 else 0)
            for mode, ref in (("forward", np.fft.fft(c, n=n, axis=1)),
                              ("inverse", np.fft.ifft(c, n=n, axis=1)),
                              ("irfft", np.fft.irfft(c, n=n, axis=1))):
                out_complex = mode != "irfft"
                y = np.zeros((5, n, 2 if out_complex else 1), dtype)
                _signal.dft(x, n, mode, out_complex, y, num_threads=2)
                got = y[..., 0] + (1j * y[..., 1] if out_complex else 0)
                tol = 1e-5 if dtype == np.float32 else 1e-12
                np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


# -- STFT --------------------------------------------------------------------------------

# (signal shape, frame_step, window length or None, frame_length or None, onesided)
STFT_CASES = [((1, 128, 1), 8, None, 16, 1), ((1, 128, 1), 8, 16, None, 1),
              ((2, 100, 1), 7, 10, 10, 0), ((3, 64, 2), 4, 12, None, 0),
              ((2, 50, 1), 50, None, None, 1), ((2, 300, 1), 3, 64, 64, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", STFT_CASES, ids=str)
def test_stft(case, dtype, isa, tmp_path):
    shape, step, window, length, onesided = case
    x = _signal_input(shape, dtype)
    consts = [("step", np.array(step, np.int64))]
    inputs = ["x", "step", "", ""]
    if window is not None:
        consts.append(("w", np.hanning(window).astype(dtype)))
        inputs[2] = "w"
    if length is not None:
        consts.append(("fl", np.array(length, np.int64)))
        inputs[3] = "fl"
    feeds = {"x": x}
    got, want = _run(_model("STFT", feeds, 17, {"onesided": onesided, "_inputs": inputs},
                            consts), feeds, isa, tmp_path, threads=2)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    _check(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_stft_bad_inputs(tmp_path):
    x = _signal_input((1, 32, 1), np.float32)
    cases = [  # window length != frame_length, frame longer than the signal, step 0
        ([("s", np.array(4, np.int64)), ("w", np.ones(8, np.float32)),
          ("fl", np.array(6, np.int64))], ["x", "s", "w", "fl"]),
        ([("s", np.array(4, np.int64)), ("fl", np.array(40, np.int64))], ["x", "s", "", "fl"]),
        ([("s", np.array(0, np.int64))], ["x", "s"]),
    ]
    for consts, inputs in cases:
        _load_error(_model("STFT", {"x": x}, 17, {"_inputs": inputs}, consts), tmp_path,
                    {"x": x}, pplpy.ShapeError)
    x3 = _signal_input((32, 1), np.float32)
    _load_error(_model("STFT", {"x": x3}, 17, {"_inputs": ["x", "s"]},
                       [("s", np.array(4, np.int64))]), tmp_path, {"x": x3}, pplpy.ShapeError)


# -- windows and MelWeightMatrix ----------------------------------------------------------

@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows(op_type, isa, tmp_path):
    for size in (0, 1, 2, 5, 10, 64):
        for periodic in (0, 1):
            if size == 1 and not periodic:
                continue  # 0/0: checked in test_window_bad_inputs
            for out_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                             TensorProto.UINT8):
                feeds = {"size": np.array(size, np.int64)}
                model = _model(op_type, feeds, 17, {"periodic": periodic,
                                                    "output_datatype": out_type})
                got, want = _run(model, feeds, isa, tmp_path)
                _check(got, want, rtol=1e-6, atol=1e-6)


def test_window_bad_inputs(tmp_path):
    feeds = {"size": np.array(-1, np.int64)}
    _load_error(_model("HannWindow", feeds, 17), tmp_path, feeds, pplpy.ShapeError)
    feeds = {"size": np.array(4, np.int64)}
    _load_error(_model("HannWindow", feeds, 17, {"output_datatype": TensorProto.BFLOAT16}),
                tmp_path, feeds, pplpy.UnsupportedOpError)
    feeds = {"size": np.array(1, np.int64)}  # symmetric size 1: 0/0 has no integer value
    _load_error(_model("HammingWindow", feeds, 17, {"periodic": 0,
                                                    "output_datatype": TensorProto.INT32}),
                tmp_path, feeds, pplpy.ShapeError)
    feeds = {"size": np.array(4.0, np.float32)}
    _load_error(_model("BlackmanWindow", feeds, 17), tmp_path, feeds, pplpy.UnsupportedOpError)


MEL_CASES = [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 8000.0),
             (5, 31, 100, 10.0, 49.0), (40, 1024, 44100, 0.0, 22050.0)]


@pytest.mark.parametrize("edge_type", [np.float32, np.float64])
@pytest.mark.parametrize("case", MEL_CASES, ids=str)
def test_mel_weight_matrix(case, edge_type, isa, tmp_path):
    mels, length, rate, low, high = case
    # The three counts share one type (T1); the two edges another (T2).
    for out_type, count_type in ((TensorProto.FLOAT, np.int64), (TensorProto.DOUBLE, np.int32)):
        feeds = {"mels": np.array(mels, count_type), "n": np.array(length, count_type),
                 "rate": np.array(rate, count_type), "low": np.array(low, edge_type),
                 "high": np.array(high, edge_type)}
        got, want = _run(_model("MelWeightMatrix", feeds, 17, {"output_datatype": out_type}),
                         feeds, isa, tmp_path)
        _check(got, want, rtol=1e-6, atol=1e-7)


def test_mel_bad_inputs(tmp_path):
    good = {"mels": np.array(8, np.int64), "n": np.array(16, np.int64),
            "rate": np.array(8000, np.int64), "low": np.array(0.0, np.float32),
            "high": np.array(4000.0, np.float32)}
    for name, value in (("high", np.array(7000.0, np.float32)),  # above sample_rate / 2
                        ("low", np.array(5000.0, np.float32)),   # low above high
                        ("mels", np.array(0, np.int64))):
        feeds = dict(good, **{name: value})
        _load_error(_model("MelWeightMatrix", feeds, 17), tmp_path, feeds, pplpy.ShapeError)


# -- Det ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (4, 1, 1), (5, 4, 4), (2, 3, 6, 6),
                                   (0, 3, 3), (2, 0, 0), (300, 8, 8)], ids=str)
@pytest.mark.parametrize("opset", [11, 22])
def test_det(shape, opset, isa, tmp_path):
    for dtype in (np.float32, np.float64):
        feeds = {"x": RNG.standard_normal(shape).astype(dtype)}
        got, want = _run(_model("Det", feeds, opset), feeds, isa, tmp_path, threads=2)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        _check(got, want.astype(dtype), rtol=tol, atol=tol)


def test_det_singular_and_nan(isa, tmp_path):
    x = np.array([[[1, 2, 3], [2, 4, 6], [0, 1, 1]], [[0, 0, 1], [0, 1, 0], [1, 0, 0]],
                  [[0, 0, 0], [np.nan, 1, 0], [0, 0, 1]]], np.float64)
    feeds = {"x": x}
    with np.errstate(invalid="ignore"):  # numpy's own det warns on the NaN
        got, want = _run(_model("Det", feeds, 11), feeds, isa, tmp_path)
    np.testing.assert_array_equal(got[:2], [0.0, -1.0])
    assert np.isnan(got[2])


def test_det_impl_matches_numpy():
    for m in (1, 2, 5, 9):
        x = RNG.standard_normal((6, m, m))
        y = np.zeros(6)
        _linalg.det(x, y, num_threads=2)
        np.testing.assert_allclose(y, np.linalg.det(x), rtol=1e-10, atol=1e-12)


def test_det_bad_inputs(tmp_path):
    for x in (np.ones((2, 3), np.float32), np.ones((3,), np.float32)):
        _load_error(_model("Det", {"x": x}, 11), tmp_path, {"x": x}, pplpy.ShapeError)
    x = np.ones((2, 2), np.int32)
    _load_error(_model("Det", {"x": x}, 11), tmp_path, {"x": x}, pplpy.UnsupportedOpError)
