"""Running a built model.

    RuntimeBuilder (parse, optimise, engine plan; shared constants)
        -> Runtime.run(feeds): shapes -> memory plan (one arena, live intervals) -> kernels

See builder.py for the build steps and runtime.py for one run.
"""

from pplpy.runtime.builder import RuntimeBuilder
from pplpy.runtime.runtime import Runtime
from pplpy.runtime.tensor import Tensor

__all__ = ["Runtime", "RuntimeBuilder", "Tensor"]
