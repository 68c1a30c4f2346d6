"""Build helpers for plugin packages whose kernels are Cython: the project's compiler flags
(OpenMP included), ISA tiers and Cython directives, and the include path of the step ABI.

In a plugin's setup.py::

    from pplpy.build import cythonize, extension
    setup(ext_modules=cythonize([extension("my_ops._negate", ["my_ops/_negate.pyx"])]))

and in ``_negate.pyx``::

    from pplpy.runtime.step cimport Step, new_step, ppl_partition

A module named ``..._avx512`` / ``_fma`` / ``_sse`` gets that tier's flags, as pplpy's own do
(import it only where ``pplpy.common.isa.supported_isas()`` has the tier).
"""

import os

from pplpy.common import isa_tiers

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
}


def get_include():
    """Folders to add to a plugin extension's include path (the step ABI header)."""
    return [os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")]


def compile_flags(module_name):
    """pplpy's compiler flags for ``module_name`` (its ISA suffix picks the tier)."""
    tier = isa_tiers.tier_of_module(module_name)
    return [*isa_tiers.BASE_COMPILE_FLAGS, *isa_tiers.flags_of_tier(tier)]


def extension(name, sources, **kwargs):
    """A setuptools Extension built the way pplpy builds its kernels."""
    from setuptools import Extension

    return Extension(
        name,
        list(sources),
        extra_compile_args=compile_flags(name) + list(kwargs.pop("extra_compile_args", [])),
        extra_link_args=list(isa_tiers.BASE_LINK_FLAGS) + list(kwargs.pop("extra_link_args",
                                                                          [])),
        include_dirs=get_include() + list(kwargs.pop("include_dirs", [])),
        **kwargs,
    )


def cythonize(extensions, **kwargs):
    """Cython.Build.cythonize with pplpy's directives."""
    from Cython.Build import cythonize as _cythonize

    directives = dict(DIRECTIVES)
    directives.update(kwargs.pop("compiler_directives", {}))
    return _cythonize(extensions, compiler_directives=directives, **kwargs)
