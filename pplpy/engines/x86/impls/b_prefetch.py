"""How far ahead of its B loads a brgemm tile prefetches (`b_prefetch` of the epilogue
struct; _brgemm_fp32.h says why there is a prefetch and what it measured).

An op whose B (its packed weights) takes at least MIN_BYTES does not keep it in L2 from one
run to the next, so its tiles ask for B DEFAULT_BLOCKS blocks of 16 k ahead; a smaller one
does not: on the Zen 4 EPYC, prefetching warm weights made MobileNetV2 about 4% slower.
PPLPY_B_PREFETCH_BLOCKS (read when a kernel is made) overrides the distance, 0 to turn the
prefetch off, for benchmarks and A/B runs."""

import os

from pplpy.errors import PplError

DEFAULT_BLOCKS = 4
MAX_BLOCKS = 64
MIN_BYTES = 1 << 20
ENV = "PPLPY_B_PREFETCH_BLOCKS"


def b_prefetch_blocks(weight_bytes):
    """Blocks of 16 k ahead for an op whose B takes ``weight_bytes`` (0: no prefetch)."""
    blocks = DEFAULT_BLOCKS
    value = os.environ.get(ENV, "").strip()
    if value:
        try:
            blocks = int(value)
        except ValueError:
            blocks = -1
        if not 0 <= blocks <= MAX_BLOCKS:
            raise PplError(f"{ENV}={value!r}: expected an integer 0..{MAX_BLOCKS} (blocks of "
                           f"16 k rows of B; default {DEFAULT_BLOCKS})")
    return blocks if weight_bytes >= MIN_BYTES else 0
