"""Single operators, pplpy against ONNX Runtime: each op's kernel time in both engines, in one
process, on the same random inputs.

    python benchmarks/ops.py [--threads 1] [--runs 30] [--only Softmax,TopK]

A model's time hides an op that is many times slower than it should be when the op is a
small share of it (a TopK after a detector, a Cast, a ReduceMax in an attention block); a
table of ops at the sizes models give them shows such an op at once.  Each case is a
one-node model built with onnx.helper.  pplpy's time is the node's own step time from its
profiler (``rt.profiler``), ONNX Runtime's the kernel time its own profiler records
(``ort_profile.py``), so neither counts the run call around the kernel; both are means
over --runs runs after warm-up runs.  Prints per case the ms of each and ORT time / pplpy
time (above 1: pplpy faster), and the geometric mean.  ONNX Runtime is optional
(pip install ".[bench]"); without it only pplpy's times are printed.
"""

import argparse
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pplpy  # noqa: E402

RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


# name: (op type, {input: array}, attributes, {initializer: array}, opset, outputs); the
# node reads the model inputs, then the initializers, unless NODE_INPUTS names its own order.
IMAGE = (1, 64, 112, 112)     # a stage-1 CNN activation
TOKENS = (1, 3136, 768)       # 56 x 56 tokens of a vision transformer's width
CASES = {
    "Add (same shape)": ("Add", {"a": _f(*IMAGE), "b": _f(*IMAGE)}, {}, {}, 17, 1),
    "Mul (per-channel)": ("Mul", {"a": _f(*IMAGE), "b": _f(1, 64, 1, 1)}, {}, {}, 17, 1),
    "Sigmoid": ("Sigmoid", {"a": _f(*IMAGE)}, {}, {}, 17, 1),
    "Erf": ("Erf", {"a": _f(*IMAGE)}, {}, {}, 17, 1),
    "Gelu": ("Gelu", {"a": _f(*IMAGE)}, {}, {}, 20, 1),
    "Pow (x ** 2)": ("Pow", {"a": _f(*IMAGE)}, {}, {"e": np.array(2, np.float32)}, 17, 1),
    "Cast float32 -> float16": ("Cast", {"a": _f(*IMAGE)}, {"to": TensorProto.FLOAT16}, {},
                                17, 1),
    "Transpose NCHW -> NHWC": ("Transpose", {"a": _f(*IMAGE)}, {"perm": [0, 2, 3, 1]}, {}, 17,
                               1),
    "Transpose (3136, 195) -> (195, 3136)": ("Transpose", {"a": _f(1, 56, 56, 195)},
                                             {"perm": [0, 3, 1, 2]}, {}, 17, 1),
    "Softmax (12 x 196 rows of 196)": ("Softmax", {"a": _f(12, 196, 196)}, {"axis": -1}, {},
                                       13, 1),
    "LogSoftmax (64 rows of 1000)": ("LogSoftmax", {"a": _f(64, 1000)}, {"axis": -1}, {}, 13,
                                     1),
    "LayerNormalization (768)": ("LayerNormalization", {"a": _f(*TOKENS)}, {"axis": -1},
                                 {"s": _f(768), "b": _f(768)}, 17, 1),
    "ReduceMean (last axis)": ("ReduceMean", {"a": _f(*TOKENS)}, {"axes": [-1]}, {}, 17, 1),
    "ReduceMax (last axis)": ("ReduceMax", {"a": _f(*TOKENS)}, {"axes": [-1]}, {}, 17, 1),
    "ReduceMax (H, W)": ("ReduceMax", {"a": _f(*IMAGE)}, {"axes": [2, 3]}, {}, 17, 1),
    "TopK (100 of 8400)": ("TopK", {"a": _f(1, 80, 8400)}, {"axis": -1}, {"k": _i64(100)}, 11,
                           2),
    "Pad (1 pixel)": ("Pad", {"a": _f(*IMAGE)}, {}, {"p": _i64(0, 0, 1, 1, 0, 0, 1, 1)}, 17, 1),
    "Concat (channels)": ("Concat", {"a": _f(1, 64, 56, 56), "b": _f(1, 64, 56, 56)},
                          {"axis": 1}, {}, 17, 1),
    "Slice (half the channels)": ("Slice", {"a": _f(*TOKENS)}, {},
                                  {"st": _i64(0), "en": _i64(384), "ax": _i64(2)}, 17, 1),
    "Gather (512 embedding rows)": ("Gather",
                                    {"i": RNG.integers(0, 30522, (1, 512)).astype(np.int64)},
                                    {"axis": 0}, {"table": _f(30522, 768)}, 17, 1),
    "MaxPool 3x3 /2 (NCHW)": ("MaxPool", {"a": _f(*IMAGE)},
                              {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}, {},
                              17, 1),
    "Resize 2x linear": ("Resize", {"a": _f(1, 64, 56, 56)}, {"mode": "linear"},
                         {"r": np.zeros(0, np.float32),
                          "sc": np.array([1, 1, 2, 2], np.float32)}, 13, 1),
}


# The embedding table is a weight, as in a model (fed, it would be copied in on every run).
NODE_INPUTS = {"Gather": ["table", "i"]}


def one_node_model(op_type, inputs, attrs, inits, opset, outputs, out_types):
    node = helper.make_node(op_type, NODE_INPUTS.get(op_type, list(inputs) + list(inits)),
                            [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       a.shape) for name, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)],
        [numpy_helper.from_array(a, name) for name, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def pplpy_ms(model, feeds, threads, runs):
    """(mean ms of the node's steps per run, ONNX output types)."""
    rt = pplpy.load(model.SerializeToString(), num_threads=threads)
    outputs = rt.run(feeds)
    rt.run(feeds)
    rt.profiler.enabled = True
    for _ in range(runs):
        rt.run(feeds)
    ms = sum(t for _, _, t in rt.profiler.per_node())
    return ms, [helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype) for v in outputs.values()]


def ort_ms(model, threads, runs, folder):
    from ort_profile import profile

    path = os.path.join(folder, "op.onnx")
    onnx.save(model, path)
    table, _ = profile(path, threads, runs)
    return sum(ms for _, ms in table.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", help="comma-separated words; cases whose name has one")
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort
        versions = f"ONNX Runtime {ort.__version__}"
    except ImportError:
        ort = None
        versions = "ONNX Runtime not installed: pplpy only"
    words = [w.strip().lower() for w in args.only.split(",")] if args.only else []
    print(f"{machine_line()}; {args.threads} thread(s); {versions}")
    print(f"{'case':40} {'pplpy ms':>9} {'ORT ms':>9} {'ORT/pplpy':>9}")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (op_type, inputs, attrs, inits, opset, outputs) in CASES.items():
            if words and not any(w in name.lower() for w in words):
                continue
            probe = one_node_model(op_type, inputs, attrs, inits, opset, outputs,
                                   [TensorProto.UNDEFINED] * outputs)
            mine, out_types = pplpy_ms(probe, inputs, args.threads, args.runs)
            model = one_node_model(op_type, inputs, attrs, inits, opset, outputs, out_types)
            if ort is None:
                print(f"{name:40} {mine:>9.3f}")
                continue
            theirs = ort_ms(model, args.threads, args.runs, folder)
            ratios.append(theirs / mine)
            print(f"{name:40} {mine:>9.3f} {theirs:>9.3f} {theirs / mine:>9.2f}")
    if ratios:
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{'geometric mean':40} {'':>9} {'':>9} {mean:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
