"""Winograd on wide layers with few tiles, whole models: pplpy's rule against sending those
layers to the direct conv, timed round-robin in one process.

    python benchmarks/winograd_cold.py [--models resnet50,light_inception_v2] [--threads 1,2]
                                       [--rounds 10] [--min-pixels 784]

conv.py picks Winograd F(4x4, 3x3) for a 3x3 layer wider than 128 x 128 channels once its
output has WINOGRAD_LARGE_MIN_PIXELS (14 x 14) pixels: ResNet-50's five 256 -> 256 layers at
14 x 14 (16 tiles).  Winograd's packed weight is 4x the raw one (9.4 MB for such a layer, 2.4
raw), and each of its values serves only the 16 tiles, so a layer whose weight comes from
memory on every run (a model larger than the cache) streams 9.4 MB for 75 MFLOP: on a host
with little memory bandwidth per core the direct conv, which reads 2.4 MB for 231 MFLOP,
finishes first.  Session 29's 2-core Xeon, one thread, the layer alone with 512 MB written
between runs: direct 1.90 ms, Winograd 2.03 (with 64 MB, which its 260 MB L3 kept: 2.10 and
1.03); the session-25 EPYC measured Winograd 2.0x faster on 512 -> 512 at 14 x 14 with its
weights evicted.  This builds each model twice, as pplpy does and with the threshold raised
to --min-pixels (784 = 28 x 28 sends ResNet's 14 x 14 layers to direct), and prints best,
lower quartile and median ms of each, so that a machine says which rule suits it.  Models:
the benchmark builders' names, or run.py's light_* zoo networks (Inception v2's 14 x 14
layers are 128-256 channels wide).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()


def main(argv=None):
    import onnx

    import models as builders
    import pplpy
    from run import LIGHT
    from pplpy.engines.x86.ops.onnx import conv

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50,light_inception_v2")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=10, help="3 runs of each build a round")
    parser.add_argument("--min-pixels", type=int, default=28 * 28)
    args = parser.parse_args(argv)
    print(machine_line())
    rules = {"pplpy's rule": conv.WINOGRAD_LARGE_MIN_PIXELS,
             f"min pixels {args.min_pixels}": args.min_pixels}
    print(f"{'model':18} {'thr':>3} {'build':18} {'weights MB':>10} {'best':>8} {'p25':>8} "
          f"{'median':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            if name.startswith("light_"):  # a zoo network from the onnx wheel (run.py's)
                path = os.path.join(LIGHT, f"{name}.onnx")
            else:
                path = os.path.join(tmp, f"{name}.onnx")
                onnx.save(builders.BUILDERS[name](), path)
            for threads in (int(t) for t in args.threads.split(",")):
                runtimes = {}
                try:
                    for label, pixels in rules.items():
                        conv.WINOGRAD_LARGE_MIN_PIXELS = pixels
                        runtimes[label] = pplpy.load(path, num_threads=threads)
                finally:
                    conv.WINOGRAD_LARGE_MIN_PIXELS = rules["pplpy's rule"]
                first = next(iter(runtimes.values()))
                name_in = first.input_names[0]
                feeds = {name_in: np.random.default_rng(0).standard_normal(
                    first.input_shapes[name_in]).astype(np.float32)}
                times = {label: [] for label in runtimes}
                for rt in runtimes.values():
                    for _ in range(2):
                        rt.run(feeds)
                for _ in range(args.rounds):
                    for label, rt in runtimes.items():
                        for _ in range(3):
                            start = time.perf_counter()
                            rt.run(feeds)
                            times[label].append((time.perf_counter() - start) * 1e3)
                for label, rt in runtimes.items():
                    ts = sorted(times[label])
                    print(f"{name:18} {threads:>3} {label:18} "
                          f"{rt.memory()['weights'] / 1e6:>10.0f} {ts[0]:>8.2f} "
                          f"{ts[len(ts) // 4]:>8.2f} {statistics.median(ts):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
