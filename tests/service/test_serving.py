"""examples/serving/app.py under uvicorn on loopback: 200 concurrent requests from httpx
(nested lists and base64, three batch sizes), every answer equal to a direct ``rt.run``; bad
requests are 400s naming the input and leave the pool serving; /health; bounded time."""

import asyncio
import base64
import importlib.util
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import helper
from onnx_builders import FLOAT, make_model

import pplpy

# fastapi, uvicorn and httpx are in the test extra: a missing install fails here, loudly.
import fastapi  # noqa: E402,F401
import httpx  # noqa: E402
import uvicorn  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "examples" / "serving" / "app.py"
REQUESTS = 200
POOL = 4


def load_app_module():
    spec = importlib.util.spec_from_file_location("pplpy_serving_app", APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cnn_model():
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r"], ["a"], name="add"),
        helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
        helper.make_node("Log", ["y"], ["logy"], name="log"),  # NaN for y < 0, -inf at 0
    ]
    return make_model(nodes, [("x", FLOAT, ["N", 3, 8, 8])],
                      [("y", FLOAT, ["N", 8]), ("logy", FLOAT, ["N", 8])],
                      [("w", w), ("w2", w2)])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base url, model path): the app under uvicorn in a background thread, on a socket
    bound to a free loopback port; shut down after the module."""
    path = tmp_path_factory.mktemp("serving") / "cnn.onnx"
    path.write_bytes(cnn_model().SerializeToString())
    app = load_app_module().create_app(str(path), pool_size=POOL, num_threads=1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", path
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not shut down"


def decode(out):
    if "b64" in out:
        return np.frombuffer(base64.b64decode(out["b64"]), out["dtype"]).reshape(out["shape"])
    return np.asarray(out["data"], dtype=out["dtype"]).reshape(out["shape"])


def make_request(i, x):
    if i % 2:
        feed = {"b64": base64.b64encode(x.tobytes()).decode(), "dtype": "float32",
                "shape": list(x.shape)}
    else:
        feed = x.tolist()
    return {"inputs": {"x": feed}, "encoding": "base64" if i % 3 == 0 else "list"}


def test_200_concurrent_requests_match_direct_runs(served):
    url, path = served
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1 + i % 3, 3, 8, 8)).astype(np.float32) for i in range(REQUESTS)]
    rt = pplpy.load(str(path), num_threads=1)
    want = [rt.run({"x": x}) for x in xs]

    async def send_all():
        limits = httpx.Limits(max_connections=64)  # the pool scan is O(connections)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post("/predict", json=make_request(i, x))
                                          for i, x in enumerate(xs)))

    t0 = time.monotonic()
    answers = asyncio.run(asyncio.wait_for(send_all(), 120))
    elapsed = time.monotonic() - t0
    wrong = []
    for i, (answer, expected) in enumerate(zip(answers, want)):
        assert answer.status_code == 200, (i, answer.text)
        outputs = answer.json()["outputs"]
        assert list(outputs) == ["y", "logy"]
        for name, array in expected.items():
            got = decode(outputs[name])
            # float32 -> JSON double -> float32 is exact, and "nan"/"-inf" come back as such
            if got.dtype != array.dtype or not np.array_equal(got, array, equal_nan=True):
                wrong.append((i, name))
    assert wrong == [], f"{len(wrong)} wrong answers, first {wrong[:5]} ({elapsed:.1f} s)"
    assert any(np.isnan(w["logy"]).any() for w in want)  # non-finite values went through

    health = httpx.get(f"{url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["pool_size"] == POOL
    assert health["idle"] == POOL and health["served"] >= REQUESTS
    assert health["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["N", 3, 8, 8]}]


@pytest.mark.parametrize("body, status, words", [
    ({"inputs": {"x": np.zeros((1, 3, 9, 8)).tolist()}}, 400, ['input "x"', "InputError"]),
    ({"inputs": {}}, 400, ["missing input", "x"]),
    ({"inputs": {"z": [1.0]}}, 400, ['unknown input "z"']),
    ({"inputs": {"x": [[1.0], [2.0, 3.0]]}}, 400, ['input "x"', "not a float32 array"]),
    ({"inputs": {"x": {"b64": "AAAA", "shape": [1, 3, 8, 8]}}}, 400, ["3 bytes", "float32"]),
    ({"inputs": {"x": {"b64": base64.b64encode(bytes(8 * 192)).decode(), "dtype": "float64",
                       "shape": [1, 3, 8, 8]}}}, 400, ["expected float32", "float64"]),
    ({"inputs": {"x": np.zeros((1, 3, 8, 8)).tolist()}, "outputs": ["nope"]}, 400, ["nope"]),
])
def test_bad_requests_are_400s_and_the_pool_keeps_serving(served, body, status, words):
    url, path = served
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post("/predict", json=body)
        assert answer.status_code == status, answer.text
        text = answer.json()["error"] + ": " + answer.json()["message"]
        for word in words:
            assert word in text, (word, text)
        x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
        good = client.post("/predict", json={"inputs": {"x": x.tolist()}, "outputs": ["y"]})
        assert good.status_code == 200
        want = pplpy.load(str(path), num_threads=1).run({"x": x})["y"]
        assert np.array_equal(decode(good.json()["outputs"]["y"]), want)
        assert client.get("/health").json()["idle"] == POOL
