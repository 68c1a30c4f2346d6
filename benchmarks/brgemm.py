"""GFLOP/s of pplpy's brgemm-based GEMM and direct-convolution steps, per ISA tier, against
the single-core FMA peak of the same tier (benchmarks/peak.py).

    python benchmarks/brgemm.py [--threads 1] [--tiers avx512,fma,sse] [--repeats 20]

Shapes (M x N x K, 2 FLOPs per multiply-add):
  square     512 x 512 x 512           gemm step, B packed once (gemm_pack_b)
  skinny     3136 x 64 x 576           ResNet-50 stage-1 3x3 conv as an im2col GEMM
  classifier 1 x 1000 x 2048           matrix-vector (Gemm of the classifier), memory-bound
  batch-reduce 9 x (3136 x 64 x 64)    the same layer as a direct N16CX conv step: 9 taps
                                       batch-reduced by ppl_brgemm, no im2col
Each step is built once (make_gemm_step / make_conv2d_n16cx_step) and run as a one-step
plan (pplpy.runtime.step.Plan), so the figures exclude building.  Medians of --repeats runs,
taken round-robin over the shapes (4 at a time) so that load from other processes hits every
shape alike; the peak is per core, times --threads.  Beside the median, the best run: on a
shared host the median measures the neighbours too, and the best is the kernel's own ceiling
(it is what the FMA peak and benchmarks/brgemm_harness.c report).

numpy checks each result with its own matmul, and OpenBLAS's worker threads spin for a
fraction of a second after such a call, on every CPU (`perf` caught them in 5% of a 3 s
profile of one square case): the timed runs that follow would share their cores with them,
the sibling of the measured core on a host with two threads per core.  So OpenBLAS runs on one
thread here, set before numpy loads it.
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, median_ms, prefer_checkout  # noqa: E402

prefer_checkout()

import peak as peak_meter  # noqa: E402

GEMM_SHAPES = [("square", 512, 512, 512), ("skinny", 3136, 64, 576),
               ("classifier", 1, 1000, 2048)]


def gemm_case(mod, m, n, k, threads, rng):
    """A ready plan computing out = A @ B with B packed, and a check against numpy."""
    from pplpy.runtime.step import Plan

    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    packed = mod.gemm_pack_b(b, False)
    out = np.empty((m, n), np.float32)
    step = mod.make_gemm_step(a.ctypes.data, packed.ctypes.data, out.ctypes.data, m, k, n,
                              threads, keep=(a, packed, out))
    plan = Plan([step], threads)
    plan.run()
    err = np.max(np.abs(out - a @ b)) / np.max(np.abs(a @ b))
    return plan, float(err)


def conv_case(mod, threads, rng, hw=56, c=64):
    """A ready plan of a 3x3 pad-1 conv c -> c on hw x hw in N16CX (9-tap batch-reduce)."""
    from pplpy.runtime.step import Plan

    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    xb = np.ascontiguousarray(x.reshape(1, c // 16, 16, hw, hw).transpose(0, 1, 3, 4, 2))
    yb = np.zeros((1, c // 16, hw, hw, 16), np.float32)
    packed = mod.conv_pack_weight(w, 1)
    step = mod.make_conv2d_n16cx_step(xb.ctypes.data, yb.ctypes.data, 1, c, c, 1, hw, hw,
                                      hw, hw, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0.0, 0.0, threads,
                                      packed_w=packed, keep=(xb, yb, packed))
    plan = Plan([step], threads)
    plan.run()
    # check one output channel block against a numpy 3x3 correlation
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    want = np.zeros((16, hw, hw), np.float32)
    for i in range(3):
        for j in range(3):
            want += np.einsum("oc,chw->ohw", w[:16, :, i, j], xp[:, i:i + hw, j:j + hw])
    err = np.max(np.abs(yb[0, 0].transpose(2, 0, 1) - want)) / np.max(np.abs(want))
    return plan, float(err), packed["kind"]


def run_tier(tier, threads, warmup, repeats, peak):
    from pplpy.engines.x86.impls.dispatch import load_variant

    gemm = load_variant("gemm_fp32", tier)
    conv = load_variant("conv_fp32", tier)
    rng = np.random.default_rng(0)
    cases = []
    for name, m, n, k in GEMM_SHAPES:
        plan, err = gemm_case(gemm, m, n, k, threads, rng)
        cases.append((f"{name} {m}x{n}x{k}", 2.0 * m * n * k, plan, err))
    plan, err, kind = conv_case(conv, threads, rng)
    cases.append((f"batch-reduce 9x(3136x64x64) [{kind} conv]", 2.0 * 3136 * 64 * 576, plan,
                  err))
    # round-robin over the cases, a few runs of each per round: a burst of load from another
    # process then spreads over every case instead of sinking one
    times = [[] for _ in cases]
    for case in cases:
        median_ms(case[2].run, warmup, 0)
    for _ in range(max(1, repeats // 4)):
        for i, case in enumerate(cases):
            times[i].extend(median_ms(case[2].run, 0, 1) for _ in range(4))
    rows = [(label, flop, statistics.median(t), min(t), err)
            for (label, flop, _, err), t in zip(cases, times)]
    for label, flop, ms, best_ms, err in rows:
        gflops = flop / ms / 1e6
        print(f"{tier:7} {label:38} {ms:>8.3f} {gflops:>8.1f} "
              f"{100 * gflops / (peak * threads):>7.1f} "
              f"{100 * flop / best_ms / 1e6 / (peak * threads):>7.1f} {err:>8.1e}")
    return rows


def main(argv=None):
    from pplpy.common.isa import supported_isas

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tiers", default=",".join(supported_isas()))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"threads {args.threads}; medians of {args.repeats} runs; %peak = percent of "
          f"threads x the tier's single-core FMA peak (best: the fastest run's)\n")
    print(f"{'tier':7} {'shape (M x N x K)':38} {'ms':>8} {'GFLOP/s':>8} {'%peak':>7} "
          f"{'best':>7} {'rel err':>8}")
    for tier in args.tiers.split(","):
        peak, peak_median = peak_meter.measure(tier, seconds=0.2, repeats=5)
        print(f"{tier:7} {'FMA peak, one core':38} {'':>8} {peak:>8.1f} {'':>7} "
              f"(median {peak_median:.1f})")
        run_tier(tier, args.threads, args.warmup, args.repeats, peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
