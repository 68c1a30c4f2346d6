"""How evenly pplpy's steps split over a thread team, without the machine that has the team.

    python benchmarks/balance.py [--threads 16] [--runs 5] [--models resnet50,mobilenet_v2]

Each parallel step cuts its output into independent work items and thread tid takes a
contiguous share of them (``Step.work_items``; ``pplnn --enable-profiling`` shows them).  A
node with ``items`` items on ``T`` threads takes, with items of equal cost, ``ceil(items /
T) / items`` of its one-thread time instead of ``1 / T``.  This script times every node at
one thread on this machine, reads every node's items from a plan made for ``--threads``
(the split depends on the team size, not on the cores present), and prints per model:

  bound    the speedup at T threads that the item counts alone allow (sum of one-thread
           times over the sum of their ceil(items / T) / items shares; nodes that report no
           items counted as splitting evenly, serial steps as one item)
  short    share of the one-thread time in nodes with fewer than T items
  worst    the nodes whose items cost most: name, op type, items, and the time they add to
           an evenly split T-thread run, in percent of that run

Memory bandwidth, caches and wake-up latency are left out: this is an upper bound from the
decomposition alone, for telling which layers to cut finer before a 16-core run.
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import prefer_checkout  # noqa: E402

prefer_checkout()

import tempfile  # noqa: E402

import yaml  # noqa: E402

import pplpy  # noqa: E402
from run import HERE, make_feeds, model_path  # noqa: E402


def node_profile(path, threads, runs):
    """(mean ms per node, items per node, op type per node) of `runs` profiled runs."""
    rt = pplpy.load(path, num_threads=threads)
    feeds = make_feeds(rt)
    rt.run(feeds)
    rt.profiler.enabled = True
    for _ in range(runs):
        rt.run(feeds)
    ms = {name: t for name, _, t in rt.profiler.per_node()}
    return ms, dict(rt.profiler.node_items), dict(rt.profiler.node_types)


def balance(ms1, items, threads):
    """(bound speedup, share of time in nodes with fewer items than threads, the nodes that
    lose most: (lost share of the ideal T-thread time, one-thread share, name, items))."""
    total = sum(ms1.values()) or 1.0
    spent, short, worst = 0.0, 0.0, []
    for name, t in ms1.items():
        n = items.get(name, 0)
        share = math.ceil(n / threads) / n if n > 0 else 1.0 / threads
        spent += t * share
        if 0 < n < threads:
            short += t
        if share > 1.0 / threads:
            worst.append((t * (share * threads - 1) / total, t / total, name, n))
    return total / spent, short / total, sorted(worst, reverse=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5, help="profiled runs at one thread")
    parser.add_argument("--models", help="comma-separated names of suite.yaml (default: all)")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args(argv)
    with open(os.path.join(HERE, "suite.yaml")) as f:
        suite = yaml.safe_load(f)
    wanted = set(args.models.split(",")) if args.models else None
    print(f"threads {args.threads}: bound = speedup the work items allow; short = share of "
          f"the one-thread time in nodes with fewer than {args.threads} items")
    print(f"{'model':18} {'bound':>6} {'short':>6}  worst (node op items +% of the ideal run)")
    with tempfile.TemporaryDirectory() as folder:
        for entry in suite["models"]:
            name = entry.get("zoo") or entry.get("builder")
            if wanted and name not in wanted:
                continue
            _, path = model_path(entry, folder)
            ms1, _, types = node_profile(path, 1, args.runs)
            _, items, _ = node_profile(path, args.threads, 1)
            bound, short, worst = balance(ms1, items, args.threads)
            detail = "; ".join(f"{n} {types[n]} {k} +{100 * lost:.1f}%"
                               for lost, _, n, k in worst[:args.top])
            print(f"{name:18} {bound:>6.1f} {100 * short:>5.1f}%  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
