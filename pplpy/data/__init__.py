"""Data files shipped inside the pplpy package.

``DEMO_MODEL_PATH`` is a small CNN (``demo.onnx``) that ``pplnn`` runs when it is given no
``--onnx-model``; ``demo_model.build_demo_model()`` builds it, and
``python -m pplpy.data.demo_model`` rewrites the file.
"""

import os

DEMO_MODEL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.onnx")

__all__ = ["DEMO_MODEL_PATH"]
