"""Fixtures shared by the tests."""

import onnx
import pytest


@pytest.fixture
def save_model(tmp_path):
    """save_model(model) -> path of the model written into the test's tmp folder."""
    counter = iter(range(1000))

    def save(model):
        path = tmp_path / f"model_{next(counter)}.onnx"
        onnx.save(model, path)
        return str(path)

    return save
