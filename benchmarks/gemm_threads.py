"""How pplpy's GEMM step scales with threads, on the shapes of the models we run.

    python benchmarks/gemm_threads.py [--threads 1,2] [--tier avx512] [--repeats 40]
                                      [--shapes 196x1536x384,128x3072x768]

Each shape (M x K x N, B packed once as the MatMul kernel packs a constant weight) is one
make_gemm_step run as a one-step plan (pplpy.runtime.step.Plan), so the figures exclude the
runtime's input and output copies.  Prints GFLOP/s per thread count and the speedup of the
largest count over the smallest.  The default shapes: transformer projections and MLPs
(BERT-base and ViT-B/16 at their sequence lengths, ConvNeXt-T's MLPs per stage), a square
GEMM, the ResNet stage-1 im2col shape and a classifier's matrix-vector product.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

from brgemm import gemm_case  # noqa: E402

SHAPES = ["128x768x768", "128x768x3072", "128x3072x768", "197x768x2304", "197x3072x768",
          "3136x96x384", "3136x384x96", "784x768x192", "196x1536x384", "49x3072x768",
          "512x512x512", "3136x576x64", "1x2048x1000"]


def best_ms(plan, repeats):
    """Fastest of ``repeats`` runs after three warm-up runs (a kernel's own speed: the
    fastest run is the one the host disturbed least)."""
    for _ in range(3):
        plan.run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan.run()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def gemm_ms(mod, m, k, n, threads, repeats, rng):
    plan, err = gemm_case(mod, m, n, k, threads, rng)  # (brgemm.py's: checked against numpy)
    if err > 1e-3:
        sys.exit(f"{m}x{k}x{n} on {threads} thread(s): relative error {err:.1e}")
    return best_ms(plan, repeats)


def main():
    from pplpy.common.isa import supported_isas
    from pplpy.engines.x86.impls.dispatch import load_variant

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tier", default=None, help="avx512, fma or sse (default: the best)")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    tier = args.tier or supported_isas()[0]
    mod = load_variant("gemm_fp32", tier)
    rng = np.random.default_rng(0)
    print(machine_line())
    print(f"tier {tier}; GFLOP/s at {', '.join(map(str, threads))} thread(s); best of "
          f"{args.repeats} runs")
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        flops = 2.0 * m * k * n
        rates = [flops / gemm_ms(mod, m, k, n, t, args.repeats, rng) / 1e6 for t in threads]
        cells = "  ".join(f"{r:6.0f}" for r in rates)
        print(f"  {shape:>14}  {cells}   x{rates[-1] / rates[0]:.2f}")


if __name__ == "__main__":
    main()
