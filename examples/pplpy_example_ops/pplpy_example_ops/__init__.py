"""pplpy-example-ops: an out-of-tree pplpy plugin adding com.example::ScaledLeakyRelu.

pplpy imports this package through the ``pplpy.plugins`` entry point declared in
pyproject.toml.  Importing it runs the op's declaration:

    scaled_leaky_relu_param   the param dataclass                       (docs/add_op.md, step 1)
    scaled_leaky_relu_op      @op declaration, op context and kernel    (steps 2 and 3)
"""

from pplpy_example_ops import scaled_leaky_relu_op  # noqa: F401
from pplpy_example_ops.scaled_leaky_relu_param import DOMAIN

__all__ = ["DOMAIN"]
