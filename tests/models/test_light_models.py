"""The model-zoo networks shipped in the onnx wheel (onnx/backend/test/data/light), through
``pplpy.load`` and ``pplnn``, against their shipped outputs.

The inputs follow onnx's own backend runner for these files: every non-initializer input
is ``arange(n).reshape(shape) / n`` in float32.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import pplpy

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
PPLPY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pplpy.__file__)))
MODELS = [
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
    "squeezenet", "vgg19", "zfnet512",
]


def dummy_input(shape):
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def expected_output(name):
    tensor = onnx.TensorProto()
    with open(os.path.join(LIGHT, f"light_{name}_output_0.pb"), "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


@pytest.mark.parametrize("name", MODELS)
def test_light_model(name):
    rt = pplpy.load(os.path.join(LIGHT, f"light_{name}.onnx"), num_threads=2)
    feeds = {t.name: dummy_input(t.dims) for t in rt.inputs}
    (output,) = rt.run(feeds).values()
    np.testing.assert_allclose(output, expected_output(name), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_light_model_through_pplnn(name, tmp_path):
    """pplnn runs the model on a raw input file and saves an output equal to the expected."""
    model = os.path.join(LIGHT, f"light_{name}.onnx")
    rt = pplpy.load(model)
    (tensor,) = rt.inputs
    path = tmp_path / "input.bin"
    dummy_input(tensor.dims).tofile(path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "pplpy.tools.pplnn", "--onnx-model", model, "--inputs",
         str(path), "--save-outputs", "--save-data-dir", str(out_dir)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PPLPY_ROOT},  # the pplpy under test, built or installed
    )
    assert result.returncode == 0, result.stderr
    (saved,) = list(out_dir.iterdir())
    expected = expected_output(name)
    got = np.fromfile(saved, dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)
