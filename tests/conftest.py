"""Fixtures shared by the tests."""

import importlib.util
import os
import sys

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


def pytest_terminal_summary(terminalreporter):
    """Print the ONNX conformance totals: node cases in onnx, cases run, passed, listed."""
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
               if "test_onnx_conformance.py::test_conformance[" in r.nodeid and r.when == "call"]
    if not reports:
        return
    module = next((m for m in list(sys.modules.values())
                   if getattr(m, "__file__", "") and m.__file__.endswith("test_onnx_conformance.py")),
                  None)
    if module is None:  # under pytest-xdist the workers ran it: this process never imported it
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_onnx_conformance.py")
        spec = importlib.util.spec_from_file_location("pplpy_tests_onnx_conformance", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    cases = {c.name for c in module.CASES}
    listed = cases & set(module.EXCLUDES)
    by_case = {}
    for report in reports:
        name = report.nodeid.split("[", 1)[1].rsplit("]", 1)[0].rsplit("-", 1)[0]
        by_case.setdefault(name, []).append(report.passed)
    passed = sum(1 for name, results in by_case.items()
                 if name not in listed and all(results))
    total = len([c for c in module.ALL_CASES if c.kind == "node"])
    refused = sum(1 for n in listed if n in by_case and all(by_case[n]))
    terminalreporter.write_line(
        f"ONNX conformance: {total} node cases in onnx {onnx.__version__}; {len(cases)} use "
        f"only ops pplpy registers; {len(listed)} of those are listed in EXCLUDES; in this run, "
        f"{passed} passed on every ISA tier and {refused} listed ones raised a pplpy error as "
        f"they should")
