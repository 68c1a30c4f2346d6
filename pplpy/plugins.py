"""Discovery of third-party op packages.

A package that adds ops declares an entry point in the group ``pplpy.plugins``; loading it
imports the module, whose ``@op`` / ``register_parser`` calls fill the registries.  So
``pip install someone-elses-ops`` is enough for pplnn to run their models.

Plugins are isolated from each other and from pplpy: a plugin that fails to import is
reported once as a ``PluginWarning`` naming it, and is remembered in ``failed_plugins()``;
models that do not need it still load (an UnsupportedOpError for an op it might have
provided mentions it).  Registrations a failing plugin made before it failed stay.
"""

import importlib.metadata
import warnings

ENTRY_POINT_GROUP = "pplpy.plugins"
_loaded = set()
_failed = {}  # (name, value) -> "ExcType: message"


class PluginWarning(UserWarning):
    """A pplpy plugin could not be imported; models that do not need it still work."""


def load_plugins():
    """Import every installed plugin once; returns the names of those loaded now.

    A plugin that raises while importing (any exception) is reported as a PluginWarning and
    skipped; it is tried once per process."""
    loaded_now = []
    try:
        entry_points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # noqa: BLE001 - broken metadata must not stop pplpy
        warnings.warn(f"pplpy could not list its plugins: {type(exc).__name__}: {exc}",
                      PluginWarning, stacklevel=2)
        return loaded_now
    for entry_point in entry_points:
        key = (entry_point.name, entry_point.value)
        if key in _loaded or key in _failed:
            continue
        try:
            entry_point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break pplpy
            _failed[key] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"pplpy plugin {entry_point.name!r} ({entry_point.value}) failed to import and "
                f"is skipped: {_failed[key]}; models that use its ops will report them as "
                f"unsupported", PluginWarning, stacklevel=2)
            continue
        _loaded.add(key)
        loaded_now.append(entry_point.name)
    return loaded_now


def failed_plugins():
    """{"name (module)": "ExcType: message"} for every plugin that failed to import."""
    return {f"{name} ({value})": why for (name, value), why in _failed.items()}


def loaded_plugins():
    """["name (module)"] for every plugin imported."""
    return sorted(f"{name} ({value})" for name, value in _loaded)
