"""How many bytes one buffer of pplpy may ask for: no more than this machine (or the container
it runs in) holds.

Why not just try: where the kernel overcommits memory (``vm.overcommit_memory=1``, some
container sandboxes), allocating 16 TiB succeeds, and the process is killed when the copy or
the run first touches pages it cannot have.  A buffer larger than all of the memory can never
be filled, so it is refused up front with a pplpy error, the same on every host.  Buffers
under the limit can still fail to allocate (other processes hold memory); numpy's
MemoryError is turned into a pplpy error where that happens.

The memory is the machine's RAM and swap, or the lowest cgroup limit on the process's way up
its cgroup tree (its memory limit plus the swap it may use), whichever is less.  Worked out once
per process: a limit changed later (``docker update``) is not seen.
"""

import functools
import os

# No buffer above this however large the machine: a value this big is a shape error.
HARD_LIMIT_BYTES = 1 << 40

_CGROUP_ROOT = "/sys/fs/cgroup"


def _read_text(path):
    """A cgroup or proc file's text, stripped; None where missing or unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _as_number(text):
    """The whole number ``text`` holds, or None ("max", empty, not a number); numbers past
    any memory size (v1's "unlimited" is 2^63 - 4096) are capped, not parsed digit by digit."""
    if text is None or not text.isdigit():
        return None
    return int(text) if len(text) <= 20 else 1 << 64


def _cgroup_dirs(lines=None):
    """(cgroup v2 or v1 memory folder, v2?) for the process's cgroup and each one above it,
    from /proc/self/cgroup (or its ``lines``); the namespace root's folders too (a
    container's own limit)."""
    found = [(_CGROUP_ROOT, True), (os.path.join(_CGROUP_ROOT, "memory"), False)]
    if lines is None:
        try:
            with open("/proc/self/cgroup", encoding="ascii") as f:
                lines = f.read().splitlines()
        except (OSError, ValueError):
            return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        if not v2 and "memory" not in parts[1].split(","):
            continue
        if parts[2].startswith("/.."):  # outside this namespace's root: not under /sys
            continue
        base = _CGROUP_ROOT if v2 else os.path.join(_CGROUP_ROOT, "memory")
        path = parts[2].rstrip("/")
        while path:
            found.append((base + path, v2))
            path = path.rsplit("/", 1)[0]
    return found


def _cgroup_limit(dirs=None, machine_swap=None):
    """The lowest memory limit of the cgroups the process is in (or of ``dirs``), with the
    swap each may use (its own swap limit, else all of the machine's ``machine_swap``); None
    where none is set."""
    if machine_swap is None:
        machine_swap = _machine_swap()
    limits = []
    for folder, v2 in _cgroup_dirs() if dirs is None else dirs:
        if v2:
            memory = _as_number(_read_text(os.path.join(folder, "memory.max")))
            swap = _as_number(_read_text(os.path.join(folder, "memory.swap.max")))
            if memory is not None:
                limits.append(memory + (machine_swap if swap is None else swap))
        else:
            both = _as_number(_read_text(os.path.join(folder, "memory.memsw.limit_in_bytes")))
            memory = _as_number(_read_text(os.path.join(folder, "memory.limit_in_bytes")))
            if both is not None:
                limits.append(both)
            elif memory is not None:
                limits.append(memory + machine_swap)
    limits = [n for n in limits if n > 0]
    return min(limits) if limits else None


def _machine_swap():
    """Bytes of swap (/proc/meminfo's SwapTotal), 0 where not said."""
    text = _read_text("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("SwapTotal:"):
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                return int(fields[1]) * 1024  # kB
    return 0


def _machine_memory():
    """RAM and swap in bytes, or None where the system does not say."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX, or not reported
        return None
    if pages <= 0 or page <= 0:
        return None
    return pages * page + _machine_swap()


@functools.lru_cache(maxsize=None)
def usable_memory_bytes():
    """The most bytes one buffer may take: the machine's memory, the cgroups' limit if
    lower, and never more than HARD_LIMIT_BYTES (worked out once a process)."""
    known = [n for n in (_machine_memory(), _cgroup_limit()) if n and n > 0]
    return min(known + [HARD_LIMIT_BYTES])


def describe_limit():
    """The limit in words, for error messages."""
    limit = usable_memory_bytes()
    if limit == HARD_LIMIT_BYTES:
        return f"pplpy's limit of {limit} bytes for one buffer"
    return f"the {limit} bytes of memory this machine (or container) has"
