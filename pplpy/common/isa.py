"""Which ISA tiers this process may use: CPU detection capped by the user's choice.

The cap comes, strongest first, from an explicit ``max_isa`` (``X86Engine(max_isa=...)``,
``pplnn --max-isa``), then from the environment variable ``PPLPY_MAX_ISA``.  Detection runs
in ``_cpu_features``, a module built with baseline flags, before any tier's module is
imported: importing an AVX-512 module on a CPU without AVX-512 kills the process.
"""

import functools
import os

from pplpy.common.isa_tiers import ISA_NAMES, ISA_TIERS
from pplpy.errors import PplError


@functools.lru_cache(maxsize=1)
def cpu_features():
    """The feature names the CPU has and the OS enabled (cached)."""
    from pplpy.common._cpu_features import cpu_features as probe

    return frozenset(probe())


def supported_isas():
    """ISA tier names this CPU can run, best first."""
    features = cpu_features()
    return tuple(t["name"] for t in ISA_TIERS if all(r in features for r in t["requires"]))


def check_isa_name(name):
    """Return ``name`` normalised, or raise a PplError naming the valid choices."""
    norm = str(name).strip().lower()
    if norm not in ISA_NAMES:
        raise PplError(f"unknown ISA {name!r}: choose one of {', '.join(ISA_NAMES)}")
    return norm


def allowed_isas(max_isa=None):
    """ISA tiers usable under a cap, best first.

    ``max_isa`` None means: the ``PPLPY_MAX_ISA`` environment variable if set, else no cap.
    """
    if max_isa is None:
        max_isa = os.environ.get("PPLPY_MAX_ISA") or None
    tiers = supported_isas()
    if max_isa is not None:
        cap = ISA_NAMES.index(check_isa_name(max_isa))
        tiers = tuple(t for t in tiers if ISA_NAMES.index(t) >= cap)
    if not tiers:
        raise PplError(
            f"this CPU supports none of the ISA tiers pplpy needs under cap {max_isa!r} "
            f"(features found: {sorted(cpu_features())}); pplpy needs at least SSE4.1"
        )
    return tiers


def best_isa(max_isa=None):
    """The best ISA tier allowed under ``max_isa``."""
    return allowed_isas(max_isa)[0]
