"""Out-of-tree operators: the example plugin, installed the way a user installs it, and the
tutorial that describes it (docs/add_op.md), checked so the two cannot drift apart.

The plugin is installed with ``pip install --target`` into a temporary folder and used from
subprocesses whose PYTHONPATH holds that folder: this pytest process never imports it, so its
registrations cannot leak into other tests (a registry snapshot such as supported_ops.md).
"""

import ast
import importlib
import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pplpy
from pplpy.plugins import ENTRY_POINT_GROUP

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "pplpy_example_ops"
TUTORIAL = REPO / "docs" / "add_op.md"
PPLPY_ROOT = str(pathlib.Path(pplpy.__file__).resolve().parents[1])  # the pplpy under test
TIMEOUT = 120


def _example_installed_globally():
    return any(ep.value.split(":")[0] == "pplpy_example_ops"
               for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def run_python(args, cwd, extra_path=()):
    """Run ``python args`` with PYTHONPATH = extra_path + the pplpy under test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), PPLPY_ROOT])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """The example package, built and installed into a fresh folder with pip."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"
    # Build from a copy, so no build/ or egg-info lands in the repository.
    shutil.copytree(EXAMPLE, source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--quiet", "--target", str(site),
         str(source)],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    return site


def _scaled_leaky_relu(x, alpha=0.01, scale=1.0):
    return np.float32(scale) * np.where(x >= 0, x, np.float32(alpha) * x)


@pytest.fixture(scope="module")
def plugin_model(tmp_path_factory):
    """x -> ScaledLeakyRelu(alpha 0.2, scale 3) -> y, and x -> ScaledLeakyRelu() -> z."""
    nodes = [
        helper.make_node("ScaledLeakyRelu", ["x"], ["y"], domain="com.example",
                         name="scaled_a", alpha=0.2, scale=3.0),
        helper.make_node("ScaledLeakyRelu", ["x"], ["z"], domain="com.example",
                         name="scaled_b"),
    ]
    graph = helper.make_graph(
        nodes, "plugin_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3, 4, 5])
         for name in ("y", "z")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.example", 1)])
    path = tmp_path_factory.mktemp("model") / "plugin_model.onnx"
    onnx.save(model, path)
    return path


# -- the installed plugin --------------------------------------------------------------------


def test_pplnn_runs_a_model_of_the_plugin(plugin_site, plugin_model, tmp_path):
    result = run_python(["-m", "pplpy.tools.pplnn", "--onnx-model", str(plugin_model),
                         "--dump-graph"], cwd=tmp_path, extra_path=[plugin_site])
    assert result.returncode == 0, result.stderr
    assert "plugins: example_ops (pplpy_example_ops)" in result.stdout
    assert 'com.example::ScaledLeakyRelu "scaled_a"' in result.stdout
    assert 'output "y": float32 [2,3,4,5]' in result.stdout
    assert result.stderr == ""


def test_pplpy_load_runs_the_plugin_op(plugin_site, plugin_model, tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np
        import pplpy

        x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
        x[0, 0, 0, :3] = [0.0, -0.0, np.nan]
        out = pplpy.load({str(plugin_model)!r}).run({{"x": x}})
        y_ref = np.float32(3.0) * np.where(x >= 0, x, np.float32(0.2) * x)
        z_ref = np.float32(1.0) * np.where(x >= 0, x, np.float32(0.01) * x)
        np.testing.assert_allclose(out["y"], y_ref, rtol=1e-6)
        np.testing.assert_allclose(out["z"], z_ref, rtol=1e-6)
        print("ok")
    """)
    result = run_python(["-c", script], cwd=tmp_path, extra_path=[plugin_site])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_plugin_op_follows_n16cx_after_conv(plugin_site, tmp_path):
    """Behind a Conv the op receives N16CX and keeps it (no Reorder around it)."""
    script = textwrap.dedent("""
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        import pplpy

        c = 20  # not a multiple of 16: the padding lanes are exercised
        w = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)  # 1x1 identity conv: y = x
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
            helper.make_node("ScaledLeakyRelu", ["c"], ["y"], domain="com.example",
                             name="scaled", alpha=0.1, scale=2.0),
        ]
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 3, 3])],
            initializer=[numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                        helper.make_opsetid("com.example", 1)])
        onnx.save(model, "conv_scaled.onnx")
        rt = pplpy.load("conv_scaled.onnx")
        x = np.random.default_rng(2).standard_normal((1, c, 3, 3)).astype(np.float32)
        y = rt.run({"x": x})["y"]
        np.testing.assert_allclose(y, 2.0 * np.where(x >= 0, x, 0.1 * x), rtol=1e-5,
                                   atol=1e-6)
        print(rt.formats["c"].name)
    """)
    result = run_python(["-c", script], cwd=tmp_path, extra_path=[plugin_site])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "N16CX"


def test_tutorial_script_runs_with_the_plugin(plugin_site, tmp_path):
    """Step 5.2's script, exactly as docs/add_op.md shows it."""
    blocks = [code for marker, _, code in _fenced_blocks(TUTORIAL.read_text())
              if marker == "doctest: plugin"]
    assert len(blocks) == 1, "docs/add_op.md should hold one '<!-- doctest: plugin -->' block"
    (tmp_path / "tutorial_step5.py").write_text(blocks[0])
    result = run_python(["tutorial_step5.py"], cwd=tmp_path, extra_path=[plugin_site])
    assert result.returncode == 0, result.stderr
    assert "pplpy matches the reference" in result.stdout


@pytest.mark.skipif(_example_installed_globally(),
                    reason="pplpy_example_ops is installed in this environment, so its op is "
                    "always available")
def test_without_the_plugin_the_op_is_unsupported(plugin_model, tmp_path):
    script = textwrap.dedent(f"""
        import json
        import pplpy
        try:
            pplpy.load({str(plugin_model)!r})
        except pplpy.UnsupportedOpError as exc:
            print(json.dumps({{"message": str(exc), "nodes": exc.nodes}}))
        else:
            raise SystemExit("loaded without the plugin")
    """)
    result = run_python(["-c", script], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # Every unsupported node at once, each with its domain and opset.
    assert sorted(map(tuple, report["nodes"])) == [
        ("scaled_a", "com.example", "ScaledLeakyRelu", 1),
        ("scaled_b", "com.example", "ScaledLeakyRelu", 1),
    ]
    # Grouped by op, with the count, the node names and what is missing.
    assert ('com.example::ScaledLeakyRelu opset 1: 2 node(s) ("scaled_a", "scaled_b"): '
            'op not supported') in report["message"]

    cli = run_python(["-m", "pplpy.tools.pplnn", "--onnx-model", str(plugin_model)],
                     cwd=tmp_path)
    assert cli.returncode == 2
    assert cli.stderr.startswith("pplnn: error: ") and cli.stderr.count("\n") == 1
    assert 'com.example::ScaledLeakyRelu opset 1: 2 node(s) ("scaled_a", "scaled_b")' in cli.stderr
    assert "Traceback" not in cli.stderr


# -- the tutorial cannot drift ---------------------------------------------------------------

_FENCE = re.compile(
    r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->\s*\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)^```",
    re.S | re.M,
)


def _fenced_blocks(text):
    """[(marker or None, language, code)] of every fenced block, in order."""
    return [(m["marker"], m["lang"], m["code"]) for m in _FENCE.finditer(text)]


def _prose(text):
    """The tutorial without its fenced blocks and HTML comments."""
    text = _FENCE.sub("", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def _backticked(text):
    return [" ".join(t.split()) for t in re.findall(r"`([^`]+)`", _prose(text))]


def _source_corpus():
    files = [REPO / "setup.py"]
    for folder in (REPO / "pplpy", EXAMPLE):
        for pattern in ("*.py", "*.pyx", "*.pxi", "*.pxd", "*.h", "*.toml"):
            files += folder.rglob(pattern)
    files += [EXAMPLE / "pyproject.toml"]
    return "\n".join(f.read_text() for f in files)


def test_tutorial_excerpts_appear_verbatim_in_their_files():
    excerpts = [(m, code) for m, _, code in _fenced_blocks(TUTORIAL.read_text())
                if m and m.startswith("excerpt:")]
    assert len(excerpts) >= 15, "the tutorial lost its '<!-- excerpt: path -->' markers"
    for marker, code in excerpts:
        path = REPO / marker.split(":", 1)[1].strip()
        assert path.is_file(), f"{marker}: no such file"
        source = path.read_text()
        # "..." on a line of its own elides code between the parts of one excerpt.
        for part in re.split(r"^\s*\.\.\.\s*$", code, flags=re.M):
            part = part.strip("\n")
            if part.strip():
                assert part in source, (f"docs/add_op.md quotes code that is not in "
                                        f"{path.relative_to(REPO)}:\n{part}")


_PATH_TOKEN = re.compile(r"^[\w./{},-]+$")
_EXTENSIONS = (".py", ".pyx", ".pxi", ".pxd", ".toml", ".md", ".onnx", ".h")
_TOP_FOLDERS = ("pplpy", "examples", "docs", "tests", "benchmarks")


def _expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m[1].split(",")
            for x in _expand_braces(token[:m.start()] + alt + token[m.end():])]


def test_tutorial_paths_exist():
    text = TUTORIAL.read_text()
    checked = 0
    for token in _backticked(text):
        if not _PATH_TOKEN.match(token) or token.startswith("."):
            continue
        if not token.endswith(_EXTENSIONS) and token.split("/")[0] not in _TOP_FOLDERS:
            continue
        for path in _expand_braces(token):
            if "/" in path:
                assert (REPO / path).exists(), f"docs/add_op.md names {path!r}: not found"
            else:
                assert next(REPO.glob(f"**/{path}"), None), f"no file named {path!r}"
            checked += 1
    assert checked >= 10


# Names the tutorial mentions that live outside pplpy and its example (with why).
FOREIGN_NAMES = {
    "MayUseISA": "PPL.NN's ISA check, which the tutorial contrasts with self.impl",
    "new_ops": "a parameter of onnx.reference.ReferenceEvaluator",
    "OpRun": "onnx.reference.op_run.OpRun, used in the tutorial's script",
}
_IMPORTABLE_ROOTS = ("pplpy", "onnx", "numpy", "importlib")


def _resolve(dotted):
    """Import the longest module prefix of ``dotted`` and getattr the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _example_defines(dotted):
    """True if pplpy_example_ops.<module>[.<name>] exists in the example's source."""
    parts = dotted.split(".")
    package = EXAMPLE / "pplpy_example_ops"
    if len(parts) == 1:
        return package.is_dir()
    module = package / f"{parts[1]}.py"
    if len(parts) == 2:
        return module.is_file() or parts[1] in _top_level_names(package / "__init__.py")
    return module.is_file() and parts[2] in _top_level_names(module)


def _top_level_names(path):
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_tutorial_names_exist():
    """Every public name in backticks resolves: pplpy.* by import, the example's names in
    its source (never imported here), any other identifier somewhere in the source."""
    corpus = _source_corpus()
    checked = 0
    for token in _backticked(TUTORIAL.read_text()):
        name = token.split("(", 1)[0] if re.match(r"^[\w.]+\(", token) else token
        if (not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", name) or name in FOREIGN_NAMES
                or name.endswith(_EXTENSIONS)):  # file names: test_tutorial_paths_exist
            continue
        root = name.split(".")[0]
        if root == "pplpy_example_ops":
            assert _example_defines(name), f"docs/add_op.md names {name!r}: not in the example"
        elif root in _IMPORTABLE_ROOTS:
            try:
                _resolve(name)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"docs/add_op.md names {name!r}, which does not resolve: {exc}")
        else:
            assert name in corpus, f"docs/add_op.md names {name!r}, found nowhere in the source"
        checked += 1
    assert checked >= 40


def test_tutorial_pplnn_options_exist():
    from pplpy.tools.pplnn import build_parser

    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    text = TUTORIAL.read_text()
    commands = [t for t in _backticked(text) if t.startswith(("pplnn", "--"))]
    commands += [line for _, lang, code in _fenced_blocks(text) if lang == "bash"
                 for line in code.splitlines() if line.startswith("pplnn")]
    options = {opt for command in commands for opt in re.findall(r"--[\w-]+", command)}
    assert options, "the tutorial shows no pplnn command"
    assert options <= known, f"unknown pplnn options in docs/add_op.md: {options - known}"


# -- isolation: a broken plugin, an override, the padding rule --------------------------------


def _fake_site(root, name, module_source):
    """A folder holding module ``<name>_mod`` and a dist-info declaring it as a pplpy plugin
    (what pip would write), so subprocesses see it through importlib.metadata."""
    site = root / f"site_{name}"
    site.mkdir()
    (site / f"{name}_mod.py").write_text(textwrap.dedent(module_source))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {name}_mod\n")
    return site


RELU_MODEL_SCRIPT = """
    import warnings
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import pplpy

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt = pplpy.load(model.SerializeToString())
    for w in caught:
        print("WARNING", w.category.__name__, w.message)
    print("OUT", rt.run({"x": np.array([-1, 2, -3, 4], np.float32)})["y"].tolist())
"""


def test_a_plugin_that_fails_to_import_is_a_warning(tmp_path):
    site = _fake_site(tmp_path, "broken_ops", "raise ImportError('needs libfoo.so')\n")
    result = run_python(["-c", textwrap.dedent(RELU_MODEL_SCRIPT)], cwd=tmp_path,
                        extra_path=[site])
    assert result.returncode == 0, result.stderr
    assert ("WARNING PluginWarning pplpy plugin 'broken_ops' (broken_ops_mod) failed to import "
            "and is skipped: ImportError: needs libfoo.so") in result.stdout
    assert "OUT [0.0, 2.0, 0.0, 4.0]" in result.stdout  # models not needing it still load
    listed = run_python(["-m", "pplpy.tools.pplnn", "--list-ops"], cwd=tmp_path,
                        extra_path=[site])
    assert listed.returncode == 0
    assert "plugin broken_ops (broken_ops_mod) failed to import: ImportError" in listed.stdout
    ran = run_python(["-m", "pplpy.tools.pplnn"], cwd=tmp_path, extra_path=[site])
    assert ran.returncode == 0
    assert "plugins: broken_ops (broken_ops_mod) [failed to import]" in ran.stdout


OVERRIDE_SOURCE = """
    import numpy as np
    from pplpy import DataFormat
    from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
    from pplpy.engines.x86.ops.canned import same_shape_as_input

    class TimesTenKernel(X86Kernel):
        def do_execute(self, ctx):
            np.multiply(np.maximum(ctx.inputs[0], 0), 10, out=ctx.outputs[0])

    @op("", "Relu", since=14, override={override})
    class TenRelu(X86OptKernel):
        infer_shape = same_shape_as_input

        def create_kernel(self):
            return TimesTenKernel(self)
"""


def test_a_plugin_overrides_a_builtin_only_with_override_true(tmp_path):
    site = _fake_site(tmp_path, "override_ops", OVERRIDE_SOURCE.format(override=True))
    result = run_python(["-c", textwrap.dedent(RELU_MODEL_SCRIPT)], cwd=tmp_path,
                        extra_path=[site])
    assert result.returncode == 0, result.stderr
    assert "OUT [0.0, 20.0, 0.0, 40.0]" in result.stdout
    listed = run_python(["-m", "pplpy.tools.pplnn", "--list-ops"], cwd=tmp_path,
                        extra_path=[site])
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert ["ai.onnx", "Relu", "6-13", "pplpy", "ReluOp"] in rows
    assert ["ai.onnx", "Relu", "14-28", "override_ops_mod", "TenRelu"] in rows
    assert "ai.onnx::Relu opsets 14-28 from pplpy" in listed.stdout  # what it replaced

    quiet = tmp_path / "quiet"
    quiet.mkdir()
    site = _fake_site(quiet, "sneaky_ops", OVERRIDE_SOURCE.format(override=False))
    result = run_python(["-c", textwrap.dedent(RELU_MODEL_SCRIPT)], cwd=tmp_path,
                        extra_path=[site])
    assert "RegistryError" in result.stdout and "override=True" in result.stdout
    assert "OUT [0.0, 2.0, 0.0, 4.0]" in result.stdout  # the built-in stays


RECIPROCAL_SOURCE = """
    import numpy as np
    from pplpy import DataFormat
    from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
    from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input

    class ReciprocalKernel(X86Kernel):
        def do_execute(self, ctx):
            with np.errstate(divide="ignore"):
                np.divide(1.0, ctx.inputs[0], out=ctx.outputs[0])

    @op("com.example", "Recip", since=1)
    class Recip(X86OptKernel):
        formats = (DataFormat.NDARRAY, DataFormat.N16CX)
        infer_shape = same_shape_as_input
        select_format = follow_input_format   # would take N16CX: padding lanes 1/0 = inf

        def create_kernel(self):
            return ReciprocalKernel(self)
"""


def test_a_plugin_op_gets_ndarray_unless_it_keeps_padding_finite(tmp_path):
    """1/x between two convolutions: without the declaration the engine hands it NDARRAY,
    so N16CX's zero padding never reaches it and the answer is right (no NaN)."""
    site = _fake_site(tmp_path, "recip_ops", RECIPROCAL_SOURCE)
    script = textwrap.dedent("""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        from onnx.reference import ReferenceEvaluator
        import pplpy

        c = 20
        rng = np.random.default_rng(0)
        w1 = (rng.random((c, c, 1, 1)) + 0.5).astype(np.float32)
        w2 = rng.standard_normal((4, c, 1, 1)).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1"),
                 helper.make_node("Recip", ["a"], ["b"], domain="com.example", name="recip"),
                 helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2")]
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                        helper.make_opsetid("com.example", 1)])
        rt = pplpy.load(model.SerializeToString())
        x = (rng.random((1, c, 3, 3)) + 0.5).astype(np.float32)
        y = rt.run({"x": x})["y"]
        a = np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], x)
        want = np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], 1 / a)
        np.testing.assert_allclose(y, want, rtol=1e-4)
        (recip,) = [n for n in rt.graph.nodes if n.name == "recip"]
        print(rt.formats["a"].name, rt.formats[recip.inputs[0]].name, rt.formats["b"].name,
              np.isnan(y).any())
    """)
    result = run_python(["-c", script], cwd=tmp_path, extra_path=[site])
    assert result.returncode == 0, result.stderr
    # conv1 writes N16CX; a Reorder hands the plugin op NDARRAY.
    assert result.stdout.split() == ["N16CX", "NDARRAY", "NDARRAY", "False"]
