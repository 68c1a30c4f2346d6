"""Single-core fp32 multiply-add peak of this machine, per ISA tier pplpy can use.

    python benchmarks/peak.py [--seconds 0.3] [--repeats 5]

A tight loop of independent multiply-adds on vector registers (written with intrinsics in a
small C header, compiled on the fly with pplpy's flags for each tier through
``pplpy.build.extension`` into a cache folder under the temp dir): AVX-512 FMA on 16
zmm accumulators, AVX2 FMA on 12 ymm, SSE4.1 mul + add on 12 xmm.  Enough independent
chains cover the FMA latency on two ports.  The peak is the best of the repeats (a ceiling:
a loaded machine only lowers a run); the median is printed beside it.
"""

import argparse
import hashlib
import importlib.util
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

HEADER = r"""
#include <immintrin.h>
#include <stdint.h>
#if defined(__AVX512F__)
#define NACC 16
#define VLEN 16
typedef __m512 vf;
#define SPLAT _mm512_set1_ps
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define STORE _mm512_storeu_ps
#elif defined(__FMA__)
#define NACC 12
#define VLEN 8
typedef __m256 vf;
#define SPLAT _mm256_set1_ps
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define STORE _mm256_storeu_ps
#else
#define NACC 12
#define VLEN 4
typedef __m128 vf;
#define SPLAT _mm_set1_ps
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)   /* SSE4.1 has no FMA */
#define STORE _mm_storeu_ps
#endif

/* iters x NACC independent multiply-adds on VLEN lanes; returns a sum so nothing is dead
   (no asm barrier in the loop: a memory clobber would keep the accumulators in memory). */
static float fma_loop(int64_t iters, float m, float a) {
    vf acc[NACC];
    vf vm = SPLAT(m), va = SPLAT(a);
#pragma GCC unroll 16
    for (int i = 0; i < NACC; i++) acc[i] = SPLAT((float)i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < NACC; i++) acc[i] = FMA(acc[i], vm, va);
    }
    float out[VLEN], s = 0;
    for (int i = 1; i < NACC; i++) acc[0] = acc[0] + acc[i];
    STORE(out, acc[0]);
    for (int j = 0; j < VLEN; j++) s += out[j];
    return s;
}
static int flops_per_iter(void) { return 2 * NACC * VLEN; }
"""

PYX = """
from libc.stdint cimport int64_t
cdef extern from "fma_peak.h" nogil:
    float fma_loop(int64_t iters, float m, float a)
    int flops_per_iter()

def run(int64_t iters):
    cdef float r
    with nogil:
        r = fma_loop(iters, 0.9999999, 1e-7)
    return r

def flops(int64_t iters):
    return iters * flops_per_iter()
"""


def _build(tier):
    """Build (once, cached by source hash) and import the peak module of one tier."""
    from pplpy.build import cythonize, extension
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    name = f"fma_peak_{tier}"
    key = hashlib.sha1((HEADER + PYX + name).encode()).hexdigest()[:12]
    folder = os.path.join(tempfile.gettempdir(), f"pplpy_bench_peak_{key}")
    os.makedirs(folder, exist_ok=True)
    found = [f for f in os.listdir(folder) if f.startswith(name) and f.endswith(".so")]
    if not found:
        with open(os.path.join(folder, "fma_peak.h"), "w") as f:
            f.write(HEADER)
        with open(os.path.join(folder, name + ".pyx"), "w") as f:
            f.write(PYX)
        ext = extension(name, [os.path.join(folder, name + ".pyx")], include_dirs=[folder])
        dist = Distribution({"ext_modules": cythonize([ext], quiet=True)})
        cmd = build_ext(dist)
        cmd.build_lib = folder
        cmd.build_temp = os.path.join(folder, "build")
        cmd.ensure_finalized()
        cmd.run()
        found = [f for f in os.listdir(folder) if f.startswith(name) and f.endswith(".so")]
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, found[0]))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def calibrated_iterations(module, seconds):
    """Iterations of ``module``'s loop that take about ``seconds`` on this core."""
    import time

    iters = 1 << 16
    while True:
        start = time.perf_counter()
        module.run(iters)
        took = time.perf_counter() - start
        if took > seconds / 4:
            break
        iters *= 4
    return max(1, int(iters * seconds / took))


def measure(tier, seconds=0.3, repeats=5):
    """(best, median) GFLOP/s of one core on ``tier``'s multiply-add loop."""
    import time

    module = _build(tier)
    iters = calibrated_iterations(module, seconds)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        module.run(iters)
        rates.append(module.flops(iters) / (time.perf_counter() - start) / 1e9)
    return max(rates), statistics.median(rates)


def measure_all(seconds=0.3, repeats=5, tiers=None):
    """{tier: (best, median) GFLOP/s} for every tier this CPU has (or those given)."""
    from pplpy.common.isa import supported_isas

    return {t: measure(t, seconds, repeats) for t in (tiers or supported_isas())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="per timed run")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"{'tier':8} {'peak GFLOP/s':>13} {'median':>8}   (one core, fp32)")
    for tier, (best, med) in measure_all(args.seconds, args.repeats).items():
        print(f"{tier:8} {best:>13.1f} {med:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
