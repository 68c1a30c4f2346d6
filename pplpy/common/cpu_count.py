"""How many threads a runtime uses by default: the physical cores this process may run on,
as ONNX Runtime does (hyper-threads share one core's FMA units, so they add little to
compute-bound kernels and cost barrier time)."""

import functools
import os


@functools.lru_cache(maxsize=1)
def physical_cores():
    """Physical cores among the CPUs this process is allowed to use (at least 1)."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
            with open(f"{base}/core_id") as f:
                core = f.read().strip()
            with open(f"{base}/physical_package_id") as f:
                package = f.read().strip()
            cores.add((package, core))
        except OSError:
            cores.add(("cpu", cpu))
    return max(1, len(cores))
