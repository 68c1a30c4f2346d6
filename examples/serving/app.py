"""Serve one ONNX model over HTTP with FastAPI and a pool of pplpy runtimes.

    PPLPY_MODEL=model.onnx uvicorn app:main --factory --host 0.0.0.0 --port 8000
    python app.py model.onnx --port 8000 --pool-size 4 --threads 1

    model file --RuntimeBuilder (parse, optimise, pack weights: once)--> builder
    builder.create_runtime() x pool_size --> queue.Queue of idle runtimes
    POST /predict (a sync endpoint: FastAPI runs it in its thread pool)
        decode feeds --take an idle runtime (wait if none)--> rt.run --give it back--> JSON

A Runtime serialises its own calls (a plan owns one arena), so one runtime shared by every
request would run them one at a time; runtimes made by one builder share the packed weights
and the compiled kernels, so a pool of them runs requests in parallel for the memory of one
arena each.  See docs/serving.md.

Request (JSON):

    {"inputs": {"x": [[...nested lists...]]},                       # or, exact and compact:
     "inputs": {"x": {"b64": "<raw bytes, base64>", "dtype": "float32", "shape": [1, 3, 8, 8]}},
     "outputs": ["y"],            # optional: which outputs (default: all, in model order)
     "encoding": "list"}          # or "base64": how outputs come back

Response: {"outputs": {"y": {"dtype": "float32", "shape": [1, 8], "data": [[...]]}}} with
"data" nested lists (non-finite values as the strings "nan", "inf", "-inf", which inputs
accept too), or "b64" in place of "data" for encoding "base64".

Errors: 400 with {"error": class, "message": ...} for a bad request (a pplpy InputError or
ShapeError names the input, what was expected and what was given); 500 for anything else
pplpy raises (a plugin's kernel failing, an internal error); 503 when no runtime became free
within ``acquire_timeout`` seconds.  A failed run leaves its runtime usable.
"""

import argparse
import base64
import binascii
import os
import queue
import threading
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

import pplpy


class PredictRequest(BaseModel):
    inputs: dict[str, Any]
    outputs: list[str] | None = None
    encoding: Literal["list", "base64"] = "list"


class BadRequest(Exception):
    """A request the client must fix: answered 400."""


class RuntimePool:
    """``size`` runtimes of one builder in a queue; ``with pool.runtime() as rt`` lends one."""

    def __init__(self, builder, size, acquire_timeout=30.0):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.size = size
        self.acquire_timeout = acquire_timeout
        self._idle = queue.Queue()
        for _ in range(size):
            self._idle.put(builder.create_runtime())
        self.served = 0
        self._count_lock = threading.Lock()

    @contextmanager
    def runtime(self):
        try:
            rt = self._idle.get(timeout=self.acquire_timeout)
        except queue.Empty:
            raise TimeoutError(f"no runtime free within {self.acquire_timeout} s") from None
        try:
            yield rt
        finally:  # back in the pool even when the run failed: a failed run leaves it usable
            self._idle.put(rt)
            with self._count_lock:
                self.served += 1

    @property
    def idle(self):
        return self._idle.qsize()


def _decode(name, value, tensor):
    """A feed from its JSON form: nested lists in the input's dtype, or base64 raw bytes."""
    if isinstance(value, dict):
        try:
            raw = base64.b64decode(value["b64"], validate=True)
            dtype = np.dtype(value.get("dtype", tensor.dtype))
            shape = tuple(int(d) for d in value["shape"])
        except KeyError as exc:
            raise BadRequest(f'input "{name}": a base64 feed needs "b64" and "shape", '
                             f"missing {exc}") from None
        except (binascii.Error, TypeError, ValueError) as exc:
            raise BadRequest(f'input "{name}": bad base64 feed ({exc})') from None
        count = int(np.prod(shape, dtype=np.int64))
        if any(d < 0 for d in shape) or count * dtype.itemsize != len(raw):
            raise BadRequest(f'input "{name}": {len(raw)} bytes do not hold {dtype} '
                             f"{list(shape)}")
        return np.frombuffer(raw, dtype).reshape(shape)
    try:
        # JSON numbers have no dtype: read them as the input's ("nan", "inf" strings too).
        return np.asarray(value, dtype=tensor.dtype)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f'input "{name}": not a {tensor.dtype} array ({exc})') from None


def _encode(array, encoding):
    out = {"dtype": str(array.dtype), "shape": list(array.shape)}
    if encoding == "base64":
        out["b64"] = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
    elif array.dtype.kind == "f" and not np.isfinite(array).all():
        # JSON has no NaN or Infinity: write them as strings (inputs accept them back).
        obj = array.astype(object)
        obj[np.isnan(array)] = "nan"
        obj[np.isposinf(array)] = "inf"
        obj[np.isneginf(array)] = "-inf"
        out["data"] = obj.tolist()
    else:
        out["data"] = array.tolist()
    return out


def create_app(model, pool_size=None, num_threads=1, acquire_timeout=30.0):
    """The FastAPI app serving ``model`` (a path or the model's bytes) from ``pool_size``
    runtimes (default: CPUs // num_threads) of ``num_threads`` threads each."""
    if pool_size is None:
        pool_size = max(1, (os.cpu_count() or 1) // num_threads)
    builder = pplpy.RuntimeBuilder.from_onnx(
        model, engines=[pplpy.X86Engine(num_threads=num_threads)])
    pool = RuntimePool(builder, pool_size, acquire_timeout)
    probe = builder.create_runtime()  # for the model's description only; never runs
    inputs = {t.name: t for t in probe.inputs}
    description = {
        "inputs": [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.dims or ())}
                   for t in probe.inputs],
        "outputs": [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.dims or ())}
                    for t in probe.outputs],
    }
    del probe

    app = FastAPI(title="pplpy serving example")
    app.state.builder = builder
    app.state.pool = pool

    @app.get("/health")
    def health():
        return {"status": "ok", "pool_size": pool.size, "idle": pool.idle,
                "served": pool.served, **description}

    @app.post("/predict")
    def predict(request: PredictRequest):
        # A sync endpoint: FastAPI runs it in its worker thread pool, so it may block on the
        # queue and on the run (the run itself releases the GIL).
        try:
            feeds = {}
            for name, value in request.inputs.items():
                if name not in inputs:
                    raise BadRequest(f'unknown input "{name}"; the model takes '
                                     f"{list(inputs)}")
                feeds[name] = _decode(name, value, inputs[name])
            with pool.runtime() as rt:
                outputs = rt.run(feeds, request.outputs)
        except BadRequest as exc:
            return _error(400, "BadRequest", exc)
        except (pplpy.InputError, pplpy.ShapeError) as exc:
            return _error(400, type(exc).__name__, exc)
        except TimeoutError as exc:
            return _error(503, "Busy", exc)
        except pplpy.PplError as exc:
            return _error(500, type(exc).__name__, exc)
        return {"outputs": {name: _encode(a, request.encoding) for name, a in outputs.items()}}

    return app


def _error(status, kind, exc):
    return JSONResponse(status_code=status, content={"error": kind, "message": str(exc)})


def main():
    """App factory for ``uvicorn app:main --factory``: the model and pool from the
    environment (PPLPY_MODEL, PPLPY_POOL_SIZE, PPLPY_THREADS)."""
    pool_size = os.environ.get("PPLPY_POOL_SIZE")
    return create_app(os.environ["PPLPY_MODEL"],
                      pool_size=int(pool_size) if pool_size else None,
                      num_threads=int(os.environ.get("PPLPY_THREADS", "1")))


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--pool-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="each runtime's thread team")
    args = parser.parse_args()
    uvicorn.run(create_app(args.model, args.pool_size, args.threads),
                host=args.host, port=args.port)
