"""pplnn: run, time and inspect an ONNX model with pplpy, after PPL.NN's ``pplnn`` tool.

    pplnn                                                  # the demo model shipped with pplpy
    pplnn --onnx-model m.onnx --in-shapes 1_3_224_224 --enable-profiling
    pplnn --onnx-model m.onnx --inputs x.dat --save-outputs --save-data-dir out/
    pplnn --onnx-model m.onnx --dump-graph --disable-avx512

    options --> pplpy.load (ISA cap, threads, build shapes from --in-shapes)
            --> inputs: raw files (--inputs) or seeded random of the build shapes
            --> one run --> summary, outputs [--save-outputs], graph [--dump-graph]
            --> [--warmup-iterations, then --min-profiling-iterations timed runs,
                 per-node and per-op-type table with --enable-profiling]

Files are raw binary, as in PPL.NN: the elements of a tensor in C order and the model's
element type, no header.  Outputs are written as ``pplnn_output-<name>.dat`` (inputs, with
``--save-inputs``, as ``pplnn_input-<name>.dat``), the name with every character outside
``[A-Za-z0-9._-]`` replaced by ``_``.

Exit status: 0 on success; 2 for anything a user can cause (a pplpy error, a bad option, a
missing or wrong-sized file, pplnn's own inputs not fitting in memory), reported as one line
``pplnn: error: ...`` on stderr; 1 for an internal error (a bug in pplpy: ``pplnn: internal
error: ...``), whose traceback ``--debug`` prints (``--debug`` prints the traceback of any
error).

    pplnn --list-ops                       # every op, its opsets and who provides it
    pplnn --profile-trace trace.json ...   # Chrome trace of the timed runs (Perfetto)
    pplnn --list-passes                    # the graph optimiser's passes and default pipeline
    pplnn --onnx-model m.onnx --passes p.yaml --pass-log --dump-graph all
    pplnn --onnx-model m.onnx --save-optimized-model m.opt.onnx   # the optimised graph
"""

import argparse
import math
import os
import re
import stat
import sys
import time
import traceback
import warnings

import numpy as np

import pplpy
from pplpy.engines.x86.engine import MM_POLICIES
from pplpy.engines.x86.pipeline import OPTIMIZER_PREFIX, PASS_NAMES
from pplpy.engines.x86.save_model import capture, write_model
from pplpy.common.isa import supported_isas
from pplpy.common.isa_tiers import ISA_NAMES
from pplpy.errors import InternalError, PplError
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE, PASSES, load_pipeline
from pplpy.plugins import PluginWarning, failed_plugins, load_plugins, loaded_plugins

PROG = "pplnn"
REORDER_DOMAIN = "pplpy"  # the domain of the Reorder nodes the x86 engine inserts


class CliError(Exception):
    """Bad command-line input: reported like a pplpy error, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse would print the usage and exit; we want one line and a return value.
        raise CliError(f"{message} (see {PROG} --help)")


def _count(text):
    """argparse type: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive(text):
    """argparse type: an int >= 1."""
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _binding_note(rt):
    """' (workers bound to CPUs 1, 2)' when the team's workers are bound, else ''."""
    cpus = [c for c in rt.worker_cpus if c is not None]
    if not cpus:
        return ""
    s = "s" if len(cpus) > 1 else ""
    return f" (worker{s} bound to CPU{s} {', '.join(map(str, cpus))})"


def build_parser():
    parser = _Parser(
        prog=PROG,
        description="Run an ONNX model with pplpy. With no --onnx-model, runs the demo model "
        "shipped with pplpy.",
    )
    parser.add_argument("--version", action="version", version=f"pplpy {pplpy.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an error (internal errors exit 1)")
    parser.add_argument("--list-ops", action="store_true",
                        help="list every operator pplpy can run, its opsets and the package "
                        "that provides it (pplpy or a plugin), then exit")
    parser.add_argument("--list-passes", action="store_true",
                        help="list the graph optimiser's passes and the default pipeline, "
                        "then exit")
    model = parser.add_argument_group("model and inputs")
    model.add_argument("--onnx-model", metavar="PATH", help="the ONNX model to run")
    model.add_argument(
        "--in-shapes", metavar="SHAPES",
        help="input shapes in input order: dims joined by '_', inputs separated by ',' "
        "(e.g. 1_3_224_224,1_10); fixes the model's free dims at build time",
    )
    model.add_argument(
        "--inputs", metavar="FILES",
        help="raw binary input files separated by ',', one per input in input order, each "
        "holding the input's element type and shape in C order",
    )
    model.add_argument("--seed", type=int, default=0,
                       help="seed of the random inputs used without --inputs (default 0)")
    model.add_argument("--passes", metavar="YAML",
                       help="the graph optimiser's pipeline as a YAML list of "
                       "{pass, convergence, dce_after, modes} entries (default: "
                       "pplpy.optimizer.DEFAULT_PIPELINE; --list-passes names the passes)")
    model.add_argument("--cast-to-float32", action="store_true",
                       help="cast float64/float16 inputs and weights to float32 at load "
                       "(without it such a model is refused: pplpy computes in float32)")

    out = parser.add_argument_group("outputs")
    out.add_argument("--save-outputs", action="store_true",
                     help="write each output to <save-data-dir>/pplnn_output-<name>.dat")
    out.add_argument("--save-inputs", action="store_true",
                     help="write each input to <save-data-dir>/pplnn_input-<name>.dat")
    out.add_argument("--save-data-dir", metavar="DIR", default=".",
                     help="folder for --save-outputs / --save-inputs (default: .)")
    out.add_argument("--dump-graph", nargs="?", const="final", default=None, metavar="PASS",
                     help="print the graph as the engine built it: nodes in run order, "
                     "value shapes and formats, inserted Reorder nodes, fused post-ops; with "
                     "PASS, the graph after that pass instead: an engine pass (one of: "
                     f"{', '.join(PASS_NAMES)}), a graph-optimiser pass as optimizer:<id>, "
                     "or 'all' for the graph after every pass")
    out.add_argument("--save-optimized-model", metavar="PATH",
                     help="write the graph as the engine has it after graph rewrites and "
                     "post-op fusion (no Reorder nodes) as ONNX to PATH; fused nodes are in "
                     "the pplpy domain, which pplpy reads back without optimising again")
    out.add_argument("--pass-log", action="store_true",
                     help="print what each graph-optimiser pass changed (rounds, changes, "
                     "nodes before and after, what it folded or fused); --dump-graph "
                     "prints it too")

    timing = parser.add_argument_group("timing")
    timing.add_argument("--warmup-iterations", type=_count, default=None, metavar="N",
                        help="untimed runs before the timed ones (default 1)")
    timing.add_argument("--min-profiling-iterations", type=_count, default=None, metavar="N",
                        help="timed runs; prints mean/min/max run time")
    timing.add_argument("--enable-profiling", action="store_true",
                        help="time every node over the timed runs and print per-node and "
                        "per-op-type tables")
    timing.add_argument("--profile-trace", metavar="FILE",
                        help="write the timed runs as Chrome trace events (one per step: op "
                        "type, node, shapes, formats, kernel) to FILE; open it in "
                        "https://ui.perfetto.dev (implies --enable-profiling)")

    engine = parser.add_argument_group("x86 engine")
    engine.add_argument("--num-threads", type=_positive, default=None, metavar="N",
                        help="size of the runtime's thread team (default: the physical "
                        "cores)")
    engine.add_argument("--no-bind-threads", action="store_true",
                        help="let the worker threads run on any CPU (default: each on one "
                        "CPU of the process's set)")
    engine.add_argument("--mm-policy", choices=MM_POLICIES, default="mem",
                        help="memory policy: 'mem' shares one arena between values whose "
                        "lifetimes do not overlap (default), 'perf' gives every value its own")
    engine.add_argument("--disable-fusion", action="store_true",
                        help="keep activations as separate steps instead of Conv/Gemm "
                        "post-ops")
    engine.add_argument("--max-isa", choices=ISA_NAMES,
                        help="best ISA tier to use (default: the best this CPU has, or "
                        "$PPLPY_MAX_ISA)")
    engine.add_argument("--disable-avx512", action="store_true",
                        help="do not use AVX-512 kernels (same as --max-isa fma)")
    engine.add_argument("--disable-avx-fma3", action="store_true",
                        help="use only SSE4.1 kernels (same as --max-isa sse)")
    return parser


# -- option parsing helpers ---------------------------------------------------------------


def parse_in_shapes(text):
    """"1_3_224_224,1_10" -> [(1, 3, 224, 224), (1, 10)]; raises CliError when malformed."""
    shapes = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+(_\d+)*", part):
            raise CliError(f"--in-shapes: {part!r} is not a shape like 1_3_224_224 (dims are "
                           f"whole numbers joined by '_', inputs separated by ',')")
        shapes.append(tuple(int(d) for d in part.split("_")))
    return shapes


def isa_cap(args):
    """The most restrictive of --max-isa, --disable-avx512 and --disable-avx-fma3 (or None)."""
    caps = []
    if args.max_isa:
        caps.append(args.max_isa)
    if args.disable_avx512:
        caps.append("fma")
    if args.disable_avx_fma3:
        caps.append("sse")
    return max(caps, key=ISA_NAMES.index) if caps else None


def sanitize(name):
    """A tensor name made safe for a file name, as PPL.NN does."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def _dims(dims):
    if dims is None:
        return "[?]"
    return "[" + ",".join(str(d) if isinstance(d, int) and d >= 0 else "?" for d in dims) + "]"


def _describe(dtype, shape):
    return f"{np.dtype(dtype).name} {_dims(tuple(shape))}"


# -- inputs -------------------------------------------------------------------------------


def build_input_shapes(rt):
    """Each input's dims for this run: declared dims (fixed by --in-shapes), free ones 1."""
    return {t.name: tuple(d if isinstance(d, int) and d >= 0 else 1 for d in (t.dims or ()))
            for t in rt.inputs}


def read_inputs(rt, files):
    """Read one raw file per input, checking its size against the input's type and shape."""
    paths = [p.strip() for p in files.split(",")]
    tensors = rt.inputs
    if len(paths) != len(tensors) or not all(paths):
        names = ", ".join(f'"{t.name}"' for t in tensors)
        raise CliError(f"--inputs: got {len(paths)} file name(s) {paths} for "
                       f"{len(tensors)} input(s) {names}; give one file per input, in order")
    shapes = build_input_shapes(rt)
    feeds, sources = {}, {}
    for tensor, path in zip(tensors, paths):
        shape, dtype = shapes[tensor.name], tensor.dtype
        want = math.prod(shape) * dtype.itemsize
        # Size first, from the file's metadata: a device (/dev/zero) or a huge file is
        # refused before a byte is read; then at most want + 1 bytes are read.
        try:
            info = os.stat(path)
        except OSError as exc:
            raise CliError(f'--inputs: cannot read "{path}" for input "{tensor.name}": '
                           f"{exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise CliError(f'--inputs: "{path}" (for input "{tensor.name}") is not a regular '
                           f"file; give a file of {want} bytes")
        if info.st_size != want:
            raise CliError(
                f'--inputs: "{path}" has {info.st_size} bytes but input "{tensor.name}" '
                f"({_describe(dtype, shape)}) needs {want}; write the raw {dtype.name} "
                f"elements in C order, or give --in-shapes"
            )
        try:
            with open(path, "rb") as f:
                data = f.read(want + 1)
        except OSError as exc:
            raise CliError(f'--inputs: cannot read "{path}" for input "{tensor.name}": '
                           f"{exc.strerror or exc}") from None
        if len(data) != want:
            raise CliError(
                f'--inputs: "{path}" has {len(data)} bytes but input "{tensor.name}" '
                f"({_describe(dtype, shape)}) needs {want}; write the raw {dtype.name} "
                f"elements in C order, or give --in-shapes"
            )
        feeds[tensor.name] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        sources[tensor.name] = f'from "{path}"'
    return feeds, sources


def random_inputs(rt, seed):
    """Seeded random inputs of the build shapes: floats in [0, 1), ints in [0, 10)."""
    rng = np.random.default_rng(seed)
    feeds, sources = {}, {}
    for tensor, shape in zip(rt.inputs, build_input_shapes(rt).values()):
        dtype = tensor.dtype
        if dtype.kind == "f":
            value = rng.random(shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.random(shape) < 0.5
        else:
            value = rng.integers(0, 10, size=shape).astype(dtype)
        feeds[tensor.name] = value
        sources[tensor.name] = f"random, seed {seed}"
    return feeds, sources


# -- outputs ------------------------------------------------------------------------------


def save_tensors(arrays, directory, prefix):
    """Write each array raw as <directory>/<prefix><sanitised name>.dat; returns the rows
    written as (name, path, bytes)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise CliError(f'--save-data-dir: cannot create "{directory}": '
                       f"{exc.strerror or exc}") from None
    used, rows = set(), []
    for name, array in arrays.items():
        stem = f"{prefix}{sanitize(name)}"
        filename, k = f"{stem}.dat", 2
        while filename in used:  # two names that sanitise alike must not overwrite
            filename, k = f"{stem}_{k}.dat", k + 1
        used.add(filename)
        path = os.path.join(directory, filename)
        data = np.ascontiguousarray(array).tobytes()
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise CliError(f'cannot write "{path}": {exc.strerror or exc}') from None
        rows.append((name, path, len(data)))
    return rows


def _stats(array):
    if array.size == 0:
        return "(empty)"
    if array.dtype.kind == "b":
        return f"true {int(array.sum())} of {array.size}"
    values = array.astype(np.float64)
    return f"min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"


# -- graph dump ---------------------------------------------------------------------------


def format_pass_list():
    """Every registered pass with its docstring's first line, then the default pipeline."""
    lines = ["graph optimiser passes:"]
    width = max(len(name) for name in PASSES)
    for name, cls in sorted(PASSES.items()):
        doc = " ".join((cls.__doc__ or "").split())
        first = re.split(r"(?<=[.;])\s+(?=[A-Z])", doc)[0].rstrip(".;")
        lines.append(f"  {name.ljust(width)}  {first}")
    lines.append("default pipeline (pass, convergence, dce_after, modes):")
    for entry in DEFAULT_PIPELINE:
        lines.append(f"  {entry.pass_id.ljust(width)}  {entry.convergence:<11}  "
                     f"{str(entry.dce_after).lower():<5}  {', '.join(sorted(entry.modes))}")
    return "\n".join(lines)


def check_dump_pass(name, passes):
    """--dump-graph PASS names an engine pass, optimizer:<id> of a pass in the pipeline, or
    all."""
    pipeline = passes if passes is not None else DEFAULT_PIPELINE
    optimizer = [f"{OPTIMIZER_PREFIX}{entry.pass_id}" for entry in pipeline]
    if name == "all" or name in PASS_NAMES or name in optimizer:
        return
    raise CliError(f"--dump-graph: unknown pass {name!r}; choose 'all', one of "
                   f"{', '.join(PASS_NAMES)}, or one of the pipeline's "
                   f"{', '.join(dict.fromkeys(optimizer))}")


def is_inserted_reorder(node):
    return node.domain == REORDER_DOMAIN and node.op_type == "Reorder"


def format_graph(graph, ops=None, tensor_shapes=None, title="after the x86 engine",
                 kernels=None):
    """A graph as text: nodes in run order with each value's type, dims (symbolic names where
    free) and format; Reorder nodes the engine inserted are marked with '*', fused post-ops
    and kernel algorithms are listed under their node."""
    shapes = tensor_shapes or {}
    nodes = list(graph.nodes)
    reorders = sum(1 for n in nodes if is_inserted_reorder(n))
    outputs, inputs = set(graph.output_names), set(graph.input_names)

    def fmt_of(name):
        record = graph.values.get(name)
        return record.format.name if record is not None and record.format else "-"

    def tensor(name, column):
        if not name:
            return "(omitted)"
        record = graph.values.get(name)
        ts = shapes.get(name)
        if ts is not None:
            desc = f"{ts.data_type} {_dims(ts.dims)}"
        elif record is not None:
            dims = record.dims
            text = "[?]" if dims is None else "[" + ",".join(
                "?" if d is None else str(d) for d in dims) + "]"
            desc = f"{record.dtype or '?'} {text}"
        else:
            desc = "? [?]"
        tags = []
        if name in graph.constants:
            tags.append("constant")
        elif record is not None and record.producer is None and name not in inputs:
            tags.append("packed into its kernel")
        if name in inputs:
            tags.append("graph input")
        if name in outputs:
            tags.append("graph output")
        tag = f"  ({', '.join(tags)})" if tags else ""
        return f"{name.ljust(column)}  {desc}  {fmt_of(name)}{tag}"

    lines = [f"graph {title}: {len(nodes)} node(s) in run order; "
             f"* = Reorder inserted by pplpy ({reorders})"]
    width = len(str(max(len(nodes) - 1, 0)))
    for i, node in enumerate(nodes):
        op_name = node.op_type if not node.domain else f"{node.domain}::{node.op_type}"
        if is_inserted_reorder(node):
            last = getattr(node.param, "channels_last", 0)
            lines.append(f"{i:>{width}} * {op_name} \"{node.name}\"  inserted: "
                         f"{fmt_of(node.inputs[0])} -> {fmt_of(node.outputs[0])}"
                         + (f" (channels-last, rank {last})" if last else ""))
        else:
            lines.append(f"{i:>{width}}   {op_name} \"{node.name}\"")
        pad = " " * (width + 5)
        names = [n or "(omitted)" for n in node.inputs + node.outputs]
        column = max(map(len, names), default=0)
        lines += [f"{pad}in   {tensor(name, column)}" for name in node.inputs]
        lines += [f"{pad}out  {tensor(name, column)}" for name in node.outputs]
        op = (ops or {}).get(node)
        post_ops = getattr(op, "post_ops", None)
        if post_ops:
            listed = ", ".join(e.describe(node.inputs) for e in post_ops)
            lines.append(f"{pad}post-ops  {listed}")
        algorithm = getattr((kernels or {}).get(node), "algorithm", None)
        if algorithm is not None:
            lines.append(f"{pad}algorithm  {algorithm}")
    lines.append(f"reorders inserted: {reorders}")
    return "\n".join(lines)


# -- timing and profile -------------------------------------------------------------------


def _table(header, rows, numeric):
    """Indented text table; the first ``numeric`` columns from the right are right-aligned."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    first_numeric = len(header) - numeric
    return [
        "  " + "  ".join(c.rjust(w) if i >= first_numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
        for row in cells
    ]


def format_profile(profiler):
    """Per-node and per-op-type tables of a Profiler (mean ms per run, share of total)."""
    runs = profiler.runs
    per_node = profiler.per_node()
    total = sum(ms for _, _, ms in per_node) or 1.0
    items = profiler.node_items
    team = profiler.per_node_threads()
    header = ["node", "op type", "ms", "%", "items"] + (["late us", "max/mean"] if team else [])

    def row(n, t, ms):
        cells = [n, t, f"{ms:.4f}", f"{100 * ms / total:.1f}", str(items.get(n) or "")]
        if team:
            late, spread = team.get(n, (None, None))
            cells += ["", ""] if late is None else [f"{late:.1f}", f"{spread:.2f}"]
        return cells

    lines = [f"profile per node (mean over {runs} run(s)):"]
    lines += _table(header, [row(n, t, ms) for n, t, ms in per_node], 3)
    lines.append("  items: the work items a node's step is cut into for the thread team "
                 "(fewer than the threads leave some idle; 1: a serial step)")
    if team:
        lines.append("  late us: from the step's start to the start of its last share of the "
                     "work (a thread that joined late); max/mean: its longest share against "
                     "the mean (uneven parts; where items are claimed as the step runs, "
                     "threads that ran unevenly)")
    lines.append(f"profile per op type (mean over {runs} run(s)):")
    lines += _table(
        ["op type", "nodes", "ms", "%"],
        [(t, c, f"{ms:.4f}", f"{100 * share:.1f}") for t, c, ms, share in profiler.per_op_type()],
        3,
    )
    lines.append(f"  total of nodes: {sum(ms for _, _, ms in per_node):.4f} ms per run")
    return "\n".join(lines)


def time_runs(rt, feeds, warmup, iterations, profile):
    """Run ``warmup`` untimed then ``iterations`` timed runs; returns the times in ms."""
    for _ in range(warmup):
        rt.run(feeds)
    rt.profiler.reset()
    rt.profiler.enabled = profile
    times = []
    try:
        for _ in range(iterations):
            start = time.perf_counter()
            rt.run(feeds)
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        rt.profiler.enabled = False
    return times


# -- main ---------------------------------------------------------------------------------


def format_op_list():
    """Every op context registered: domain, op, opsets, provider; overridden declarations
    and plugins that failed to import are listed after."""
    from pplpy.engines.x86.ops.declare import op_providers, overridden_ops

    rows = [(d or "ai.onnx", t, f"{f}-{last}" if f != last else str(f), provider, cls)
            for d, t, f, last, provider, cls in op_providers() if d != REORDER_DOMAIN]
    lines = [f"{len(rows)} operator range(s):"]
    lines += _table(["domain", "op", "opsets", "provided by", "op context"], rows, 0)
    overridden = overridden_ops()
    if overridden:
        lines.append("overridden (replaced with override=True):")
        lines += [f"  {d or 'ai.onnx'}::{t} opsets {f}-{last} from {p}"
                  for d, t, f, last, p in overridden]
    for name, why in failed_plugins().items():
        lines.append(f"plugin {name} failed to import: {why}")
    return "\n".join(lines)


def _run(argv):
    args = build_parser().parse_args(argv)
    if args.list_ops:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginWarning)  # listed below the table instead
            load_plugins()
        print(format_op_list())
        return 0
    if args.list_passes:
        print(format_pass_list())
        return 0
    if args.profile_trace is not None:
        args.enable_profiling = True
        folder = os.path.dirname(os.path.abspath(args.profile_trace))
        if not os.path.isdir(folder):
            raise CliError(f'--profile-trace: folder "{folder}" does not exist')
    if args.save_optimized_model is not None:
        folder = os.path.dirname(os.path.abspath(args.save_optimized_model))
        if not os.path.isdir(folder):
            raise CliError(f'--save-optimized-model: folder "{folder}" does not exist')
    in_shapes = parse_in_shapes(args.in_shapes) if args.in_shapes is not None else None
    demo = args.onnx_model is None
    if demo:
        from pplpy.data import DEMO_MODEL_PATH

        path = DEMO_MODEL_PATH
    else:
        path = args.onnx_model
        if not os.path.isfile(path):
            raise CliError(f'--onnx-model: "{path}" does not exist or is not a file')

    cap = isa_cap(args)
    passes = load_pipeline(args.passes) if args.passes is not None else None
    dumps = []
    if args.dump_graph not in (None, "final"):
        check_dump_pass(args.dump_graph, passes)

        def on_pass(name, state):
            if args.dump_graph in ("all", name):
                dumps.append(format_graph(state.graph, state.ops, title=f"after pass {name}",
                                          kernels=getattr(state, "kernels", None)))
    else:
        on_pass = None
    saved = {}
    if args.save_optimized_model is not None:
        on_pass, saved = capture(on_pass)
    engine = pplpy.X86Engine(max_isa=cap, num_threads=args.num_threads,
                             fusion=not args.disable_fusion, mm_policy=args.mm_policy,
                             bind_threads=not args.no_bind_threads)
    builder = pplpy.RuntimeBuilder.from_onnx(path, engines=[engine], in_shapes=in_shapes,
                                             on_pass=on_pass, passes=passes,
                                             cast_to_float32=args.cast_to_float32)
    rt = builder.create_runtime()
    options = rt.result.options

    print(f"pplnn (pplpy {pplpy.__version__})")
    if demo:
        print(f"model: {path}\n  (no --onnx-model given: running the demo model shipped with "
              f"pplpy)")
    else:
        print(f"model: {path}")
    cap_note = cap or os.environ.get("PPLPY_MAX_ISA") or "none"
    print(f"isa: {options.isa} (cpu has: {', '.join(supported_isas())}; cap: {cap_note})")
    print(f"threads: {options.num_threads}{_binding_note(rt)}; "
          f"fusion: {'on' if options.fusion else 'off'}")
    plugins = loaded_plugins() + [f"{name} [failed to import]" for name in failed_plugins()]
    if plugins:
        print(f"plugins: {', '.join(plugins)}")

    if args.inputs is not None:
        feeds, sources = read_inputs(rt, args.inputs)
    else:
        feeds, sources = random_inputs(rt, args.seed)
    for name, value in feeds.items():
        print(f'input "{name}": {_describe(value.dtype, value.shape)}  ({sources[name]})')

    outputs = rt.run(feeds)
    for name, value in outputs.items():
        print(f'output "{name}": {_describe(value.dtype, value.shape)}  {_stats(value)}')
    memory = rt.memory()
    print(f"memory: weights {memory['weights']} bytes, arena {rt.memory_bytes} bytes, "
          f"plan {memory['plan']} bytes")

    if "model" in saved:
        write_model(saved["model"], args.save_optimized_model)
        print(f"saved the optimized model ({len(saved['model'].graph.node)} nodes) to "
              f"{args.save_optimized_model}")
    if args.save_inputs:
        for name, file, size in save_tensors(feeds, args.save_data_dir, "pplnn_input-"):
            print(f'saved input "{name}" to {file} ({size} bytes)')
    if args.save_outputs:
        for name, file, size in save_tensors(outputs, args.save_data_dir, "pplnn_output-"):
            print(f'saved output "{name}" to {file} ({size} bytes)')
    if args.dump_graph == "final":
        print(format_graph(rt.graph, rt.result.ops, rt.tensor_shapes(), kernels=rt.result.kernels))
    for dump in dumps:
        print(dump)
    if args.pass_log or args.dump_graph is not None:  # what was folded, fused, removed
        print("graph optimiser passes:")
        for line in rt.pass_log:
            print(f"  {line}")

    iterations = args.min_profiling_iterations or 0
    if args.enable_profiling or iterations > 0:
        iterations = max(iterations, 1)
        warmup = 1 if args.warmup_iterations is None else args.warmup_iterations
        times = time_runs(rt, feeds, warmup, iterations, args.enable_profiling)
        print(f"run time over {iterations} run(s) after {warmup} warm-up: "
              f"mean {sum(times) / len(times):.4f} ms, min {min(times):.4f} ms, "
              f"max {max(times):.4f} ms")
        if args.enable_profiling:
            print(format_profile(rt.profiler))
        if args.profile_trace is not None:
            try:
                count = rt.profiler.save_trace(args.profile_trace)
            except OSError as exc:
                raise CliError(f'--profile-trace: cannot write "{args.profile_trace}": '
                               f"{exc.strerror or exc}") from None
            print(f"profile trace: {count} event(s) written to {args.profile_trace}")
    return 0


def _one_line(exc):
    """An exception's message on one line (UnsupportedOpError lists nodes on several)."""
    text = ""
    for line in (line.strip() for line in str(exc).splitlines()):
        if line:
            text += (" " if text.endswith(":") else "; ") + line if text else line
    return text


def main(argv=None):
    """Run pplnn with ``argv`` (default: sys.argv[1:]); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        return _run(argv)
    except InternalError as exc:
        return _internal(exc, debug)
    except (CliError, PplError) as exc:
        sys.stdout.flush()
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(exc) or type(exc).__name__}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version end through argparse's exit
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except MemoryError as exc:  # pplnn's own arrays (random or file inputs), not a bug
        sys.stdout.flush()
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: out of memory ({type(exc).__name__}{': ' if str(exc) else ''}"
              f"{_one_line(exc)}); reduce --in-shapes or free memory", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (pplnn ... | head): stop quietly, and point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug in pplnn or pplpy: say so, exit 1
        return _internal(exc, debug)


def _internal(exc, debug):
    sys.stdout.flush()
    if debug:
        traceback.print_exc()
    hint = "" if debug else " (run with --debug for the traceback)"
    print(f"{PROG}: internal error: {type(exc).__name__}: {_one_line(exc)}{hint}; please "
          f"report it", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
