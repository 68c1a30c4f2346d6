"""Run-time choice of a kernel family's ISA variant.

A family ``<family>`` (for example ``eltwise_fp32``) is built three times, as modules
``_<family>_avx512``, ``_<family>_fma`` and ``_<family>_sse``, all exporting the same
names.  ``load_family`` imports the best variant the CPU and the cap allow; modules of a
tier the CPU lacks are never imported (importing them could raise SIGILL).
"""

import functools
import importlib

from pplpy.common.isa import allowed_isas, check_isa_name, supported_isas
from pplpy.errors import PplError

_PACKAGE = "pplpy.engines.x86.impls"


@functools.lru_cache(maxsize=None)
def load_variant(family, isa):
    """Import one ISA variant of a family; the CPU must support ``isa``."""
    isa = check_isa_name(isa)
    if isa not in supported_isas():
        raise PplError(f"this CPU cannot run ISA {isa!r} (it supports {supported_isas()})")
    return importlib.import_module(f"{_PACKAGE}._{family}_{isa}")


def load_family(family, max_isa=None):
    """Import the best variant of ``family`` allowed under ``max_isa``."""
    return load_variant(family, allowed_isas(max_isa)[0])


def families():
    """The kernel families built per ISA tier (their ``_<family>_avx512`` modules)."""
    import pkgutil

    import pplpy.engines.x86.impls as impls

    suffix = "_avx512"
    return sorted(m.name[1:-len(suffix)] for m in pkgutil.iter_modules(impls.__path__)
                  if m.name.startswith("_") and m.name.endswith(suffix))


def dispatch_info(families_=None, max_isa=None):
    """Map each family (default: all) to the ISA variant ``load_family`` picks (after numpy's
    ``opt_func_info``): a user can see what will run."""
    best = allowed_isas(max_isa)[0]
    return {family: best for family in (families_ or families())}
