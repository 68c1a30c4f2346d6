"""Plan one arena for a run's intermediate tensors: buffers whose live intervals do not
overlap share memory (Glow's buffer sharing by live intervals).

Greedy by size: the largest tensors are placed first, each at the lowest offset that does
not collide with an already placed tensor alive at the same time.  Offsets are aligned to
64 bytes (one cache line, one AVX-512 register).
"""

from dataclasses import dataclass

ALIGNMENT = 64


@dataclass(frozen=True)
class Buffer:
    name: str
    nbytes: int
    first: int  # index of the step that writes it
    last: int  # index of the last step that reads it


def align(n, to=ALIGNMENT):
    return -(-n // to) * to


def plan_memory(buffers):
    """Returns ``(offsets, total_bytes)`` for the buffers."""
    placed = []  # (offset, size, first, last)
    offsets = {}
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.name)):
        size = align(max(buf.nbytes, 1))
        busy = sorted(
            (off, sz) for off, sz, f, l in placed if f <= buf.last and buf.first <= l
        )
        offset = 0
        for off, sz in busy:
            if offset + size <= off:
                break
            offset = max(offset, off + sz)
        placed.append((offset, size, buf.first, buf.last))
        offsets[buf.name] = offset
    total = max((off + sz for off, sz, _, _ in placed), default=0)
    return offsets, total
