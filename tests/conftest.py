"""Fixtures shared by the tests."""

import onnx
import pytest

from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES


@pytest.fixture
def save_model(tmp_path):
    """save_model(model) -> path of the model written into the test's tmp folder."""
    counter = iter(range(1000))

    def save(model):
        path = tmp_path / f"model_{next(counter)}.onnx"
        onnx.save(model, path)
        return str(path)

    return save


@pytest.fixture(params=ISA_NAMES)
def isa(request):
    """Each ISA tier; a tier this CPU lacks is skipped with that reason."""
    if request.param not in supported_isas():
        pytest.skip(f"CPU lacks {request.param}")
    return request.param
