"""Plan one arena for a run's values: values whose live intervals do not overlap share
memory (Glow's buffer sharing by live intervals).

A simulation of an allocator over the steps, in order: at step s the values it writes are
placed (largest first) in the best-fitting free block, then the values last read at s are
freed and merged with free neighbours.  A value written and read by the same step never
shares memory with the step's inputs, since frees come after allocations.  Free blocks are
kept sorted by size and by offset (bisect), so n values plan in O(n log n).  Offsets are
aligned to 64 bytes (one cache line, one AVX-512 register).
"""

import bisect
from dataclasses import dataclass

ALIGNMENT = 64


@dataclass(frozen=True)
class Buffer:
    name: str
    nbytes: int
    first: int  # index of the step that writes it
    last: int  # index of the last step that reads it (>= first)


def align(n, to=ALIGNMENT):
    return -(-n // to) * to


class _FreeBlocks:
    """Free space below the arena's top, as blocks indexed by size and by offset."""

    def __init__(self):
        self.by_size = []  # sorted (size, offset)
        self.by_offset = []  # sorted offsets
        self.size_at = {}  # offset -> size
        self.top = 0  # end of the highest allocated byte

    def _add(self, offset, size):
        bisect.insort(self.by_size, (size, offset))
        bisect.insort(self.by_offset, offset)
        self.size_at[offset] = size

    def _remove(self, offset):
        size = self.size_at.pop(offset)
        del self.by_size[bisect.bisect_left(self.by_size, (size, offset))]
        del self.by_offset[bisect.bisect_left(self.by_offset, offset)]
        return size

    def allocate(self, size):
        i = bisect.bisect_left(self.by_size, (size, -1))
        if i < len(self.by_size):  # the smallest free block that fits
            block_size, offset = self.by_size[i]
            self._remove(offset)
            if block_size > size:
                self._add(offset + size, block_size - size)
            return offset
        # Nothing fits: grow the arena, starting inside a free block that ends at the top.
        if self.by_offset:
            last = self.by_offset[-1]
            if last + self.size_at[last] == self.top:
                self._remove(last)
                self.top = last + size
                return last
        offset = self.top
        self.top += size
        return offset

    def free(self, offset, size):
        i = bisect.bisect_left(self.by_offset, offset)
        if i < len(self.by_offset):  # merge with the block just above
            above = self.by_offset[i]
            if offset + size == above:
                size += self._remove(above)
        if i > 0:  # merge with the block just below
            below = self.by_offset[i - 1]
            if below + self.size_at[below] == offset:
                size += self._remove(below)
                offset = below
        self._add(offset, size)


def plan_memory(buffers):
    """Returns ``(offsets, total_bytes)`` for the buffers."""
    starts, ends = {}, {}
    for buf in buffers:
        starts.setdefault(buf.first, []).append(buf)
        ends.setdefault(buf.last, []).append(buf)
    blocks = _FreeBlocks()
    offsets, sizes = {}, {}
    for step in sorted(set(starts) | set(ends)):
        for buf in sorted(starts.get(step, ()), key=lambda b: (-b.nbytes, b.name)):
            sizes[buf.name] = align(max(buf.nbytes, 1))
            offsets[buf.name] = blocks.allocate(sizes[buf.name])
        for buf in ends.get(step, ()):
            blocks.free(offsets[buf.name], sizes[buf.name])
    return offsets, blocks.top
