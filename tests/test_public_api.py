"""pplpy's public behaviour through pplpy.load / RuntimeBuilder / Runtime: results, dynamic
shapes, shared builds, threads, memory planning, reorders, and every error class."""

import os
import threading

import numpy as np
import onnx
import pytest
from onnx_builders import FLOAT, INT64, ISAS, make_model
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
from pplpy.engines.x86.impls.post_ops import PostOp, eltwise
from pplpy.common.data_format import DataFormat

RNG = np.random.default_rng(7)


def conv_model(batch="N"):
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Softmax", ["r"], ["l"], axis=1),  # NDARRAY-only: forces a reorder
        helper.make_node("MaxPool", ["l"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    return make_model(nodes, [("x", FLOAT, [batch, 3, 8, 8])], [("y", FLOAT, None)],
                      [("w", w), ("b", b)])


@pytest.mark.parametrize("isa", ISAS)
def test_load_and_run_matches_reference(isa, save_model):
    model = conv_model()
    rt = pplpy.load(save_model(model), max_isa=isa)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = rt.run({"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert rt.input_names == ["x"] and rt.output_names == ["y"]
    assert rt.input_shapes == {"x": ("N", 3, 8, 8)}


def test_reorders_are_inserted_between_formats(save_model):
    rt = pplpy.load(save_model(conv_model()), fusion=False)
    kinds = [(n.op_type, str(rt.formats[n.outputs[0]])) for n in rt.graph.nodes]
    # The 3-channel Conv reads the NDARRAY input itself and writes N16CX; back to NDARRAY
    # for Softmax; MaxPool follows it.
    assert kinds == [("Conv", "n16cx"), ("Relu", "n16cx"),
                     ("Reorder", "ndarray"), ("Softmax", "ndarray"), ("MaxPool", "ndarray")]


def test_fusion_folds_relu_into_the_conv_and_matches_unfused(save_model):
    path = save_model(conv_model())
    fused, unfused = pplpy.load(path), pplpy.load(path, fusion=False)
    # The 3-channel conv reads the NCHW input itself: no Reorder in front of it.
    assert [n.op_type for n in fused.graph.nodes] == ["Conv", "Reorder", "Softmax", "MaxPool"]
    (conv,) = [n for n in fused.graph.nodes if n.op_type == "Conv"]
    assert fused.result.ops[conv].post_ops == [eltwise(PostOp.RELU, 0.0, 0.0)]
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(fused.run({"x": x})["y"], unfused.run({"x": x})["y"],
                               rtol=1e-5, atol=1e-6)


def test_dynamic_batch_reinfers_shapes(save_model):
    model = conv_model()
    rt = pplpy.load(save_model(model))
    ref = ReferenceEvaluator(model)
    for batch in (1, 3, 1):
        x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        got = rt.run({"x": x})["y"]
        assert got.shape == (batch, 8, 4, 4)
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_memory_plan_shares_buffers(save_model):
    # A chain of 6 Relus on 1 MB tensors: only two intermediates are alive at once.
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(6)]
    model = make_model(nodes, [("t0", FLOAT, [256, 1024])], [("t6", FLOAT, None)])
    rt = pplpy.load(save_model(model))
    rt.run({"t0": np.ones((256, 1024), np.float32)})
    one = 256 * 1024 * 4
    assert one * 2 <= rt.memory_bytes < one * 3


def test_builder_runtimes_share_kernels_and_run_on_threads(save_model):
    model = conv_model()
    builder = pplpy.RuntimeBuilder.from_onnx(save_model(model),
                                             engines=[pplpy.X86Engine(num_threads=1)])
    runtimes = [builder.create_runtime() for _ in range(2)]
    assert runtimes[0].result is runtimes[1].result  # packed weights built once
    ref = ReferenceEvaluator(model)
    inputs = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    results, errors = [None, None], []

    def work(i):
        try:
            for _ in range(5):
                results[i] = runtimes[i].run({"x": inputs[i]})["y"]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        np.testing.assert_allclose(results[i], ref.run(None, {"x": inputs[i]})[0],
                                   rtol=1e-4, atol=1e-5)


def test_outputs_are_not_overwritten_by_later_runs(save_model):
    rt = pplpy.load(save_model(conv_model()))
    a = rt.run({"x": np.ones((1, 3, 8, 8), np.float32)})["y"]
    kept = a.copy()
    rt.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    np.testing.assert_array_equal(a, kept)


def test_max_isa_env_and_invalid_value(monkeypatch):
    monkeypatch.setenv("PPLPY_MAX_ISA", "sse")
    assert pplpy.X86Engine().options.isa == "sse"
    monkeypatch.delenv("PPLPY_MAX_ISA")
    with pytest.raises(pplpy.PplError, match="choose one of avx512, fma, sse"):
        pplpy.X86Engine(max_isa="neon")


def test_custom_pass_pipeline_from_yaml(save_model, tmp_path):
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    path = save_model(make_model(nodes, [("x", FLOAT, [4])], [("y", FLOAT, None)]))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("- {pass: dead_code_elimination, convergence: once}\n")
    from pplpy.optimizer import load_pipeline

    rt = pplpy.load(path, passes=load_pipeline(pipeline))
    assert [n.op_type for n in rt.graph.nodes] == ["Identity", "Relu"]  # identity kept
    assert [n.op_type for n in pplpy.load(path).graph.nodes] == ["Relu"]
    pipeline.write_text("- {pass: no_such_pass}\n")
    with pytest.raises(pplpy.PplError, match="unknown pass 'no_such_pass'"):
        load_pipeline(pipeline)


# -- errors --------------------------------------------------------------------------------


def test_model_error_for_missing_and_garbage_files(tmp_path):
    with pytest.raises(pplpy.ModelError, match="does not exist"):
        pplpy.load(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xff not a protobuf \x12\x34")
    with pytest.raises(pplpy.ModelError):
        pplpy.load(bad)


def test_model_error_for_external_data_outside_the_folder(tmp_path):
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", FLOAT, [4])],
                       [("y", FLOAT, None)], [("w", np.ones(4, np.float32))])
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../secret.bin"
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(pplpy.ModelError, match="outside the model's folder"):
        pplpy.load(path)
    entry.value = "weights.bin"
    (folder / "weights.bin").write_bytes(np.full(4, 2, np.float32).tobytes())
    path.write_bytes(model.SerializeToString())
    out = pplpy.load(path).run({"x": np.ones(4, np.float32)})["y"]
    np.testing.assert_array_equal(out, np.full(4, 3, np.float32))


def test_unsupported_op_error_lists_every_node(save_model):
    nodes = [
        helper.make_node("StringNormalizer", ["x"], ["a"], name="strnorm"),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Frobnicate", ["b"], ["y"], domain="com.example", name="frob"),
    ]
    model = make_model(nodes, [("x", FLOAT, [4])], [("y", FLOAT, None)],
                       extra_opsets=[("com.example", 3)])
    with pytest.raises(pplpy.UnsupportedOpError) as info:
        pplpy.load(save_model(model))
    message = str(info.value)
    assert ('ai.onnx::StringNormalizer opset 13: 1 node(s) ("strnorm"): op not supported'
            in message)
    assert 'com.example::Frobnicate opset 3: 1 node(s) ("frob"): op not supported' in message
    assert [n[0] for n in info.value.nodes] == ["strnorm", "frob"]


def test_unsupported_ops_are_grouped_with_counts_and_say_what_is_missing(save_model):
    nodes = [helper.make_node("GlobalLpPool", [f"t{i}"], [f"t{i + 1}"], name=f"neg{i}")
             for i in range(500)]
    nodes.append(helper.make_node("Relu", ["t500"], ["y"], name="relu_at_5"))
    model = make_model(nodes, [("t0", FLOAT, [4])], [("y", FLOAT, None)], opset=5)
    with pytest.raises(pplpy.UnsupportedOpError) as info:
        pplpy.load(save_model(model))
    lines = str(info.value).splitlines()
    assert len(lines) == 3, lines  # the header, one line per op: not 501 lines
    assert 'ai.onnx::GlobalLpPool opset 5: 500 node(s) ("neg0", "neg1", "neg2" and 497 more): op not ' \
           'supported' in lines[1]
    assert lines[2].startswith('  ai.onnx::Relu opset 5: 1 node(s) ("relu_at_5"): opset 5 not '
                               'supported (supported opsets: 6-')
    assert len(info.value.nodes) == 501


def test_float64_is_refused_at_load_unless_cast(save_model):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", onnx.TensorProto.DOUBLE, [4])], [("y", onnx.TensorProto.DOUBLE, None)])
    path = save_model(model)
    with pytest.raises(pplpy.UnsupportedOpError,
                       match='input "x" is float64.*cast_to_float32=True'):
        pplpy.load(path)
    rt = pplpy.load(path, cast_to_float32=True)
    out = rt.run({"x": np.array([-1, 2, -3, 4], np.float32)})["y"]
    np.testing.assert_array_equal(out, [0, 2, 0, 4])
    # A Cast to float64 inside the model casts to float32 too (it made float64 again).
    model = make_model([helper.make_node("Cast", ["x"], ["d"], to=onnx.TensorProto.DOUBLE),
                        helper.make_node("Relu", ["d"], ["y"])],
                       [("x", FLOAT, [4])], [("y", onnx.TensorProto.DOUBLE, None)])
    rt = pplpy.load(save_model(model), cast_to_float32=True)
    out = rt.run({"x": np.array([-1, 2, -3, 4], np.float32)})["y"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0, 2, 0, 4])


def test_shape_error_names_node_and_shapes(save_model):
    model = make_model([helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")],
                       [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       [("w", np.ones((5, 4), np.float32))])
    with pytest.raises(pplpy.ShapeError, match=r'node "fc" .*inner dims differ.*\[2, 3\], \[5, 4\]'):
        pplpy.load(save_model(model))


def test_shape_error_at_run_time_for_incompatible_feeds(save_model):
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       [("a", FLOAT, ["n"]), ("b", FLOAT, ["m"])], [("y", FLOAT, None)])
    rt = pplpy.load(save_model(model))
    with pytest.raises(pplpy.ShapeError, match='node "add".*cannot be broadcast'):
        rt.run({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})
    # The runtime still works afterwards.
    out = rt.run({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})["y"]
    np.testing.assert_array_equal(out, np.full(3, 2, np.float32))


def test_input_errors(save_model):
    rt = pplpy.load(save_model(conv_model(batch=1)))
    x = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(pplpy.InputError, match=r"unknown input\(s\) \['z'\]"):
        rt.run({"x": x, "z": x})
    with pytest.raises(pplpy.InputError, match=r"missing input\(s\) \['x'\]"):
        rt.run({})
    with pytest.raises(pplpy.InputError,
                       match=r'input "x": expected float32 \[1,3,8,8\], got float16'):
        rt.run({"x": x.astype(np.float16)})
    with pytest.raises(pplpy.InputError, match=r'input "x": expected rank 4 shape \[1,3,8,8\], '
                                               r"got rank 3 shape \[1, 3, 8\]"):
        rt.run({"x": np.zeros((1, 3, 8), np.float32)})
    with pytest.raises(pplpy.InputError, match="expected shape"):
        rt.run({"x": np.zeros((2, 3, 8, 8), np.float32)})
    with pytest.raises(pplpy.InputError, match="dict"):
        rt.run([x])
    with pytest.raises(pplpy.InputError, match="output_names must be a list"):
        rt.run({"x": x}, output_names=5)


def test_a_feed_too_big_to_copy_is_an_input_error(save_model):
    """A non-contiguous feed is copied to C order before the run: out of memory there is
    the feed's error, and the runtime runs on."""
    rt = pplpy.load(save_model(make_model([helper.make_node("Relu", ["x"], ["y"])],
                                          [("x", FLOAT, ["N", 4])], [("y", FLOAT, None)])))
    with pytest.raises(pplpy.InputError, match='input "x": out of memory'):
        rt.run({"x": np.broadcast_to(np.float32(1), (1 << 40, 4))})  # 16 TiB
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.maximum(x, 0))


@pytest.fixture
def one_mib_container(tmp_path, monkeypatch):
    """The process as if in a container allowed 1 MiB (a cgroup v2 memory.max file)."""
    from pplpy.runtime import memory_limit
    (tmp_path / "memory.max").write_text("1048576\n")
    monkeypatch.setattr(memory_limit, "_cgroup_dirs", lambda: [(str(tmp_path), True)])
    memory_limit.usable_memory_bytes.cache_clear()
    yield
    memory_limit.usable_memory_bytes.cache_clear()


def test_memory_limit_reads_every_cgroup_on_the_way_up(tmp_path, monkeypatch):
    """The lowest limit of the process's cgroup and those above it counts (a systemd scope's
    MemoryMax=, a container without a cgroup namespace of its own), swap added where a
    cgroup allows it; "max" sets none; the machine's RAM and swap cap it all."""
    from pplpy.runtime import memory_limit

    monkeypatch.setattr(memory_limit, "_CGROUP_ROOT", str(tmp_path))
    proc = ["12:cpu,cpuacct:/x", "4:memory:/docker/abc", "0::/system.slice/app.scope"]
    dirs = memory_limit._cgroup_dirs(proc)
    want = [("", True), ("memory", False), ("memory/docker/abc", False),
            ("memory/docker", False), ("system.slice/app.scope", True), ("system.slice", True)]
    assert dirs == [(str(tmp_path / folder) if folder else str(tmp_path), v2)
                    for folder, v2 in want]

    def want_root(root):
        return [(str(root), True), (str(root / "memory"), False)]
    for folder, text in [("", "max"), ("system.slice", "max"),
                         ("system.slice/app.scope", "3000000")]:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "memory.max").write_text(text + "\n")
    swap = 500000  # the machine's
    # no swap limit of its own: it may use all of the machine's
    assert memory_limit._cgroup_limit(dirs, swap) == 3500000
    (tmp_path / "system.slice/app.scope/memory.swap.max").write_text("max\n")
    assert memory_limit._cgroup_limit(dirs, swap) == 3500000
    (tmp_path / "system.slice/app.scope/memory.swap.max").write_text("100000\n")
    assert memory_limit._cgroup_limit(dirs, swap) == 3100000
    (tmp_path / "memory/docker/abc").mkdir(parents=True)
    (tmp_path / "memory/docker/abc/memory.limit_in_bytes").write_text("2000000\n")
    assert memory_limit._cgroup_limit(dirs, swap) == 2500000
    (tmp_path / "memory/docker/abc/memory.memsw.limit_in_bytes").write_text("2200000\n")
    assert memory_limit._cgroup_limit(dirs, swap) == 2200000
    assert memory_limit._cgroup_limit([(str(tmp_path), True)], swap) is None  # "max" only
    (tmp_path / "memory.max").write_text("9" * 5000)  # past int()'s digit limit: no limit
    assert memory_limit._cgroup_limit([(str(tmp_path), True)], swap) > 1 << 60
    # a path outside the namespace's root names no folder here
    assert memory_limit._cgroup_dirs(["0::/../other"]) == want_root(tmp_path)
    # sysconf answering -1 (not known) is no limit, not a limit of one byte
    monkeypatch.setattr(os, "sysconf", lambda name: -1)
    assert memory_limit._machine_memory() is None


def test_sizes_over_the_memory_there_is_are_refused_before_allocating(save_model,
                                                                      one_mib_container):
    """Where the host overcommits, allocating more than the machine holds succeeds and the
    process is killed when the pages are touched (a test worker died so on the 16-core
    machine's sandbox): pplpy refuses such sizes up front, naming the container's limit."""
    rt_path = save_model(make_model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [("x", FLOAT, ["N", 4])], [("y", FLOAT, None)]))
    rt = pplpy.load(rt_path)
    wide = np.ones((4, 1 << 17), np.float32)  # 2 MiB, its transpose not contiguous
    with pytest.raises(pplpy.InputError, match=r'input "x": out of memory copying .*2097152 '
                       r"bytes, more than the 1048576 bytes of memory"):
        rt.run({"x": wide.T})
    with pytest.raises(pplpy.ShapeError, match=r'value "x" would take 2097152 bytes .*more '
                       r"than the 1048576 bytes"):
        rt.run({"x": np.ones((1 << 17, 4), np.float32)})
    # 480 KiB a value, but x, a and b live at once
    with pytest.raises(pplpy.ShapeError, match=r"values live at once would take \d+ bytes: "
                       r"more than the 1048576"):
        rt.run({"x": np.ones((30720, 4), np.float32)})
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    np.testing.assert_array_equal(rt.run({"x": x.T.copy().T})["y"], np.maximum(x, 0) - x)
    # every value its own memory: the sum of all of them counts, and the message says so
    perf = pplpy.load(rt_path, mm_policy="perf")
    with pytest.raises(pplpy.ShapeError, match=r'values of the run \(mm_policy "perf"'):
        perf.run({"x": np.ones((30720, 4), np.float32)})


def test_bad_load_options_are_pplpy_errors(save_model, tmp_path):
    path = save_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", FLOAT, [4])],
                                 [("y", FLOAT, None)]))
    with pytest.raises(pplpy.PplError, match="plan_cache_size must be a whole number"):
        pplpy.load(path, plan_cache_size="x")
    binary = tmp_path / "p.yaml"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(pplpy.PplError, match="cannot read pass pipeline") as info:
        pplpy.load(path, passes=str(binary))
    assert not isinstance(info.value, pplpy.InternalError)
    with pytest.raises(pplpy.PplError, match="YAML file's path or a list"):
        pplpy.load(path, passes=0)  # not stdin's file descriptor
    for bad in (0, 10 ** 6):  # a million threads took minutes to make
        with pytest.raises(pplpy.PplError, match="num_threads must be between 1 and 1024"):
            pplpy.load(path, num_threads=bad)
    with pytest.raises(pplpy.PplError, match="num_threads must be a whole number"):
        pplpy.load(path, num_threads="two")


def test_in_shapes_fix_free_dims_and_are_checked(save_model):
    path = save_model(conv_model())
    rt = pplpy.load(path, in_shapes={"x": (4, 3, 8, 8)})
    assert rt.run({"x": np.zeros((4, 3, 8, 8), np.float32)})["y"].shape == (4, 8, 4, 4)
    with pytest.raises(pplpy.InputError, match="does not fit"):
        pplpy.load(path, in_shapes={"x": (4, 3, 9, 9)})
    with pytest.raises(pplpy.InputError, match="unknown input"):
        pplpy.load(path, in_shapes={"nope": (1,)})
    with pytest.raises(pplpy.InputError, match="in_shapes must be integers"):
        pplpy.load(path, in_shapes={"x": (1.5, 3, 8, 8)})  # not truncated to 1
    with pytest.raises(pplpy.InputError, match="pplpy's limit for one tensor"):
        pplpy.load(path, in_shapes={"x": (1 << 40, 3, 8, 8)})


def test_reshape_shape_fed_at_run_time(save_model):
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [("x", FLOAT, [2, 6]), ("s", INT64, [2])], [("y", FLOAT, None)])
    rt = pplpy.load(save_model(model))
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert rt.run({"x": x, "s": np.array([3, 4])})["y"].shape == (3, 4)
    assert rt.run({"x": x, "s": np.array([4, 3])})["y"].shape == (4, 3)
    with pytest.raises(pplpy.ShapeError):
        rt.run({"x": x, "s": np.array([5, 3])})


def test_blocked_format_kept_through_cnn_ops(save_model):
    rt = pplpy.load(save_model(conv_model()), fusion=False)
    blocked = [n.op_type for n in rt.graph.nodes if rt.formats[n.outputs[0]] is DataFormat.N16CX]
    assert "Conv" in blocked and "Relu" in blocked


def test_errors_do_not_leak_process_state(save_model):
    """After a failed build, the same process builds and runs other models normally."""
    with pytest.raises(pplpy.ModelError):
        pplpy.load(os.devnull)
    rt = pplpy.load(save_model(conv_model(batch=1)))
    assert rt.run({"x": np.zeros((1, 3, 8, 8), np.float32)})["y"].shape == (1, 8, 4, 4)


def test_dispatch_info_without_arguments_lists_every_family():
    from pplpy.common.isa import supported_isas
    from pplpy.engines.x86.impls.dispatch import dispatch_info

    info = dispatch_info()
    assert {"conv_fp32", "eltwise_fp32", "gemm_fp32"} <= set(info)
    assert set(info.values()) == {supported_isas()[0]}
    assert set(dispatch_info(max_isa="sse").values()) == {"sse"}


def test_initializers_listed_as_inputs_are_overridable_defaults(save_model):
    """ONNX IR: an initializer that is also a graph input is a default a feed may override;
    the common unfed case keeps it constant (folded, packed)."""
    w = np.arange(3, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    rt = pplpy.load(save_model(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 13)])))
    x = np.ones(3, np.float32)
    assert rt.input_names == ["x"]
    np.testing.assert_array_equal(rt.run({"x": x})["y"], x + w)
    np.testing.assert_array_equal(rt.run({"x": x, "w": np.full(3, 10, np.float32)})["y"],
                                  [11, 11, 11])
    np.testing.assert_array_equal(rt.run({"x": x})["y"], x + w)
    with pytest.raises(pplpy.InputError):
        rt.run({"x": x, "w": np.ones(4, np.float32)})


@pytest.mark.parametrize("change", ["replace", "remove"])
def test_an_override_after_the_model_file_changed_is_an_error(tmp_path, change):
    """The override variant is parsed from the file when a run first feeds an overridable
    initializer; a file replaced since (here by a Mul model) made that run compute with the
    other model's graph, silently.  Now it is a ModelError; plain runs go on as loaded."""
    def model(op):
        graph = helper.make_graph(
            [helper.make_node(op, ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
             helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.ones(2, np.float32), "w")], doc_string=op * (4 if op == "Mul" else 1))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    path = tmp_path / "m.onnx"
    onnx.save(model("Add"), path)
    rt = pplpy.load(str(path))
    x = np.zeros(2, np.float32)
    path.unlink()
    if change == "replace":
        onnx.save(model("Mul"), path)
    with pytest.raises(pplpy.ModelError, match="changed or removed since it was loaded"):
        rt.run({"x": x, "w": np.full(2, 5, np.float32)})
    np.testing.assert_array_equal(rt.run({"x": x})["y"], [1, 1])
    # Loaded from bytes, the variant is made from those bytes.
    rt = pplpy.load(bytearray(model("Add").SerializeToString()))
    np.testing.assert_array_equal(rt.run({"x": x, "w": np.full(2, 5, np.float32)})["y"], [5, 5])


def _save_with_external_weights(tmp_path, bias):
    """y = x * w + b over 4 floats, w (2, overridable: also an input) and b (``bias``) in
    the external data file w.bin next to m.onnx; returns m.onnx's path."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
              helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.full(4, 2, np.float32), "w"),
         numpy_helper.from_array(np.full(4, bias, np.float32), "b")])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    return path


def test_an_override_after_the_external_data_changed_is_an_error(tmp_path):
    """The override variant reads the external data again too: a weight file rewritten
    in place since the load (the .onnx untouched) was built and run silently."""
    path = _save_with_external_weights(tmp_path, bias=10)
    rt = pplpy.load(str(path))
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.full(4, 12))
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").write_bytes(data[:-4] + np.float32(99).tobytes())
    with pytest.raises(pplpy.ModelError, match="or its external data was changed"):
        rt.run({"x": x, "w": np.full(4, 3, np.float32)})
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.full(4, 12))


def test_an_override_is_not_refused_for_another_initializers_default():
    """Feeding one overridable initializer runs the variant with the others' defaults; a
    default whose shape ([1]) differs from its declared dim name (K, 3 in "a") is the model's
    own value, not a feed that contradicts the names (the run was refused naming "w")."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "w"], ["t"]), helper.make_node("Mul", ["t", "v"], ["y"])],
        "g", [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["N", "K"]),
              helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, ["K"]),
              helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([5], np.float32), "w"),
         numpy_helper.from_array(np.array([2], np.float32), "v")])
    rt = pplpy.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                    .SerializeToString(), num_threads=1)
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(rt.run({"a": a})["y"], np.full((2, 3), 12))
    np.testing.assert_array_equal(rt.run({"a": a, "v": np.array([3], np.float32)})["y"],
                                  np.full((2, 3), 18))
    # A fed value is held to the names, as any feed.
    with pytest.raises(pplpy.InputError, match='dim "K" is 3 in input "a"'):
        rt.run({"a": a, "w": np.ones(2, np.float32)})


def test_external_data_rewritten_while_the_model_loads_is_seen(tmp_path):
    """The external data files' identities are taken before they are read: a weight file
    rewritten during the build (here from the on_pass hook) went unnoticed, and the override
    variant then read the new weights while plain runs used the old ones."""
    path = _save_with_external_weights(tmp_path, bias=1)
    data = tmp_path / "w.bin"
    old = data.read_bytes()
    rewritten = []

    def on_pass(name, state):  # another process rewriting the weights during the load
        if not rewritten:
            rewritten.append(name)
            data.write_bytes(old.replace(np.full(4, 1, np.float32).tobytes(),
                                         np.full(4, 100, np.float32).tobytes()))

    builder = pplpy.RuntimeBuilder.from_onnx(str(path), engines=[pplpy.X86Engine(num_threads=1)],
                                             on_pass=on_pass)
    rt = builder.create_runtime()
    x = np.ones(4, np.float32)
    assert rewritten and data.read_bytes() != old
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.full(4, 3))
    with pytest.raises(pplpy.ModelError, match="or its external data was changed"):
        rt.run({"x": x, "w": np.full(4, 2, np.float32)})


def test_external_data_too_big_for_memory_says_so(tmp_path, monkeypatch):
    """Reading external data that does not fit raised ModelError "cannot read its external
    data: " and nothing after it (a MemoryError's text is empty)."""
    from pplpy.models.onnx import model_parser

    path = _save_with_external_weights(tmp_path, bias=1)

    def no_memory(dims, dtype):
        raise MemoryError()

    monkeypatch.setattr(model_parser, "_allocate", no_memory)
    with pytest.raises(pplpy.ModelError, match="cannot read its external data: out of memory"):
        pplpy.load(str(path))


def test_out_of_memory_at_load_says_what_to_do(save_model, monkeypatch):
    """Out of memory while reading or building a model said "check the model's and the
    inputs' shapes" (a run's advice); now each stage says what it needs."""
    import onnx as onnx_module

    from pplpy.engines.x86.engine import X86Engine

    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", FLOAT, [4])],
                       [("y", FLOAT, None)])
    path = save_model(model)

    def no_memory(*args, **kwargs):
        raise MemoryError()

    with monkeypatch.context() as patch:
        patch.setattr(onnx_module, "load_model_from_string", no_memory)
        patch.setattr(onnx_module, "load", no_memory)
        with pytest.raises(pplpy.ModelError, match="reading the model: out of memory .*the "
                                                   "model's weights must fit in memory"):
            pplpy.load(path)
    with monkeypatch.context() as patch:
        patch.setattr(X86Engine, "process", no_memory)
        with pytest.raises(pplpy.ModelError, match="building the model: out of memory .*"
                                                   "building packs the weights .*in_shapes"):
            pplpy.load(path)
    np.testing.assert_array_equal(pplpy.load(path).run({"x": -np.ones(4, np.float32)})["y"],
                                  np.zeros(4, np.float32))


def test_a_failed_run_lets_go_of_its_feeds_at_once(save_model, monkeypatch):
    """An out-of-memory run raised an InputError whose traceback, through a reference cycle
    in the error guard, held the run's frames and so its feeds (a 1 GB feed stayed until the
    garbage collector ran, and the caller's next allocation failed)."""
    import gc
    import weakref

    from pplpy.runtime import runtime as runtime_module

    class Feed(np.ndarray):
        pass

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 1.00 GiB")

    rt = pplpy.load(save_model(make_model([helper.make_node("Relu", ["x"], ["y"])],
                                          [("x", FLOAT, ["N", 4])], [("y", FLOAT, None)])))
    monkeypatch.setattr(runtime_module, "make_plan", no_memory)
    feed = np.ones((8, 4), np.float32).view(Feed)
    alive = weakref.ref(feed)
    gc.disable()
    try:
        with pytest.raises(pplpy.InputError, match="out of memory"):
            rt.run({"x": feed})
        del feed
        assert alive() is None
    finally:
        gc.enable()
