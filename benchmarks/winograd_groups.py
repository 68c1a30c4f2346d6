"""Winograd layers cut into output-panel groups for a team: the groups sharing each block's
transformed input (a step before the conv step) against each group transforming it again in
its own scratch, with the weights cold as in a model.

    python benchmarks/winograd_groups.py [--threads 4] [--cut 4] [--tier avx512] [--runs 40]

For ResNet's 3x3 stages (64 channels at 56 x 56, 128 at 28 x 28, 256 at 14 x 14) the layer
is cut as a team of --cut threads (default --threads) cuts it (tiles per item and panel
groups from the kernel's own rules) and run on --threads threads, sharing V and not, each run
after 64 MB of other memory was written (so the packed weights come from memory, as in a
model too large for the cache).
The kernel shares V only where all blocks' V fits _SHARED_V_BYTES (768 KiB); this prints
which it picks ("auto") beside both timings, so a lease on another machine says whether that
threshold holds there.  Session 20 measured, at two threads on the 2-core EPYC with the
four-thread cut (`--threads 2 --cut 4`), shared / own ms: quiet, 64 ch 0.48 / 0.44, 128 ch
0.40 / 0.40, 256 ch 0.48 / 0.51; in a slow spell of that host (the second core contended),
64 ch 0.77 / 0.53, 128 ch 0.54 / 0.47, 256 ch 0.65 / 0.64.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

STAGES = [(64, 56), (128, 28), (256, 14)]


def time_layer(wino, channels, hw, threads, cut, share, runs, flush):
    from pplpy.runtime.step import Plan, Step, shared_pool

    rng = np.random.default_rng(0)
    blocks = -(-channels // 16)
    x = rng.standard_normal((1, blocks, hw, hw, 16)).astype(np.float32)
    y = np.zeros_like(x)
    packed = wino.winograd_pack_weight(
        (rng.standard_normal((channels, channels, 3, 3)) / 24).astype(np.float32))
    made = wino.make_winograd_conv_step(
        x.__array_interface__["data"][0], y.__array_interface__["data"][0], 1, channels,
        channels, hw, hw, hw, hw, 1, 1, 0, 0.0, 0.0, cut, packed_w=packed, keep=(x, y),
        share_input=share)
    steps = [made] if isinstance(made, Step) else list(made)
    plan = Plan(steps, threads, shared_pool(threads, True) if threads > 1 else None)
    times = []
    for _ in range(runs):
        np.add(flush, 1.0, out=flush)  # evict the packed weights
        start = time.perf_counter()
        plan.run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, [s.work_items for s in steps], y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--cut", type=int, default=0,
                        help="cut the layers as for this many threads (default: --threads)")
    parser.add_argument("--tier", choices=["avx512", "fma", "sse"],
                        help="default: the best this CPU runs")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    cut = args.cut or args.threads
    from pplpy.common.isa import best_isa
    from pplpy.engines.x86.impls.dispatch import load_variant

    print(machine_line())
    tier = args.tier or best_isa()
    wino = load_variant("winograd_fp32", tier)
    flush = np.ones(16 << 20, np.float32)
    print(f"tier {tier}, cut for {cut} thread(s), run on {args.threads}, median of "
          f"{args.runs} runs, weights cold; items: [transform step,] conv step")
    print(f"{'layer':>18}  {'auto ms':>8} {'shared ms':>10} {'own ms':>8}  auto items")
    for channels, hw in STAGES:
        auto, items, y_auto = time_layer(wino, channels, hw, args.threads, cut, None, args.runs,
                                         flush)
        shared, _, y_shared = time_layer(wino, channels, hw, args.threads, cut, True, args.runs,
                                         flush)
        own, _, y_own = time_layer(wino, channels, hw, args.threads, cut, False, args.runs, flush)
        if not (np.array_equal(y_auto, y_shared) and np.array_equal(y_auto, y_own)):
            raise SystemExit(f"{channels} channels: the three cuts gave different bits")
        print(f"{channels:4d} ch @ {hw:2d} x {hw:2d}  {auto:8.3f} {shared:10.3f} {own:8.3f}  "
              f"{items}")


if __name__ == "__main__":
    main()
