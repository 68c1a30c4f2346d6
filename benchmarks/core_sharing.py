"""Which CPUs share a physical core, measured rather than read from the topology a virtual
machine reports.

    python benchmarks/core_sharing.py [--seconds 0.3] [--tier avx512]

pplpy binds its workers to consecutive CPUs of the process's set (runtime/pplpy_pool.h).  If
two of them were hyperthreads of one core, the team would get one core's multiply-adds for
two threads.  On the 16-core Xeon pplpy scaled 2.1-2.4x from 1 to 4 threads but 5.5-6.4x
from 1 to 16, where both engines use every CPU: a pattern that CPUs sharing cores would
explain, and that lscpu (one thread per core, 16 L2 instances) does not say either way.

For each CPU c other than the first, benchmarks/peak.py's multiply-add loop runs on the first
CPU and on c at the same time, each thread bound to its CPU; each pair is reported with the
first CPU's throughput as a fraction of its solo run.  About 1.0: separate cores; about 0.5:
one core shared (two threads of an FMA-bound loop split its FMA units).
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()


def _rate(module, iters, cpu, out, index, start):
    """GFLOP/s of `iters` iterations of the loop on `cpu`, into out[index], after `start`."""
    os.sched_setaffinity(0, {cpu})  # this thread only (Linux)
    start.wait()
    t = time.perf_counter()
    module.run(iters)
    out[index] = module.flops(iters) / (time.perf_counter() - t) / 1e9


def _together(module, iters, cpus):
    """Each CPU's GFLOP/s with the loop running on all of `cpus` at once."""
    out = [0.0] * len(cpus)
    start = threading.Barrier(len(cpus))
    threads = [threading.Thread(target=_rate, args=(module, iters, c, out, i, start))
               for i, c in enumerate(cpus)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def main(argv=None):
    from peak import _build, calibrated_iterations

    from pplpy.common.isa import supported_isas

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="per measurement")
    parser.add_argument("--tier", default=None, help="ISA tier of the loop (default: best)")
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_setaffinity"):
        print("core_sharing: this system cannot bind threads to CPUs")
        return 1
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print(f"core_sharing: the process may use one CPU only ({cpus})")
        return 1
    tier = args.tier or supported_isas()[0]
    module = _build(tier)
    iters = calibrated_iterations(module, args.seconds)
    first = cpus[0]
    solo = max(_together(module, iters, [first])[0] for _ in range(3))
    print(machine_line())
    print(f"{tier} multiply-add loop, CPU {first} alone: {solo:.1f} GFLOP/s")
    print(f"{'pair':>10} {'CPU ' + str(first):>9} {'other':>9} {'fraction':>9}")
    shared = []
    for c in cpus[1:]:
        a, b = max((_together(module, iters, [first, c]) for _ in range(2)),
                   key=lambda r: r[0])
        fraction = a / solo
        if fraction < 0.75:
            shared.append(c)
        print(f"{first:>4} + {c:<3} {a:>9.1f} {b:>9.1f} {fraction:>9.2f}")
    if shared:
        print(f"CPU {first} shares a core with CPU(s) {shared}")
    else:
        print(f"CPU {first} shares its core with no other CPU of the set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
