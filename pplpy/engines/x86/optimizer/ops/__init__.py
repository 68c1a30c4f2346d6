"""Op contexts, grouped by domain.  Importing this package registers them all."""

from pplpy.engines.x86.optimizer.ops import onnx, pplpy_ops  # noqa: F401
