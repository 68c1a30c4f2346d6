"""Op contexts of the pplpy domain (nodes the engine inserts).  Every module here is imported by scanning the package,
so a new op file needs no edit elsewhere."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
