"""The process's CPUs grouped into physical cores, as Linux describes them in sysfs.

Two things depend on it.  The default thread count is the number of physical cores, as ONNX
Runtime picks it: hyper-threads share one core's FMA units, so they add little to
compute-bound kernels and cost barrier time.  And the order a thread team is bound along
(``pplpy_pool.h``) puts one CPU of every core before any core's second hyper-thread: Linux
numbers the siblings of a core apart on some machines (0 and 8) and next to each other on
others (0 and 1, as many virtual machines do), and binding a team of four to CPUs 0-3 of the
second kind gives it two cores.

Where sysfs says nothing (no topology files, or a hypervisor that shows every virtual CPU as
a core of its own) each CPU counts as its own core and the order is the numeric one.
"""

import functools
import os

_SYSFS = "/sys/devices/system/cpu"


def parse_cpu_list(text):
    """CPU numbers of a sysfs list such as ``"0-3,8,10-11"``."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


@functools.cache
def sysfs_siblings(cpu):
    """The CPUs sharing ``cpu``'s core (itself included), from sysfs; ``{cpu}`` if unknown."""
    try:
        with open(f"{_SYSFS}/cpu{cpu}/topology/thread_siblings_list") as f:
            siblings = frozenset(parse_cpu_list(f.read()))
    except (OSError, ValueError):
        return frozenset((cpu,))
    return siblings if cpu in siblings else frozenset((cpu,))


def allowed_cpus():
    """The CPUs this process may run on, in numeric order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def bind_order(cpus=None, siblings=sysfs_siblings):
    """``(order, cores)``: the CPUs of ``cpus`` (default: the process's) in the order a team
    is bound along, and for each the number of its physical core (equal for siblings).

    Cores are numbered by their lowest CPU in ``cpus``; the order takes the first allowed
    CPU of every core, then every core's second, and so on, so a team no larger than the
    number of cores gets a core per thread."""
    cpus = sorted(set(allowed_cpus() if cpus is None else cpus))
    core_of = {}
    members = []  # per core, its CPUs of `cpus` in numeric order
    for cpu in cpus:
        if cpu in core_of:
            continue
        group = [c for c in cpus if c in siblings(cpu)] or [cpu]
        if cpu not in group:
            group = [cpu]
        for c in group:
            core_of.setdefault(c, len(members))
        members.append([c for c in group if core_of[c] == len(members)])
    order = []
    for rank in range(max((len(m) for m in members), default=0)):
        order.extend(m[rank] for m in members if rank < len(m))
    return tuple(order), tuple(core_of[c] for c in order)


@functools.lru_cache(maxsize=1)
def physical_cores():
    """Physical cores among the CPUs this process is allowed to use (at least 1)."""
    return max(1, len(set(bind_order()[1])))
