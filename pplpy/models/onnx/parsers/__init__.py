"""Parser registrations, one module per op family.  Every module in this package is imported
by scanning it, so adding a file here needs no edit elsewhere."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
