"""pplpy-example-ops: an out-of-tree pplpy plugin adding com.example::ScaledLeakyRelu.

pplpy imports this package through the ``pplpy.plugins`` entry point declared in
pyproject.toml.  Importing it runs the registrations of its three layers:

    scaled_leaky_relu_param   param dataclass + register_parser    (step 1 of docs/add_op.md)
    scaled_leaky_relu_op      op context + register_op             (step 2)
    scaled_leaky_relu_kernel  kernel, numpy compute                (steps 3 and 4)
"""

from pplpy_example_ops import scaled_leaky_relu_op, scaled_leaky_relu_param  # noqa: F401

DOMAIN = scaled_leaky_relu_param.DOMAIN
__all__ = ["DOMAIN"]
