"""examples/ray_batch/run.py on a local Ray instance (2 CPUs, 2 actors of one runtime each):
every output file equals a direct in-process ``rt.run`` of its sample; bad input files are
pplpy errors naming the file (listed with on_error="skip", raised with "raise").  One Ray
instance serves the module and is shut down after it."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import pplpy
from pplpy.data import DEMO_MODEL_PATH

# ray and pyarrow are in the test extra: a missing install fails here, loudly.
import pyarrow  # noqa: E402,F401
import ray  # noqa: E402

# Ray Data deep-copies its DataContext, whose __setattr__ warns about its own deprecated
# fields on every copy: Ray's noise, not this code's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

RUN = Path(__file__).resolve().parents[1] / "examples" / "ray_batch" / "run.py"
SAMPLE = (3, 32, 32)  # the demo model's input [1,3,32,32] without its batch dim
ACTORS = 2


def load_run_module():
    spec = importlib.util.spec_from_file_location("pplpy_ray_batch_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # run_batch ships it to the actors by value, by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_batch(tmp_path_factory):
    # Ray puts the driver's working directory first on its workers' sys.path: started from
    # the repository root, they would import the source tree's pplpy (no compiled kernels
    # after a plain `pip install .`) instead of the installed one this process uses.
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray_cwd"))
    try:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20,
                 log_to_driver=False)
    finally:
        os.chdir(cwd)
    try:
        yield load_run_module().run_batch
    finally:
        ray.shutdown()


def write_samples(folder, count, seed, shape=SAMPLE, prefix="s"):
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    samples = {}
    for i in range(count):
        stem = f"{prefix}{i:02d}"
        samples[stem] = rng.standard_normal(shape).astype(np.float32)
        np.save(folder / f"{stem}.npy", samples[stem])
    return samples


def direct(model, samples):
    """{stem: output} of the model run in this process on each sample alone."""
    rt = pplpy.load(model, num_threads=1)
    return {stem: rt.run({"image": x[None]})["probabilities"][0] for stem, x in samples.items()}


def free_dims_demo():
    """The demo model with its batch and spatial dims left free: an actor stacks the files
    of each shape into one run, and a file too small for the MaxPool is a ShapeError."""
    model = onnx.load(DEMO_MODEL_PATH)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, ("N", None, "H", "W")):
        if name:
            dim.dim_param = name
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model.SerializeToString()


def test_fixed_batch_model_with_bad_files_skipped(run_batch, tmp_path):
    """demo.onnx (batch fixed at 1: one run per sample) over 12 good files and three bad
    ones; outputs bit for bit equal to direct runs, each bad file reported by its path."""
    samples = write_samples(tmp_path / "in", 12, seed=1)
    bad = {
        "corrupt.npy": b"not a numpy file",
        "float64.npy": np.zeros(SAMPLE),
        "shape.npy": np.zeros((3, 16, 16), np.float32),
    }
    for name, content in bad.items():
        if isinstance(content, bytes):
            (tmp_path / "in" / name).write_bytes(content)
        else:
            np.save(tmp_path / "in" / name, content)
    failed = run_batch(DEMO_MODEL_PATH, str(tmp_path / "in"), str(tmp_path / "out"),
                       actors=ACTORS, batch_size=4, on_error="skip")
    assert sorted(os.path.basename(p) for p in failed) == sorted(bad)
    for path, message in failed.items():
        assert message.startswith(path), message
    assert "not a readable .npy file" in failed[str(tmp_path / "in" / "corrupt.npy")]
    assert "the file holds float64 [3, 32, 32]" in failed[str(tmp_path / "in" / "float64.npy")]
    assert "float32 [3,32,32]" in failed[str(tmp_path / "in" / "shape.npy")]
    expected = direct(DEMO_MODEL_PATH, samples)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{s}.npy" for s in samples)
    for stem, want in expected.items():
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{stem}.npy"), want)


def test_free_dims_model_stacks_batches_per_shape(run_batch, tmp_path):
    """Free batch and spatial dims: each actor call stacks its files of one shape into one
    run (batches of 8 over two shapes); outputs match the direct single-sample runs (a
    batched Gemm may round differently).  A 1x1 file fails shape inference in its run: the
    run is retried file by file and only that file is reported, under its path."""
    model = free_dims_demo()
    samples = write_samples(tmp_path / "in", 14, seed=2)
    samples.update(write_samples(tmp_path / "in", 6, seed=3, shape=(3, 16, 24), prefix="r"))
    tiny = tmp_path / "in" / "tiny.npy"
    np.save(tiny, np.ones((3, 1, 1), np.float32))
    failed = run_batch(model, str(tmp_path / "in"), str(tmp_path / "out"), actors=ACTORS,
                       batch_size=8, on_error="skip")
    assert list(failed) == [str(tiny)]
    assert failed[str(tiny)].startswith(f'{tiny}: node "pool1"'), failed
    expected = direct(model, samples)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{s}.npy" for s in samples)
    for stem, want in expected.items():
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"{stem}.npy"), want,
                                   rtol=1e-5, atol=1e-7)


def test_bad_file_raises_pplpy_error_naming_it(run_batch, tmp_path):
    write_samples(tmp_path / "in", 3, seed=4)
    bad = tmp_path / "in" / "wrong_dtype.npy"
    np.save(bad, np.zeros(SAMPLE, np.int64))
    with pytest.raises(pplpy.InputError, match=f"^{bad}: input \"image\" takes one sample "
                       r"of float32 \[3,32,32\].*holds int64"):
        run_batch(DEMO_MODEL_PATH, str(tmp_path / "in"), str(tmp_path / "out"),
                  actors=ACTORS, batch_size=2)


def test_bad_model_fails_on_the_driver(run_batch, tmp_path):
    """A model that is not ONNX is a ModelError before any actor starts."""
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"garbage")
    with pytest.raises(pplpy.ModelError):
        run_batch(str(path), str(tmp_path), str(tmp_path / "out"))
