"""Side-by-side timing of pplpy and ONNX Runtime on the same models and inputs.

    python benchmarks/run.py [benchmarks/suite.yaml]

Prints, per model and thread count, the median run time of each engine and the ratio
pplpy / onnxruntime (below 1 means pplpy is faster).  Timings on shared machines wander;
compare within one run and quote medians and ratios.  Needs ``pip install ".[bench]"``.
"""

import os
import statistics
import sys
import time

import numpy as np
import onnx
import yaml

import pplpy

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def feeds_for(rt):
    rng = np.random.default_rng(0)
    return {t.name: rng.random(tuple(d if isinstance(d, int) and d > 0 else 1
                                     for d in t.dims)).astype(t.dtype) for t in rt.inputs}


def main(argv):
    suite_path = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                            "suite.yaml")
    with open(suite_path) as f:
        suite = yaml.safe_load(f)
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed: pip install '.[bench]'", file=sys.stderr)
        return 2
    print(f"pplpy ISA: {pplpy.X86Engine().options.isa}; onnxruntime {ort.__version__}")
    print(f"{'model':24} {'thr':>3} {'pplpy ms':>10} {'ort ms':>10} {'ratio':>7}")
    for name in suite["models"]:
        path = os.path.join(LIGHT, f"{name}.onnx")
        for threads in suite["threads"]:
            rt = pplpy.load(path, num_threads=threads)
            feeds = feeds_for(rt)
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            ours = median_ms(lambda: rt.run(feeds), suite["warmup"], suite["repeats"])
            theirs = median_ms(lambda: sess.run(None, feeds), suite["warmup"], suite["repeats"])
            print(f"{name:24} {threads:>3} {ours:>10.2f} {theirs:>10.2f} {ours / theirs:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
