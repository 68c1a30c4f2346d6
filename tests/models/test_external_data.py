"""Weights in external data files: read straight into their arrays, checked, and held once.

A model's own initializers are read from their files into numpy arrays without passing
through the ModelProto (onnx's loader put every weight in the proto first: twice the weights
at the load's peak, and protobuf killed the process with SIGSEGV where that copy did not
fit); each raw weight is dropped once its last reader packed it.  Tensors elsewhere (node
attributes, If / Loop / Scan bodies) are small and go through onnx's loader, after the same
check that their files stay in the model's folder.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pplpy


def _external(tensor_name, data_type, dims, location, offset=0, length=None):
    """A TensorProto that says its data is in ``location`` at ``offset``."""
    tensor = TensorProto()
    tensor.name, tensor.data_type = tensor_name, data_type
    tensor.dims.extend(dims)
    tensor.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if length is not None:
        entries.append(("length", str(length)))
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _add_model(folder, weight, x_type=TensorProto.FLOAT, n=4):
    """m.onnx in ``folder``: y = x + w, w the TensorProto ``weight``."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", weight.name], ["y"])], "g",
        [helper.make_tensor_value_info("x", x_type, [n])],
        [helper.make_tensor_value_info("y", x_type, [n])], [weight])
    path = os.path.join(folder, "m.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def test_weights_at_an_offset_are_read_into_the_array(tmp_path):
    data = np.arange(6, dtype=np.float32)
    (tmp_path / "w.bin").write_bytes(b"\x00" * 12 + data.tobytes() + b"tail")
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [6], "w.bin", offset=12,
                                               length=24), n=6)
    rt = pplpy.load(path, num_threads=1)
    np.testing.assert_array_equal(rt.run({"x": np.ones(6, np.float32)})["y"], data + 1)


@pytest.mark.parametrize("dtype,onnx_type", [(np.int64, TensorProto.INT64),
                                             (np.float64, TensorProto.DOUBLE)])
def test_external_weights_of_other_types(tmp_path, dtype, onnx_type):
    """int64 as it is; float64 cast to float32 at load when asked (the cast reads the
    array, the proto holds no values)."""
    data = np.array([1, -2, 3, 40], dtype)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    path = _add_model(str(tmp_path), _external("w", onnx_type, [4], "w.bin"), onnx_type)
    if onnx_type == TensorProto.DOUBLE:
        rt = pplpy.load(path, num_threads=1, cast_to_float32=True)
        x = np.ones(4, np.float32)
    else:
        rt = pplpy.load(path, num_threads=1)
        x = np.ones(4, dtype)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], (data + 1).astype(x.dtype))


def test_a_type_numpy_lays_out_otherwise_goes_through_onnx(tmp_path):
    """bfloat16 (no numpy type of its own) is decoded by onnx's reader, then refused as a
    type pplpy does not compute in, naming its reader: not read as 2-byte integers."""
    bf16 = (np.array([1.5, -2.0], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    (tmp_path / "w.bin").write_bytes(bf16.tobytes())
    weight = _external("w", TensorProto.BFLOAT16, [2], "w.bin")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Add", ["x", "wf"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [weight])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(pplpy.UnsupportedOpError,
                       match='initializer "w" is BFLOAT16, .* read by node "cast"'):
        pplpy.load(path, num_threads=1)


def test_a_length_that_disagrees_with_the_dims_is_a_model_error(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.ones(8, np.float32).tobytes())
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w.bin", length=32))
    with pytest.raises(pplpy.ModelError, match=r'tensor "w": its external data is 32 bytes '
                                               r"long, but dims \[4\] of FLOAT take 16"):
        pplpy.load(path)


def test_a_file_too_short_is_a_model_error_before_anything_is_allocated(tmp_path):
    """A file shorter than the tensor says is refused from its size: a 1 TiB tensor in a
    16-byte file is not allocated first."""
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w.bin", offset=4))
    with pytest.raises(pplpy.ModelError, match="bytes 4 to 20 of 'w.bin', which has 16 bytes"):
        pplpy.load(path)
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [1 << 38], "w.bin"),
                      n=1 << 38)
    with pytest.raises(pplpy.ModelError, match="which has 16 bytes"):
        pplpy.load(path)


def test_a_model_proto_with_external_references_is_a_model_error(tmp_path):
    """The backend API takes a ModelProto: its external weights have no folder to come
    from (onnx's decoder would have read them relative to the working directory)."""
    from pplpy import backend

    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    model = onnx.load(_add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w.bin")),
                      load_external_data=False)
    with pytest.raises(pplpy.ModelError, match='initializer "w" uses external data'):
        backend.prepare(model)


def _if_model(folder, location):
    """y = If(c) then (x + w) else x, w an initializer of the then-branch with its data at
    ``location``."""
    weight = _external("w", TensorProto.FLOAT, [4], location)
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])], [weight])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch,
                          else_branch=else_branch)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_a_body_initializer_outside_the_folder_is_refused(tmp_path):
    """pplpy's folder check now walks every graph: a location in an If branch was refused
    by onnx's own reader only (a ModelError about reading the data, not about the folder);
    one inside the folder loads and runs."""
    folder = tmp_path / "models"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.full(4, 7, np.float32).tobytes())
    with pytest.raises(pplpy.ModelError, match="'../secret.bin' is outside the model's folder"):
        pplpy.load(_if_model(str(folder), "../secret.bin"))
    (folder / "w.bin").write_bytes(np.full(4, 2, np.float32).tobytes())
    rt = pplpy.load(_if_model(str(folder), "w.bin"), num_threads=1)
    out = rt.run({"c": np.array(True), "x": np.ones(4, np.float32)})["y"]
    np.testing.assert_array_equal(out, np.full(4, 3, np.float32))


def test_packed_weights_drop_their_raw_data_as_each_kernel_is_made(tmp_path):
    """create_kernels drops a weight once its last reader packed it (the load held every
    raw weight until all kernels were made: the model's weights twice at the peak)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(3)]
    nodes, x = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        x = f"h{i}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 16])],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    path, save_as_external_data=True, location="w.bin", size_threshold=0)
    log = {}

    def on_pass(name, state):
        if name in ("create_kernels", "release_raw_weights"):
            log[name] = state.log[-1][1]

    builder = pplpy.RuntimeBuilder.from_onnx(str(path), engines=[pplpy.X86Engine(num_threads=1)],
                                             on_pass=on_pass)
    assert log == {"create_kernels": "3 kernels, 3 raw weights released",
                   "release_raw_weights": "0 more raw weights released"}
    a = rng.standard_normal((4, 16)).astype(np.float32)
    out = builder.create_runtime().run({"x": a})[x]
    np.testing.assert_allclose(out, a @ weights[0] @ weights[1] @ weights[2], rtol=1e-5,
                               atol=1e-5)


_LOAD_UNDER_A_LIMIT = r"""
import os, resource, sys
import pplpy

def vm_size():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

spare = int(float(sys.argv[2]) * (1 << 30))
limit = vm_size() + spare
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    bytearray(spare + (1 << 30))
    print("limit not enforced")
except MemoryError:
    pass
try:
    rt = pplpy.load(os.path.join(sys.argv[1], "m.onnx"), num_threads=1)
except pplpy.ModelError as exc:
    print("ModelError:", exc)
else:
    print("weights", rt.memory()["weights"])
"""


def test_external_weights_are_held_once_while_they_load(tmp_path):
    """1 GiB of external weights (a sparse file: no disk) under an address-space limit of
    1.25 GiB more than the process has: reading them through the ModelProto needed the
    bytes twice and protobuf's failed allocation ended the process with SIGSEGV; now they
    load.  With 0.25 GiB to spare the load is a ModelError that says out of memory, and the
    process lives on."""
    n = 1 << 28
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(4 * n)
    _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [n], "w.bin"), n=n)
    results = {}
    for spare in ("1.25", "0.25"):
        done = subprocess.run([sys.executable, "-c", _LOAD_UNDER_A_LIMIT, str(tmp_path), spare],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        results[spare] = done.stdout
    assert results["1.25"].splitlines()[-1] == f"weights {4 * n}"
    if "limit not enforced" not in results["0.25"]:
        assert results["0.25"].startswith(
            'ModelError: initializer "w": cannot read its external data: out of memory')


def _swap_after_the_check(monkeypatch, swap):
    """Run ``swap()`` right after pplpy's folder check passed (another process replacing
    the data file in that window)."""
    from pplpy.models.onnx import model_parser

    check = model_parser.check_external_data

    def check_then_swap(model, base_dir):
        files = check(model, base_dir)
        swap()
        return files

    monkeypatch.setattr(model_parser, "check_external_data", check_then_swap)


def test_a_data_file_swapped_for_a_link_after_the_check_is_not_read(tmp_path, monkeypatch):
    """The file is checked again once open: a link to a file outside the folder, put in
    place after the path was checked, was read (the secret came out as the weights)."""
    folder = tmp_path / "models"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.full(4, 7, np.float32).tobytes())
    (folder / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    path = _add_model(str(folder), _external("w", TensorProto.FLOAT, [4], "w.bin"))

    def swap():
        os.remove(folder / "w.bin")
        os.symlink(tmp_path / "secret.bin", folder / "w.bin")

    _swap_after_the_check(monkeypatch, swap)
    with pytest.raises(pplpy.ModelError, match="cannot open 'w.bin' .*not a link"):
        pplpy.load(path)


def test_a_data_file_swapped_for_a_fifo_does_not_block_the_load(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w.bin"))

    def swap():
        os.remove(tmp_path / "w.bin")
        os.mkfifo(tmp_path / "w.bin")

    _swap_after_the_check(monkeypatch, swap)
    with pytest.raises(pplpy.ModelError, match="'w.bin' is not a regular file"):
        pplpy.load(path)


def test_links_and_nul_bytes_in_locations_are_model_errors(tmp_path):
    """A link inside the folder is refused as onnx's reader refuses it; a NUL byte in a
    location was an InternalError from os.path (ValueError: embedded null byte)."""
    (tmp_path / "real.bin").write_bytes(np.ones(4, np.float32).tobytes())
    os.symlink(tmp_path / "real.bin", tmp_path / "w.bin")
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w.bin"))
    with pytest.raises(pplpy.ModelError, match="not a link"):
        pplpy.load(path)
    path = _add_model(str(tmp_path), _external("w", TensorProto.FLOAT, [4], "w\x00.bin"))
    with pytest.raises(pplpy.ModelError, match="holds a NUL byte"):
        pplpy.load(path)
