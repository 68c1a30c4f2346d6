"""How many bytes one buffer of pplpy may ask for: no more than this machine (or the container
it runs in) holds.

Why not just try: where the kernel overcommits memory (``vm.overcommit_memory=1``, some
container sandboxes), allocating 16 TiB succeeds, and the process is killed when the copy or
the run first touches pages it cannot have.  A buffer larger than all of the memory can never
be filled, so it is refused up front with a pplpy error, the same on every host.  Buffers
under the limit can still fail to allocate (other processes hold memory); numpy's
MemoryError is turned into a pplpy error where that happens.
"""

import functools
import os

# No buffer above this however large the machine: a value this big is a shape error.
HARD_LIMIT_BYTES = 1 << 40

# cgroup v2, then v1: the memory the container may use ("max": no limit of its own)
_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def _cgroup_limit():
    for path in _CGROUP_LIMIT_FILES:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if text.isdigit():
            return int(text)
    return None


def _physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX, or not reported
        return None


@functools.lru_cache(maxsize=None)
def usable_memory_bytes():
    """The most bytes one buffer may take: the machine's memory, the container's limit if
    lower, and never more than HARD_LIMIT_BYTES (worked out once a process)."""
    known = [n for n in (_physical_memory(), _cgroup_limit()) if n and n > 0]
    return min(known + [HARD_LIMIT_BYTES])


def describe_limit():
    """The limit in words, for error messages."""
    limit = usable_memory_bytes()
    if limit == HARD_LIMIT_BYTES:
        return f"pplpy's limit of {limit} bytes for one buffer"
    return f"the {limit} bytes of memory this machine (or container) has"
