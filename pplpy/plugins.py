"""Discovery of third-party op packages.

A package that adds ops declares an entry point in the group ``pplpy.plugins``; loading
it imports the module, whose ``register_parser`` / ``register_op`` calls fill the
registries.  So ``pip install someone-elses-ops`` is enough for pplnn to run their models.
"""

import importlib.metadata

from pplpy.errors import PplError

ENTRY_POINT_GROUP = "pplpy.plugins"
_loaded = set()


def load_plugins():
    """Import every installed plugin once; returns the names of those loaded now."""
    loaded_now = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (entry_point.name, entry_point.value)
        if key in _loaded:
            continue
        try:
            entry_point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not look like ours
            raise PplError(
                f"pplpy plugin {entry_point.name!r} ({entry_point.value}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        _loaded.add(key)
        loaded_now.append(entry_point.name)
    return loaded_now
