"""Packaging: the sdist carries every source the build needs, and a plugin's Cython kernel
builds against the public step ABI with pplpy's flags and runs as a compiled step."""

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD_SOURCES = (".py", ".pyx", ".pxi", ".pxd", ".h", ".onnx")


def tracked_sources():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare the sdist with")
    out = subprocess.run(["git", "ls-files", "pplpy"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return {p for p in out if p.endswith(BUILD_SOURCES)}


def test_sdist_carries_every_tracked_source(tmp_path):
    tracked = tracked_sources()
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)], cwd=ROOT,
                   check=True, capture_output=True)
    (archive,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        members = {"/".join(m.name.split("/")[1:]) for m in tar.getmembers() if m.isfile()}
    assert tracked <= members, sorted(tracked - members)
    assert not [m for m in members if m.endswith((".c", ".so"))]
    assert {"setup.py", "pyproject.toml", "README.md"} <= members


PLUGIN_PYX = '''
from pplpy.runtime.step cimport Step, new_step, ppl_partition

cdef struct NegateArgs:
    const float *x
    float *y
    Py_ssize_t n

cdef void negate_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const NegateArgs *args = <const NegateArgs *>a
    cdef Py_ssize_t begin, end, i
    ppl_partition(args.n, tid, nthreads, &begin, &end)
    for i in range(begin, end):
        args.y[i] = -args.x[i]

def make_negate_step(size_t x, size_t y, Py_ssize_t n):
    cdef Step step = new_step(negate_step, sizeof(NegateArgs), True)
    cdef NegateArgs *args = <NegateArgs *>step.args
    args.x = <const float *>x
    args.y = <float *>y
    args.n = n
    return step
'''


def test_plugin_cython_kernel_builds_with_the_public_helpers(tmp_path, save_model):
    (tmp_path / "negate_plugin").mkdir()
    (tmp_path / "negate_plugin" / "__init__.py").write_text("")
    (tmp_path / "negate_plugin" / "_negate.pyx").write_text(PLUGIN_PYX)
    (tmp_path / "setup.py").write_text(textwrap.dedent("""
        from setuptools import setup
        from pplpy.build import cythonize, extension
        setup(name="negate_plugin", packages=["negate_plugin"],
              ext_modules=cythonize([extension("negate_plugin._negate",
                                               ["negate_plugin/_negate.pyx"])]))
    """))
    import pplpy

    # The pplpy under test (installed, or built in place) must be the one the build imports.
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(pplpy.__file__).parents[1]))
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=tmp_path, capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        from negate_plugin import _negate
    finally:
        sys.path.remove(str(tmp_path))

    from onnx import TensorProto, helper

    from pplpy.common.data_format import DataFormat
    from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
    from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input
    from pplpy.runtime.step import PythonStep

    class NegateKernel(X86Kernel):
        def make_step(self, io):
            x, y = io.inputs[0], io.outputs[0]
            return _negate.make_negate_step(x.address, y.address, y.array.size)

    @op("test.packaging", "Negate", since=1)
    class NegateOp(X86OptKernel):
        formats = (DataFormat.NDARRAY, DataFormat.N16CX)
        infer_shape = same_shape_as_input
        select_format = follow_input_format

        def create_kernel(self):
            return NegateKernel(self)

    graph = helper.make_graph(
        [helper.make_node("Negate", ["x"], ["y"], domain="test.packaging")], "neg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 70000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("test.packaging", 1)])
    rt = pplpy.load(save_model(model), num_threads=2)
    x = np.random.default_rng(0).standard_normal((3, 70000)).astype(np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], -x)
    (step,) = rt._last.plan.steps
    assert not isinstance(step, PythonStep) and step.parallel
