"""Whether parallel steps hand their work items out as they run (pplpy_step.h,
ppl_next_items) or give each share a fixed run of them (ppl_partition).

Claimed as the step runs, a thread that runs slower than the others (a hyper-thread sibling
the guest does not show, a host that time-slices the vCPU) takes fewer items instead of
holding the whole team up at the step's end.  PPLPY_STATIC_SHARES=1 (read when a kernel is
made) turns it off, for benchmarks and A/B runs on the same build."""

import os

from pplpy.errors import PplError

ENV = "PPLPY_STATIC_SHARES"


def items_claimed():
    """True unless PPLPY_STATIC_SHARES asks for fixed shares."""
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return True
    if value == "1":
        return False
    raise PplError(f"{ENV}={value!r}: expected 0 (items claimed as a step runs, the default) "
                   f"or 1 (a fixed share per thread)")
