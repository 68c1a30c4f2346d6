"""Shared by the benchmark scripts: which pplpy is imported, timing, machine description."""

import glob
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prefer_checkout():
    """Import pplpy from this checkout when it is built in place (python setup.py build_ext
    --inplace); otherwise the installed pplpy is used.  A script run as
    ``python benchmarks/x.py`` has benchmarks/ on sys.path, not the checkout."""
    if glob.glob(os.path.join(REPO, "pplpy", "runtime", "step*.so")) and REPO not in sys.path:
        sys.path.insert(0, REPO)


def median_ms(fn, warmup, repeats):
    """Median wall time of fn() in ms after warm-up runs (medians only: the machines we
    share are loaded, and a mean follows the worst interruption)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown CPU"


def machine_line():
    """One line: CPU model, logical CPUs, the ISA tiers pplpy may use."""
    from pplpy.common.isa import supported_isas

    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, pplpy ISA tiers "
            f"{'/'.join(supported_isas())}")
