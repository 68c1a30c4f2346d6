"""The pplnn command line: pplpy.tools.pplnn.main([...]) in-process, and once as a process.

Most tests use a small model of element-wise ops; the tests of the demo model need its CNN ops
and are skipped, naming the missing ones, until those are registered.
"""

import json
import os
import re
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import FLOAT, make_model

import pplpy
from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.data import DEMO_MODEL_PATH
from pplpy.data.demo_model import build_demo_model
from pplpy.tools.pplnn import main, parse_in_shapes, sanitize

PPLPY_ROOT = str(pathlib.Path(pplpy.__file__).resolve().parents[1])  # the pplpy under test


@pytest.fixture(autouse=True)
def _no_isa_cap_from_env(monkeypatch):
    monkeypatch.delenv("PPLPY_MAX_ISA", raising=False)


@pytest.fixture
def small_model(save_model):
    """Two inputs, one with a free batch dim; an output whose name needs sanitising.

    a [N,3,4] -> LeakyRelu(0.2) -> Sigmoid -> "a_out"
    b [2,5]   -> Relu -> Clip(-inf, 0.5) -> "b/out"
    """
    nodes = [
        helper.make_node("LeakyRelu", ["a"], ["a_lr"], name="leaky", alpha=0.2),
        helper.make_node("Sigmoid", ["a_lr"], ["a_out"], name="sigmoid"),
        helper.make_node("Relu", ["b"], ["b_relu"], name="relu"),
        helper.make_node("Clip", ["b_relu", "", "clip_max"], ["b/out"], name="clip"),
    ]
    model = make_model(
        nodes,
        [("a", FLOAT, ["N", 3, 4]), ("b", FLOAT, [2, 5])],
        [("a_out", FLOAT, ["N", 3, 4]), ("b/out", FLOAT, [2, 5])],
        initializers=[("clip_max", np.array(0.5, np.float32))],
    )
    return save_model(model)


def run_cli(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def expected_isa(cap):
    return next(t for t in supported_isas() if ISA_NAMES.index(t) >= ISA_NAMES.index(cap))


# -- running ---------------------------------------------------------------------------------


def test_summary_of_a_run(capsys, small_model):
    status, out, err = run_cli(capsys, "--onnx-model", small_model)
    assert (status, err) == (0, "")
    assert f"model: {small_model}" in out
    assert f"isa: {supported_isas()[0]}" in out
    from pplpy.common.cpu_topology import physical_cores

    # default team: the physical cores, its workers bound to CPUs where the CPU set holds it
    n = physical_cores()
    if 1 < n <= len(os.sched_getaffinity(0)):
        assert re.search(rf"threads: {n} \(workers? bound to CPUs? [\d, ]+\); fusion: on", out)
    else:
        assert f"threads: {n}; fusion: on" in out
    assert 'input "a": float32 [1,3,4]  (random, seed 0)' in out  # free dim built as 1
    assert 'input "b": float32 [2,5]' in out
    assert 'output "a_out": float32 [1,3,4]' in out
    assert 'output "b/out": float32 [2,5]' in out
    assert re.search(r"memory: weights \d+ bytes, arena \d+ bytes, plan \d+ bytes", out)


def test_no_bind_threads(capsys, small_model):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--num-threads", 2)
    assert status == 0
    bound = re.search(r"threads: 2 \(worker bound to CPU (\d+)\); fusion: on", out)
    if len(os.sched_getaffinity(0)) >= 2:
        assert bound and int(bound.group(1)) in os.sched_getaffinity(0)
    else:  # a team larger than the CPU set is left unbound
        assert "threads: 2; fusion: on" in out
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--num-threads", 2,
                             "--no-bind-threads")
    assert status == 0 and "threads: 2; fusion: on" in out


def test_in_shapes_fix_the_free_dims(capsys, small_model):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--in-shapes", "5_3_4,2_5",
                             "--num-threads", 2)
    assert status == 0
    assert 'input "a": float32 [5,3,4]' in out
    assert 'output "a_out": float32 [5,3,4]' in out
    assert "threads: 2" in out


def test_out_of_memory_making_inputs_is_an_error_not_a_bug(capsys, small_model, monkeypatch):
    """pplnn's own arrays (random inputs of a large --in-shapes are made in float64) running
    out of memory said "internal error ... please report it": it is the user's shape."""
    import pplpy.tools.pplnn as pplnn

    def no_memory(rt, seed):
        raise MemoryError("Unable to allocate 128. GiB for an array")

    monkeypatch.setattr(pplnn, "random_inputs", no_memory)
    status, out, err = run_cli(capsys, "--onnx-model", small_model, "--in-shapes",
                               "4_3_4,2_5")
    assert status == 2
    assert err.startswith("pplnn: error: out of memory (MemoryError: Unable to allocate 128.")
    assert "reduce --in-shapes" in err and "internal" not in err


def test_inputs_from_files_and_saved_outputs_match_pplpy_load(capsys, small_model, tmp_path):
    rng = np.random.default_rng(7)
    feeds = {"a": rng.standard_normal((4, 3, 4)).astype(np.float32),
             "b": rng.standard_normal((2, 5)).astype(np.float32)}
    files = []
    for name, value in feeds.items():
        files.append(tmp_path / f"{name}.bin")
        value.tofile(files[-1])
    out_dir = tmp_path / "out"
    status, out, err = run_cli(capsys, "--onnx-model", small_model, "--in-shapes", "4_3_4,2_5",
                               "--inputs", ",".join(map(str, files)), "--save-outputs",
                               "--save-data-dir", out_dir)
    assert (status, err) == (0, "")
    assert f'input "a": float32 [4,3,4]  (from "{files[0]}")' in out

    expected = pplpy.load(small_model, in_shapes=[(4, 3, 4), (2, 5)]).run(feeds)
    written = sorted(p.name for p in out_dir.iterdir())
    assert written == ["pplnn_output-a_out.dat", "pplnn_output-b_out.dat"]  # "/" sanitised
    for name, file in (("a_out", "pplnn_output-a_out.dat"), ("b/out", "pplnn_output-b_out.dat")):
        assert f'saved output "{name}" to {out_dir / file} ({expected[name].nbytes} bytes)' in out
        saved = np.fromfile(out_dir / file, dtype=np.float32).reshape(expected[name].shape)
        np.testing.assert_array_equal(saved, expected[name])


def test_random_inputs_are_seeded_and_can_be_saved(capsys, small_model, tmp_path):
    def saved_input(seed):
        folder = tmp_path / f"seed{seed}"
        status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--seed", seed,
                                 "--save-inputs", "--save-outputs", "--save-data-dir", folder)
        assert status == 0
        assert f'saved input "a" to {folder / "pplnn_input-a.dat"}' in out
        return (folder / "pplnn_input-a.dat").read_bytes(), folder

    first, folder = saved_input(3)
    assert saved_input(3)[0] == first
    assert saved_input(4)[0] != first
    # The saved inputs reproduce the saved outputs.
    feeds = {"a": np.fromfile(folder / "pplnn_input-a.dat", np.float32).reshape(1, 3, 4),
             "b": np.fromfile(folder / "pplnn_input-b.dat", np.float32).reshape(2, 5)}
    expected = pplpy.load(small_model).run(feeds)["a_out"]
    np.testing.assert_array_equal(
        np.fromfile(folder / "pplnn_output-a_out.dat", np.float32).reshape(1, 3, 4), expected)


def test_profiling_tables(capsys, small_model):
    # --disable-fusion: the small model's runs of activations stay nodes (fusion would make
    # each run one pplpy::EltwiseChain).
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--enable-profiling",
                             "--warmup-iterations", 2, "--min-profiling-iterations", 3,
                             "--disable-fusion")
    assert status == 0
    assert "run time over 3 run(s) after 2 warm-up: mean " in out
    node_table = out.split("profile per node (mean over 3 run(s)):")[1]
    node_table, type_table = node_table.split("profile per op type (mean over 3 run(s)):")
    for node, op_type in (("leaky", "LeakyRelu"), ("sigmoid", "Sigmoid"), ("relu", "Relu"),
                          ("clip", "Clip")):
        assert any(line.split()[:2] == [node, op_type] for line in node_table.splitlines())
        assert any(line.split()[:2] == [op_type, "1"] for line in type_table.splitlines())
    assert "total of nodes: " in type_table


def test_profile_shows_work_items_per_thread_team(capsys, save_model):
    """A pointwise conv on a 28 x 28 map with 40 output channels (two panels on avx512) has
    8 items at one thread, too few for 8 threads until the step cuts its pixels finer: the
    items column shows at least two per thread."""
    w = np.random.default_rng(0).standard_normal((40, 32, 1, 1)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="pw")],
                       [("x", FLOAT, [1, 32, 28, 28])], [("y", FLOAT, [1, 40, 28, 28])],
                       initializers=[("w", w)])
    path = save_model(model)

    def items(threads):
        status, out, _ = run_cli(capsys, "--onnx-model", path, "--enable-profiling",
                                 "--num-threads", threads, "--warmup-iterations", 1,
                                 "--min-profiling-iterations", 1)
        assert status == 0
        assert "  items: the work items a node's step is cut into" in out
        row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["pw", "Conv"])
        return int(row[4])

    assert items(8) >= 16 and items(8) >= items(1)


def test_profile_shows_how_the_team_ran_each_step(capsys, save_model):
    """With a thread team each parallel step's shares are timed: how late the last one
    started and how uneven they were (the columns), and one trace event per share on the
    lane of the thread that ran it; one thread has no such columns."""
    w = np.random.default_rng(1).standard_normal((64, 32, 1, 1)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="pw")],
                       [("x", FLOAT, [1, 32, 28, 28])], [("y", FLOAT, [1, 64, 28, 28])],
                       initializers=[("w", w)])
    path = save_model(model)
    trace = os.path.join(os.path.dirname(path), "team.json")
    status, out, _ = run_cli(capsys, "--onnx-model", path, "--num-threads", 2,
                             "--warmup-iterations", 1, "--min-profiling-iterations", 3,
                             "--profile-trace", trace)
    assert status == 0
    header = next(line.split() for line in out.splitlines() if line.split()[:2] == ["node", "op"])
    assert header[-3:] == ["late", "us", "max/mean"]
    row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["pw", "Conv"])
    late, spread = float(row[5]), float(row[6])
    assert late >= 0 and spread >= 1.0
    assert "  late us: from the step's start to the start of its last share" in out
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    shares = [e for e in events if e["cat"] == "share"]
    assert len(shares) == 3 * 2 and {e["args"]["share"] for e in shares} == {0, 1}
    assert all(e["args"]["node"] == "pw" and e["tid"] > 0 and e["dur"] >= 0 for e in shares)
    status, out, _ = run_cli(capsys, "--onnx-model", path, "--num-threads", 1,
                             "--warmup-iterations", 1, "--min-profiling-iterations", 1,
                             "--enable-profiling")
    assert status == 0 and "late us" not in out


def test_timed_runs_without_profiling(capsys, small_model):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model,
                             "--min-profiling-iterations", 2)
    assert status == 0
    assert "run time over 2 run(s) after 1 warm-up" in out
    assert "profile per node" not in out


def test_dump_graph_lists_nodes_shapes_and_formats(capsys, small_model):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--dump-graph",
                             "--in-shapes", "2_3_4,2_5", "--disable-fusion")  # 4 nodes stay
    assert status == 0
    dump = out.split("graph after the x86 engine:")[1]
    for op_type, name in (("LeakyRelu", "leaky"), ("Sigmoid", "sigmoid"), ("Relu", "relu"),
                          ("Clip", "clip")):
        assert f'{op_type} "{name}"' in dump
    lines = [" ".join(line.split()) for line in dump.splitlines()]
    assert "in a float32 [2,3,4] NDARRAY (graph input)" in lines
    assert "out a_lr float32 [2,3,4] NDARRAY" in lines
    assert "in clip_max float32 [] NDARRAY (constant)" in lines
    assert "in (omitted)" in lines
    assert "out b/out float32 [2,5] NDARRAY (graph output)" in lines
    assert "reorders inserted: 0" in lines


_BLOCKED_OP = textwrap.dedent("""
    # A test-only op that runs only in N16CX, so the engine must put Reorders around it.
    # Registered in this throwaway process, never in pytest's own registries.
    import sys
    import numpy as np
    from pplpy import DataFormat
    from pplpy.engines.x86 import X86Kernel, X86OptKernel, register_op
    from pplpy.engines.x86.ops.canned import same_shape_as_input
    from pplpy.models.onnx import register_parser
    from pplpy.tools.pplnn import main

    register_parser("test.pplnn", "BlockedRelu", None, versions=(1, 1))

    class BlockedReluKernel(X86Kernel):
        def do_execute(self, ctx):
            assert ctx.inputs[0].shape[-1] == 16  # physical N16CX array
            np.maximum(ctx.inputs[0], 0, out=ctx.outputs[0])

    @register_op("test.pplnn", "BlockedRelu", versions=(1, 1))
    class BlockedReluOp(X86OptKernel):
        formats = (DataFormat.N16CX,)
        keeps_padding_finite = True  # relu(0) = 0: a plugin op may take N16CX
        infer_shape = same_shape_as_input

        def select_format(self, in_formats, in_shapes):
            return [DataFormat.N16CX], [DataFormat.N16CX]

        def create_kernel(self):
            return BlockedReluKernel(self)

    sys.exit(main(sys.argv[1:]))
""")


def test_dump_graph_marks_inserted_reorders(save_model, tmp_path):
    nodes = [helper.make_node("BlockedRelu", ["x"], ["y"], domain="test.pplnn", name="blocked"),
             helper.make_node("Sigmoid", ["y"], ["z"], name="sigmoid")]
    model = save_model(make_model(nodes, [("x", FLOAT, [1, 20, 3, 3])],
                                  [("z", FLOAT, [1, 20, 3, 3])], extra_opsets=[("test.pplnn", 1)]))
    script = tmp_path / "blocked_pplnn.py"
    script.write_text(_BLOCKED_OP)
    result = _run_process([str(script), "--onnx-model", model, "--dump-graph",
                           "--save-outputs", "--save-inputs", "--save-data-dir", tmp_path],
                          tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert '0 * pplpy::Reorder "ReorderInput_x_of_blocked" inserted: NDARRAY -> N16CX' in lines
    assert "1 test.pplnn::BlockedRelu \"blocked\"" in lines
    assert "out y float32 [1,20,3,3] N16CX" in lines
    assert any(line.startswith("3 * pplpy::Reorder") and "N16CX -> NDARRAY" in line
               for line in lines)  # Sigmoid follows N16CX; the graph output comes back
    assert "reorders inserted: 2" in lines
    x = np.fromfile(tmp_path / "pplnn_input-x.dat", np.float32)
    z = np.fromfile(tmp_path / "pplnn_output-z.dat", np.float32)
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


# -- ISA choice ------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", ISA_NAMES)
def test_max_isa(capsys, small_model, cap):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--max-isa", cap)
    assert status == 0
    assert f"isa: {expected_isa(cap)} " in out
    assert f"cap: {cap})" in out


@pytest.mark.parametrize("flag, cap", [("--disable-avx512", "fma"), ("--disable-avx-fma3", "sse")])
def test_disable_flags_cap_the_isa(capsys, small_model, flag, cap):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, flag, "--max-isa", "avx512")
    assert status == 0
    assert f"isa: {expected_isa(cap)} " in out  # the stricter cap wins


def test_isa_cap_from_the_environment(capsys, small_model, monkeypatch):
    monkeypatch.setenv("PPLPY_MAX_ISA", "sse")
    status, out, _ = run_cli(capsys, "--onnx-model", small_model)
    assert status == 0
    assert "isa: sse " in out and "cap: sse)" in out


def test_same_outputs_under_every_isa(capsys, small_model, tmp_path):
    results = {}
    for isa in supported_isas():
        status, _, _ = run_cli(capsys, "--onnx-model", small_model, "--max-isa", isa,
                               "--save-outputs", "--save-data-dir", tmp_path / isa)
        assert status == 0
        results[isa] = np.fromfile(tmp_path / isa / "pplnn_output-a_out.dat", np.float32)
    for isa, value in results.items():
        np.testing.assert_allclose(value, results[supported_isas()[-1]], rtol=1e-6,
                                   err_msg=f"isa {isa}")


# -- errors: one line on stderr, exit status 2 ----------------------------------------------


def _error_cases(tmp_path, small_model, save_model):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"this is not a protobuf")
    good = tmp_path / "a.bin"
    np.zeros((1, 3, 4), np.float32).tofile(good)
    b = tmp_path / "b.bin"
    np.zeros((2, 5), np.float32).tofile(b)
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 10)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    unsupported = save_model(make_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.nowhere", name="frob")],
        [("x", FLOAT, [2])], [("y", FLOAT, [2])], extra_opsets=[("com.nowhere", 3)]))
    m = ["--onnx-model", small_model]
    return {
        "missing model": (["--onnx-model", tmp_path / "nope.onnx"], "does not exist"),
        "garbage model": (["--onnx-model", garbage], "not a readable ONNX model"),
        "unsupported op": (["--onnx-model", unsupported],
                           'com.nowhere::Frobnicate opset 3: 1 node(s) ("frob"): op not '
                           'supported'),
        "letters in shape": (m + ["--in-shapes", "1_x_4,2_5"], "'1_x_4' is not a shape"),
        "empty shape": (m + ["--in-shapes", ""], "'' is not a shape"),
        "double underscore": (m + ["--in-shapes", "1__4,2_5"], "'1__4' is not a shape"),
        "negative dim": (m + ["--in-shapes=-1_3_4,2_5"], "'-1_3_4' is not a shape"),
        "shape does not fit": (m + ["--in-shapes", "1_3_5,2_5"], "does not fit"),
        "too many shapes": (m + ["--in-shapes", "1_3_4,2_5,7"], "3 input shapes given"),
        "missing input file": (m + ["--inputs", f"{tmp_path / 'nope.bin'},{b}"], "cannot read"),
        "wrong byte count": (m + ["--inputs", f"{short},{b}"], "has 10 bytes"),
        "wrong file count": (m + ["--inputs", str(good)], "one file per input"),
        "unknown option": (m + ["--bogus"], "unrecognized arguments: --bogus"),
        "bad isa": (m + ["--max-isa", "mmx"], "invalid choice: 'mmx'"),
        "zero threads": (m + ["--num-threads", "0"], "expected a number >= 1"),
        "negative warmup": (m + ["--warmup-iterations", "-1"], "expected a number >= 0"),
        "save dir is a file": (m + ["--save-outputs", "--save-data-dir", a_file],
                               "cannot create"),
    }


_CASES = ["missing model", "garbage model", "unsupported op", "letters in shape",
          "empty shape", "double underscore", "negative dim", "shape does not fit",
          "too many shapes", "missing input file", "wrong byte count", "wrong file count",
          "unknown option", "bad isa", "zero threads", "negative warmup", "save dir is a file"]


@pytest.mark.parametrize("case", _CASES)
def test_errors_are_one_line_and_exit_2(capsys, tmp_path, small_model, save_model, case):
    argv, expected = _error_cases(tmp_path, small_model, save_model)[case]
    status, _, err = run_cli(capsys, *argv)
    assert status == 2
    assert err.startswith("pplnn: error: ") and err.count("\n") == 1, err
    assert expected in err
    assert "Traceback" not in err


def test_help_and_version(capsys):
    status, out, _ = run_cli(capsys, "--help")
    assert status == 0 and "--onnx-model" in out and "--dump-graph" in out
    status, out, _ = run_cli(capsys, "--version")
    assert status == 0 and out.strip() == f"pplpy {pplpy.__version__}"


def test_helpers():
    assert parse_in_shapes("1_3_224_224,1_10") == [(1, 3, 224, 224), (1, 10)]
    assert parse_in_shapes("0_5") == [(0, 5)]
    assert sanitize("encoder/layer.0:out") == "encoder_layer.0_out"


# -- the demo model --------------------------------------------------------------------------


def test_demo_file_is_what_the_builder_makes():
    """pplpy/data/demo.onnx is generated: rerun `python -m pplpy.data.demo_model` if stale."""
    assert onnx.load(DEMO_MODEL_PATH) == build_demo_model()


def test_no_model_runs_the_demo(capsys, tmp_path):
    status, out, err = run_cli(capsys, "--save-inputs", "--save-outputs", "--save-data-dir",
                               tmp_path)
    assert (status, err) == (0, "")
    assert f"model: {DEMO_MODEL_PATH}" in out
    assert "running the demo model shipped with pplpy" in out
    assert 'input "image": float32 [1,3,32,32]' in out
    assert 'output "probabilities": float32 [1,10]' in out
    image = np.fromfile(tmp_path / "pplnn_input-image.dat", np.float32).reshape(1, 3, 32, 32)
    probabilities = np.fromfile(tmp_path / "pplnn_output-probabilities.dat", np.float32)
    expected = ReferenceEvaluator(DEMO_MODEL_PATH).run(None, {"image": image})[0]
    np.testing.assert_allclose(probabilities, expected.reshape(-1), rtol=1e-4, atol=1e-6)


def test_demo_dump_graph_shows_blocked_formats(capsys):
    status, out, _ = run_cli(capsys, "--dump-graph")
    assert status == 0
    dump = out.split("graph after the x86 engine:")[1]
    for op_type in ("Conv", "Gemm", "Softmax"):
        assert f" {op_type} " in dump
    assert "N16CX" in dump
    assert "* pplpy::Reorder" in dump
    assert "reorders inserted: 0" not in dump


# -- as a process ----------------------------------------------------------------------------


def test_dump_graph_after_a_named_pass_and_fusion_switch(capsys):
    status, out, _ = run_cli(capsys, "--dump-graph", "select_formats")
    assert status == 0
    assert "graph after pass select_formats:" in out
    before_fusion = out.split("graph after pass select_formats:")[1]
    assert "Relu" in before_fusion  # the demo's activations are still nodes here
    status, out, _ = run_cli(capsys, "--dump-graph")
    final = out.split("graph after the x86 engine:")[1]
    assert "post-ops  relu" in final
    status, out, _ = run_cli(capsys, "--dump-graph", "--disable-fusion")
    assert "fusion: off" in out and "post-ops" not in out
    status, _, err = run_cli(capsys, "--dump-graph", "no_such_pass")
    assert status == 2 and "unknown pass 'no_such_pass'" in err


def _run_process(args, cwd):
    env = dict(os.environ, PYTHONPATH=PPLPY_ROOT)
    env.pop("PPLPY_MAX_ISA", None)
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_as_a_process(small_model, tmp_path):
    ok = _run_process(["-m", "pplpy.tools.pplnn", "--onnx-model", small_model, "--dump-graph"],
                      tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert 'output "a_out": float32 [1,3,4]' in ok.stdout and ok.stderr == ""
    bad = _run_process(["-m", "pplpy.tools.pplnn", "--onnx-model", small_model,
                        "--in-shapes", "1_3"], tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("pplnn: error: ") and bad.stderr.count("\n") == 1
    assert "Traceback" not in bad.stderr


# -- service-grade behaviour: exit codes, --debug, input sizes, --list-ops, traces ---------


def test_inputs_are_size_checked_before_reading(capsys, small_model, tmp_path):
    ok_b = tmp_path / "b.bin"
    ok_b.write_bytes(np.zeros((2, 5), np.float32).tobytes())
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--inputs",
                             f"/dev/zero,{ok_b}")
    assert status == 2
    assert '"/dev/zero" (for input "a") is not a regular file; give a file of 48 bytes' in err
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:  # sparse: 1 GiB on paper, nothing read
        f.truncate(1 << 30)
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--inputs", f"{huge},{ok_b}")
    assert status == 2 and f'"{huge}" has {1 << 30} bytes but input "a"' in err


def test_internal_error_exits_1_and_debug_shows_the_traceback(capsys, small_model, monkeypatch):
    import pplpy.tools.pplnn as cli

    def broken(*args, **kwargs):
        raise KeyError("a pplpy bug")

    monkeypatch.setattr(cli, "format_graph", broken)
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--dump-graph")
    assert status == 1
    assert err.startswith("pplnn: internal error: KeyError") and "--debug" in err
    assert "Traceback" not in err
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--dump-graph", "--debug")
    assert status == 1 and "Traceback (most recent call last)" in err
    # A user mistake with --debug: still exit 2, with the traceback.
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--in-shapes", "1_3", "--debug")
    assert status == 2 and "Traceback" in err and "pplnn: error: " in err


def test_list_ops_shows_who_provides_each_op(capsys):
    status, out, err = run_cli(capsys, "--list-ops")
    assert status == 0 and err == ""
    rows = [line.split() for line in out.splitlines()[2:] if line.startswith("  ")]
    conv = [r for r in rows if r[:2] == ["ai.onnx", "Conv"]]
    assert conv and conv[0][3] == "pplpy"
    assert not any(r[1] == "Reorder" for r in rows)  # pplpy's inserted nodes are not ops


def test_profile_trace_writes_chrome_trace_events(capsys, small_model, tmp_path):
    import json

    trace = tmp_path / "trace.json"
    status, out, err = run_cli(capsys, "--onnx-model", small_model, "--profile-trace", trace,
                               "--min-profiling-iterations", "3", "--warmup-iterations", "0",
                               "--disable-fusion")  # 4 nodes stay, no EltwiseChain
    assert status == 0, err
    assert "profile per op type" in out  # --profile-trace implies the tables
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == 3 * 4  # 4 steps per run, 3 runs
    first = events[0]
    assert first["ph"] == "X" and first["dur"] >= 0 and first["name"] == "LeakyRelu"
    assert first["args"]["node"] == "leaky"
    assert first["args"]["inputs"][0] == {"name": "a", "type": "float32", "shape": [1, 3, 4],
                                          "format": "NDARRAY"}
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--profile-trace",
                             tmp_path / "no" / "such" / "t.json")
    assert status == 2 and "--profile-trace: folder" in err


def test_supported_ops_help_writes_nothing(tmp_path):
    result = _run_process(["-m", "pplpy.tools.supported_ops", "--help"], tmp_path)
    assert result.returncode == 0 and "usage:" in result.stdout
    assert list(tmp_path.iterdir()) == []
    result = _run_process(["-m", "pplpy.tools.supported_ops", "-"], tmp_path)
    assert result.stdout.startswith("# Supported operators") and list(tmp_path.iterdir()) == []


def test_float64_model_is_refused_unless_cast(capsys, save_model):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [("x", onnx.TensorProto.DOUBLE, [2])], [("y", onnx.TensorProto.DOUBLE, [2])])
    path = save_model(model)
    status, _, err = run_cli(capsys, "--onnx-model", path)
    assert status == 2 and 'input "x" is float64' in err and "--cast-to-float32" in err
    status, out, _ = run_cli(capsys, "--onnx-model", path, "--cast-to-float32")
    assert status == 0 and 'output "y": float32 [2]' in out


def test_mm_policy_flag(capsys, small_model):
    for policy in ("mem", "perf"):
        status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--mm-policy", policy)
        assert status == 0 and "memory: weights" in out
    status, _, err = run_cli(capsys, "--onnx-model", small_model, "--mm-policy", "fast")
    assert status == 2


# -- the graph optimiser's pipeline --------------------------------------------------------


def test_list_passes_names_every_pass_and_the_default_pipeline(capsys):
    from pplpy.optimizer import DEFAULT_PIPELINE, PASSES

    status, out, _ = run_cli(capsys, "--list-passes")
    assert status == 0
    for name in PASSES:
        assert re.search(rf"^  {name}\s+\S", out, re.M), name
    pipeline = out.split("default pipeline")[1]
    assert [line.split()[0] for line in pipeline.splitlines()[1:]] == \
        [entry.pass_id for entry in DEFAULT_PIPELINE]


def test_passes_yaml_pass_log_and_dump_after_every_pass(capsys, small_model, tmp_path):
    yaml = tmp_path / "p.yaml"
    yaml.write_text("- {pass: dead_code_elimination}\n")
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--passes", yaml,
                             "--pass-log", "--dump-graph", "all")
    assert status == 0
    assert "after pass optimizer:dead_code_elimination" in out
    assert "after pass select_formats" in out and "after pass release_raw_weights" in out
    log = out.split("graph optimiser passes:\n")[1].splitlines()
    assert log[0].startswith("  dead_code_elimination: 0 change(s) in 1 round(s)")
    assert len([line for line in log if line.startswith("  ") and ": " in line]) == 1


def test_dump_graph_after_one_optimizer_pass(capsys, small_model):
    status, out, _ = run_cli(capsys, "--onnx-model", small_model, "--dump-graph",
                             "optimizer:constant_folding")
    assert status == 0
    assert out.count("after pass ") == 1 and "after pass optimizer:constant_folding" in out


def test_dump_graph_says_what_was_folded(capsys, save_model):
    shape = helper.make_node("Shape", ["w"], ["s"])
    cos = helper.make_node("ConstantOfShape", ["s"], ["ones"],
                           value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0]))
    add = helper.make_node("Add", ["x", "ones"], ["y"])
    model = make_model([shape, cos, add], [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       initializers=[("w", np.zeros((2, 3), np.float32))])
    status, out, _ = run_cli(capsys, "--onnx-model", save_model(model), "--dump-graph")
    assert status == 0
    line = next(l for l in out.splitlines() if l.startswith("  constant_folding:"))
    assert "folded ConstantOfShape 1" in line and "folded Shape 1" in line


@pytest.mark.parametrize("argv, message", [
    (["--dump-graph", "optimizer:cse_nope"], "unknown pass 'optimizer:cse_nope'"),
    (["--passes", "missing.yaml"], "cannot read pass pipeline"),
])
def test_bad_pass_options_are_one_line_errors(capsys, small_model, argv, message):
    status, out, err = run_cli(capsys, "--onnx-model", small_model, *argv)
    assert status == 2
    assert message in err and "Traceback" not in err
