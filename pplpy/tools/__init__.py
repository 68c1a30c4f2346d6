"""Command-line tools: ``pplnn`` (pplpy.tools.pplnn) runs, times and inspects a model."""
