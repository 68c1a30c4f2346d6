"""The x86 ISA tiers pplpy compiles kernels for: one pure-data table.

``setup.py`` reads it to pick compiler flags from a ``.pyx`` file's suffix, and
``pplpy.common.isa`` reads it to decide, from the CPU's features, which tiers may be
imported.  Keeping both in one table means the flags a module is built with and the
features checked before importing it cannot drift apart.

This module must stay importable without numpy or any compiled code: ``setup.py``
loads it by path before anything is built.
"""

# Ordered best first.  ``requires`` are feature names reported by
# ``pplpy.common._cpu_features.cpu_features()``; every one must be present (and enabled
# by the OS, which the probe checks through XCR0) before a module of that tier is imported.
ISA_TIERS = (
    {
        "name": "avx512",
        "flags": ("-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx2", "-mfma"),
        "requires": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"),
    },
    {
        "name": "fma",
        "flags": ("-mavx2", "-mfma"),
        "requires": ("avx2", "fma"),
    },
    {
        "name": "sse",
        "flags": ("-msse4.1",),
        "requires": ("sse4_1",),
    },
)

ISA_NAMES = tuple(tier["name"] for tier in ISA_TIERS)

# Flags every extension gets.  -fno-trapping-math lets gcc vectorise if/else loops
# (measured: a scalar LeakyReLU loop became 36x faster); never -ffast-math or -march=native.
BASE_COMPILE_FLAGS = ("-O3", "-fno-trapping-math", "-pthread")
BASE_LINK_FLAGS = ("-pthread",)


def tier_of_module(module_name):
    """Return the ISA tier name a module's suffix selects, or None for baseline code."""
    for name in ISA_NAMES:
        if module_name.endswith("_" + name):
            return name
    return None


def flags_of_tier(name):
    """Compiler flags for an ISA tier name (empty for baseline code)."""
    for tier in ISA_TIERS:
        if tier["name"] == name:
            return tier["flags"]
    return ()
