"""A binary model file's large initializers are read straight from the file into their
arrays (pplpy/models/onnx/weight_ranges.py): the same constants as onnx.load gives, whatever
the field order, and onnx.load itself wherever the scan meets wire data it does not
expect."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pplpy
from pplpy.models.onnx import model_parser, weight_ranges


@pytest.fixture(autouse=True)
def scan_small_files(monkeypatch):
    """These tests' files are small: scan them as the large files a user loads."""
    monkeypatch.setattr(weight_ranges, "MIN_FILE_BYTES", 0)


def test_small_files_go_to_onnx_load(tmp_path, monkeypatch):
    monkeypatch.setattr(weight_ranges, "MIN_FILE_BYTES", 1 << 30)
    model, _ = _model_with_many_weights(np.random.default_rng(8))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    scanned, loaded, inline = _constants_both_ways(path)
    assert inline == []
    _assert_same(scanned, loaded)


def _constants_both_ways(path):
    """(constants read with the scan, constants from onnx.load, the scan's ranges)."""
    inline = model_parser.InlineWeights()
    try:
        model = model_parser.load_model_proto(path, inline=inline)
        scanned, _ = model_parser.parse_model(model, inline_weights=inline)
    finally:
        inline.close()
    loaded, _ = model_parser.parse_model(onnx.load(path))
    return scanned.constants, loaded.constants, inline.ranges


def _assert_same(scanned, loaded):
    assert scanned.keys() == loaded.keys()
    for name in loaded:
        assert scanned[name].dtype == loaded[name].dtype, name
        assert scanned[name].shape == loaded[name].shape, name
        np.testing.assert_array_equal(scanned[name], loaded[name], err_msg=name)


def _model_with_many_weights(rng):
    """Initializers of every directly read type, above and below the scan's size threshold,
    a large Constant attribute (stays in the proto), doc strings and metadata around them."""
    arrays = {
        "f32": rng.standard_normal((64, 32)).astype(np.float32),
        "f32_small": rng.standard_normal(8).astype(np.float32),
        "f64": rng.standard_normal(1000),
        "f16": rng.standard_normal(3000).astype(np.float16),
        "i64": rng.integers(-2**40, 2**40, 700),
        "i8": rng.integers(-128, 127, 5000).astype(np.int8),
        "u16": rng.integers(0, 2**16, 2500).astype(np.uint16),
        "b": rng.random(6000) > 0.5,
        "u64": rng.integers(0, 2**63, 600, dtype=np.uint64),
        "empty": np.zeros((0, 4), np.float32),
    }
    big_constant = numpy_helper.from_array(rng.standard_normal(2000).astype(np.float32), "k")
    nodes = [helper.make_node("Constant", [], ["k"], value=big_constant),
             helper.make_node("Add", ["x", "f32"], ["y"], doc_string="x + f32")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 32]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2000])],
        [numpy_helper.from_array(a, name) for name, a in arrays.items()],
        doc_string="a graph with weights of many types")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="test", doc_string="model doc")
    helper.set_model_props(model, {"author": "pplpy"})
    return model, arrays


def test_the_scan_reads_what_onnx_load_reads(tmp_path):
    model, arrays = _model_with_many_weights(np.random.default_rng(0))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    scanned, loaded, inline = _constants_both_ways(path)
    _assert_same(scanned, loaded)
    left_in_file = {init.name for init, where in zip(model.graph.initializer, inline) if where}
    assert left_in_file == {name for name, a in arrays.items()
                            if a.nbytes >= weight_ranges.MIN_BYTES}
    rt = pplpy.load(path, num_threads=1)
    x = np.ones((64, 32), np.float32)
    out = rt.run({"x": x})
    np.testing.assert_array_equal(out["y"], x + arrays["f32"])
    np.testing.assert_array_equal(out["k"], numpy_helper.to_array(
        model.graph.node[0].attribute[0].t))


def _key(number, wire):
    return weight_ranges._varint(number << 3 | wire)


def _field(number, payload):
    return _key(number, 2) + weight_ranges._varint(len(payload)) + payload


def test_raw_data_before_the_type_and_fields_out_of_order(tmp_path):
    """Protobuf accepts fields in any order (and merges a message given in pieces): raw_data
    written before data_type and dims, and the initializer after the nodes."""
    w = np.arange(2048, dtype=np.float32)
    raw_first = TensorProto(raw_data=w.tobytes()).SerializeToString()
    rest = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2048]).SerializeToString()
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2048])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2048])])
    graph_bytes = graph.SerializeToString() + _field(5, raw_first + rest)
    model = helper.make_model(helper.make_graph([], "empty", [], []),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ClearField("graph")
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(_field(7, graph_bytes) + model.SerializeToString())
    scanned, loaded, inline = _constants_both_ways(path)
    assert inline[0] is not None
    _assert_same(scanned, loaded)
    np.testing.assert_array_equal(scanned["w"], w)
    out = pplpy.load(path, num_threads=1).run({"x": np.ones(2048, np.float32)})["y"]
    np.testing.assert_array_equal(out, w + 1)


def test_two_graph_fields_fall_back_to_onnx_load(tmp_path):
    """A second graph field is merged into the first by protobuf: the scan leaves such a
    file to onnx.load."""
    model, arrays = _model_with_many_weights(np.random.default_rng(1))
    extra = helper.make_graph([], "g", [], [], doc_string="merged")
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString() + _field(7, extra.SerializeToString()))
    scanned, loaded, inline = _constants_both_ways(path)
    assert inline == []
    _assert_same(scanned, loaded)


def test_a_text_format_model_is_read_by_onnx(tmp_path):
    model, arrays = _model_with_many_weights(np.random.default_rng(2))
    path = str(tmp_path / "m.textproto")
    onnx.save(model, path, format="textproto")
    rt = pplpy.load(path, num_threads=1)
    x = np.zeros((64, 32), np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], arrays["f32"])


def test_a_truncated_file_is_a_model_error(tmp_path):
    model, _ = _model_with_many_weights(np.random.default_rng(3))
    data = model.SerializeToString()
    path = tmp_path / "m.onnx"
    for cut in (len(data) // 2, len(data) - 3):
        path.write_bytes(data[:cut])
        with pytest.raises(pplpy.ModelError):
            pplpy.load(path)


def test_a_raw_data_length_that_disagrees_with_the_dims_is_a_model_error(tmp_path):
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1000],
                         raw_data=np.ones(1100, np.float32).tobytes())
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])], [tensor])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(pplpy.ModelError, match='initializer "w" cannot be decoded: its raw '
                                               r"data is 4400 bytes, but dims \[1000\]"):
        pplpy.load(path)


def test_a_file_replaced_while_its_weights_are_read_is_still_read_whole(tmp_path,
                                                                        monkeypatch):
    """The proto and the weights come from one open file: a model file replaced by another
    in the middle of the load (a deployment swapping models) gives the first model whole,
    never the first one's graph with the second one's weights."""
    first, arrays = _model_with_many_weights(np.random.default_rng(4))
    second, _ = _model_with_many_weights(np.random.default_rng(40))
    path = tmp_path / "m.onnx"
    onnx.save(first, str(path))
    read = model_parser._read_inline_array
    replaced = []

    def replace_then_read(init, file, offset, length):
        if not replaced:
            replaced.append(init.name)
            other = tmp_path / "other.onnx"
            onnx.save(second, str(other))
            os.replace(other, path)
        return read(init, file, offset, length)

    monkeypatch.setattr(model_parser, "_read_inline_array", replace_then_read)
    rt = pplpy.load(path, num_threads=1)
    assert replaced
    x = np.zeros((64, 32), np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], arrays["f32"])


def test_wire_data_protobuf_would_not_write_goes_to_onnx(tmp_path):
    """A key or length written longer than it needs, a tensor with segments, more fields
    than the scan decodes: onnx.load reads (or refuses) those files, as before the scan."""
    model, arrays = _model_with_many_weights(np.random.default_rng(6))
    body = model.SerializeToString()
    padded_key = bytes([0x3A | 0x80, 0x00])  # field 7, wire type 2, in two bytes
    assert body[0] != 0x3A  # ir_version comes first
    graph = model.graph.SerializeToString()
    rest = model.SerializeToString()
    model.ClearField("graph")
    rest = model.SerializeToString()
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(rest + padded_key + weight_ranges._varint(len(graph)) + graph)
    scanned, loaded, inline = _constants_both_ways(path)
    assert inline == []
    _assert_same(scanned, loaded)
    assert set(arrays) <= set(scanned)


def test_many_tiny_fields_leave_the_file_to_onnx(tmp_path, monkeypatch):
    """A valid file of very many tiny fields (ir_version repeated) is not walked field by
    field in Python past MAX_FIELDS: it goes to onnx.load."""
    model, _ = _model_with_many_weights(np.random.default_rng(7))
    monkeypatch.setattr(weight_ranges, "MAX_FIELDS", 1000)
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(b"\x08\x08" * 2000 + model.SerializeToString())
    scanned, loaded, inline = _constants_both_ways(path)
    assert inline == []
    _assert_same(scanned, loaded)


@pytest.mark.parametrize("seed", range(20))
def test_damaged_files_never_load_wrong_weights(tmp_path, seed):
    """A byte of the file changed at random: the load either fails with a ModelError or
    reads what onnx.load reads from the same bytes."""
    model, _ = _model_with_many_weights(np.random.default_rng(5))
    data = bytearray(model.SerializeToString())
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(bytes(data))
    inline = model_parser.InlineWeights()
    model_parser.load_model_proto(path, inline=inline)
    inline.close()
    weights = np.zeros(len(data), bool)  # the bytes the scan skips
    for offset, length in filter(None, inline.ranges):
        weights[offset:offset + length] = True
    rng = np.random.default_rng(seed)
    position = int(rng.choice(np.flatnonzero(~weights)))
    data[position] = int(rng.integers(0, 256))
    with open(path, "wb") as f:
        f.write(bytes(data))
    try:
        reference = onnx.load(path)
    except Exception:  # noqa: BLE001 - onnx refuses the damaged file: pplpy must too
        with pytest.raises(pplpy.ModelError):
            model_parser.read_model(path)
        return
    try:
        scanned, _ = model_parser.read_model(path)
    except (pplpy.ModelError, pplpy.UnsupportedOpError):
        return
    loaded, _ = model_parser.parse_model(reference)
    _assert_same(scanned.constants, loaded.constants)


def test_a_file_cut_short_while_scanned_is_left_to_onnx(tmp_path):
    """The scan reads with pread, not through a mapping: a file shorter than it was when
    its size was taken (cut by another process) ends the scan (None: onnx.load then says
    what is wrong) instead of a SIGBUS ending the process."""
    model, _ = _model_with_many_weights(np.random.default_rng(9))
    data = model.SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data[:len(data) // 2])
    with open(path, "rb") as f:
        assert weight_ranges.scan(f.fileno(), len(data), model_parser._DIRECT_TYPES) is None
