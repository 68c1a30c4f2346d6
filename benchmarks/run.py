"""pplpy against ONNX Runtime and OpenVINO on the same models and inputs, in one process.

    python benchmarks/run.py [benchmarks/suite.yaml] [--threads 1,2,all] [--warmup N]
                             [--repeats N] [--models a,b] [--max-isa avx512] [--json out.json]

For each model of the suite and each thread count: the median run time in ms of pplpy, ONNX
Runtime and OpenVINO (each optional but pplpy: skipped with a note when not installed); the
ratios ORT time / pplpy time and OpenVINO time / pplpy time (above 1: pplpy is faster); the
multiply work of the model (Conv/Gemm/MatMul FLOPs, benchmarks/flops.py) divided by pplpy's
time, in GFLOP/s and in percent of threads x the single-core FMA peak of pplpy's ISA tier
measured by benchmarks/peak.py; the largest relative difference of pplpy's first output from
ORT's.  Then the geometric mean of the ratios per thread count.

Timings on shared machines wander: every figure is a median, the engines are timed
round-robin (one run of each per round, each after 0.1 s idle so that no engine is timed
against another's still-spinning worker threads) on the same inputs, and ratios within one
run are what to compare.  OpenVINO is pinned to fp32
(on a CPU with AVX512-BF16 or AMX it would otherwise compute in bf16).
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_model, median_ms, prefer_checkout  # noqa: E402

prefer_checkout()

import pplpy  # noqa: E402

import flops as flop_counter  # noqa: E402
import models as builders  # noqa: E402
import peak as peak_meter  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_threads(text):
    """Thread counts from "1,2,all" or a YAML list, deduplicated in order."""
    parts = text if isinstance(text, list) else str(text).split(",")
    out = []
    for part in parts:
        t = os.cpu_count() if str(part).strip() == "all" else int(part)
        if t not in out:
            out.append(t)
    return out


def model_path(entry, folder):
    """Path of a suite entry: {zoo: light_x} from the onnx wheel, or {builder: name}."""
    if "zoo" in entry:
        return entry["zoo"], os.path.join(LIGHT, f"{entry['zoo']}.onnx")
    name = entry["builder"]
    path = os.path.join(folder, f"{name}.onnx")
    if not os.path.exists(path):
        onnx.save(builders.BUILDERS[name](**entry.get("args", {})), path)
    return name, path


def make_feeds(rt):
    """Seeded inputs of the declared shapes (free dims 1): floats from a normal
    distribution; integer inputs (the transformers' token ids and attention masks) all 1,
    a valid id of every embedding table and a mask that keeps every token."""
    rng = np.random.default_rng(0)
    feeds = {}
    for t in rt.inputs:
        shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in t.dims)
        feeds[t.name] = (np.ones(shape, t.dtype) if np.issubdtype(t.dtype, np.integer)
                         else rng.standard_normal(shape).astype(t.dtype))
    return feeds


def first_output(result):
    return np.asarray(next(iter(result.values())) if isinstance(result, dict) else result[0])


class Engines:
    """The optional engines, imported once; a missing one is noted and skipped."""

    def __init__(self, use_ov=True):
        self.notes = []
        try:
            import onnxruntime as ort
            self.ort = ort
        except ImportError:
            self.ort = None
            self.notes.append("ONNX Runtime not installed (pip install onnxruntime): skipped")
        self.ov = None
        if use_ov:
            try:
                import openvino as ov
                self.ov = ov
                self.ov_core = ov.Core()
            except ImportError:
                self.notes.append("OpenVINO not installed (pip install openvino): skipped")

    def versions(self):
        return {"pplpy": pplpy.__version__,
                "onnxruntime": self.ort.__version__ if self.ort else None,
                "openvino": self.ov.__version__.split("-")[0] if self.ov else None,
                "numpy": np.__version__, "onnx": onnx.__version__}

    def ort_runner(self, path, threads, feeds):
        if not self.ort:
            return None
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # no warnings about the zoo's unused initializers
        sess = self.ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        ort_feeds = {k: v for k, v in feeds.items() if k in names}
        return lambda: sess.run(None, ort_feeds)

    def ov_runner(self, path, threads, feeds):
        if not self.ov:
            return None
        compiled = self.ov_core.compile_model(path, "CPU", {
            "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        names = {i.any_name for i in compiled.inputs}
        ov_feeds = {k: v for k, v in feeds.items() if k in names}
        return lambda: request.infer(ov_feeds)


# Idle time before each timed run.  Engines leave their worker threads spinning after a run
# (ONNX Runtime for tens of ms by default, OpenMP teams too), and a run timed right after
# another engine's competes with those spinners for the cores: measured here, pplpy's 2-thread
# ResNet-18 took 26.6 ms right after an ORT run and 12.4 ms after 50 ms idle.
SETTLE_S = 0.1


def interleaved_medians(runners, warmup, repeats):
    """Median ms of each runner, timed round-robin (one run of each per round, after
    SETTLE_S idle), so that a burst of load from other processes hits every engine alike
    and no engine is timed against another's spinning threads."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in runners}
    for _ in range(max(1, repeats)):
        for name, fn in runners.items():
            time.sleep(SETTLE_S)
            times[name].append(median_ms(fn, 0, 1))
    return {name: statistics.median(t) for name, t in times.items()}


def bench_model(name, path, threads_list, engines, args, peak_gflops, gflop):
    rows = []
    for threads in threads_list:
        row = {"model": name, "threads": threads, "gflop": gflop}
        rt = pplpy.load(path, num_threads=threads, max_isa=args.max_isa)
        feeds = make_feeds(rt)
        runners = {"pplpy": lambda: rt.run(feeds)}
        ours = first_output(rt.run(feeds))
        if args.unfused:  # the same engine without fuse_post_ops (pplnn --disable-fusion)
            rt_plain = pplpy.load(path, num_threads=threads, max_isa=args.max_isa,
                                  fusion=False)
            runners["unfused"] = lambda: rt_plain.run(feeds)
        run_ort = engines.ort_runner(path, threads, feeds)
        if run_ort:
            want = first_output(run_ort())
            row["max_rel_err"] = float(np.max(np.abs(ours - want))
                                       / max(1e-12, float(np.max(np.abs(want)))))
            runners["ort"] = run_ort
        try:
            run_ov = engines.ov_runner(path, threads, feeds)
            if run_ov:
                runners["ov"] = run_ov
        except Exception as exc:  # noqa: BLE001 - an OpenVINO failure is reported, not fatal
            row["ov_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        for engine, ms in interleaved_medians(runners, args.warmup, args.repeats).items():
            row[f"{engine}_ms"] = ms
        for engine in ("ort", "ov", "unfused"):
            if f"{engine}_ms" in row:
                row[f"{engine}_ratio"] = row[f"{engine}_ms"] / row["pplpy_ms"]
        row["pplpy_gflops"] = gflop / row["pplpy_ms"] * 1e3
        row["pplpy_peak_pct"] = 100 * row["pplpy_gflops"] / (peak_gflops * threads)
        if "ort_ms" in row:
            row["ort_peak_pct"] = 100 * gflop / row["ort_ms"] * 1e3 / (peak_gflops * threads)
        rows.append(row)
        print_row(row)
        del rt, runners
    return rows


HEAD = (f"{'model':18} {'thr':>3} {'GFLOP':>6} {'pplpy ms':>9} {'ORT ms':>8} {'OV ms':>8} "
        f"{'ORT/ppl':>7} {'OV/ppl':>7} {'ppl GF/s':>8} {'ppl %pk':>7} {'ORT %pk':>7} "
        f"{'rel err':>8}")


def _fmt(row, key, spec, width):
    return f"{row[key]:>{width}{spec}}" if key in row else f"{'-':>{width}}"


def print_row(row):
    print(f"{row['model']:18} {row['threads']:>3} {row['gflop']:>6.2f} "
          f"{_fmt(row, 'pplpy_ms', '.2f', 9)} {_fmt(row, 'ort_ms', '.2f', 8)} "
          f"{_fmt(row, 'ov_ms', '.2f', 8)} {_fmt(row, 'ort_ratio', '.2f', 7)} "
          f"{_fmt(row, 'ov_ratio', '.2f', 7)} {_fmt(row, 'pplpy_gflops', '.1f', 8)} "
          f"{_fmt(row, 'pplpy_peak_pct', '.1f', 7)} {_fmt(row, 'ort_peak_pct', '.1f', 7)} "
          f"{_fmt(row, 'max_rel_err', '.1e', 8)}"
          + (f" {_fmt(row, 'unfused_ms', '.2f', 9)} {_fmt(row, 'unfused_ratio', '.2f', 8)}"
             if "unfused_ms" in row else ""), flush=True)
    if "ov_error" in row:
        print(f"    OpenVINO failed on {row['model']}: {row['ov_error']}")


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite", nargs="?", default=os.path.join(HERE, "suite.yaml"))
    parser.add_argument("--threads", help="comma-separated counts, 'all' = every logical "
                        "CPU (default: the suite's, else 1,2,all)")
    parser.add_argument("--warmup", type=int, help="untimed runs (default: the suite's)")
    parser.add_argument("--repeats", type=int, help="timed runs (default: the suite's)")
    parser.add_argument("--models", help="comma-separated subset of the suite's models")
    parser.add_argument("--max-isa", choices=["avx512", "fma", "sse"])
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--unfused", action="store_true", help="also time pplpy with "
                        "fusion=False (pplnn --disable-fusion): columns unfused ms and "
                        "unfused/ppl")
    parser.add_argument("--json", metavar="PATH", help="also write every row as JSON")
    args = parser.parse_args(argv)
    with open(args.suite) as f:
        suite = yaml.safe_load(f)
    threads_list = parse_threads(args.threads or suite.get("threads") or "1,2,all")
    args.warmup = args.warmup if args.warmup is not None else suite.get("warmup", 3)
    args.repeats = args.repeats if args.repeats is not None else suite.get("repeats", 10)
    entries = suite["models"]
    if args.models:
        wanted = args.models.split(",")
        entries = [e for e in entries if (e.get("zoo") or e.get("builder")) in wanted]

    engines = Engines(use_ov=not args.no_openvino)
    from pplpy.common.isa import best_isa
    isa = best_isa(args.max_isa)
    peak_best, peak_median = peak_meter.measure(isa, seconds=0.2, repeats=5)
    info = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "isa": isa,
            "fma_peak_gflops_1core": peak_best, "fma_peak_median_gflops_1core": peak_median,
            "versions": engines.versions(), "warmup": args.warmup, "repeats": args.repeats,
            "threads": threads_list}
    print(f"{info['cpu']}, {os.cpu_count()} logical CPUs; pplpy ISA tier {isa}, "
          f"single-core FMA peak {peak_best:.1f} GFLOP/s (median {peak_median:.1f})")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    for note in engines.notes:
        print("note: " + note)
    print(f"medians of {args.repeats} runs after {args.warmup} warm-up runs; ratios above 1: "
          f"pplpy is faster; %pk = percent of threads x single-core peak\n")
    print(HEAD + (f" {'unfus ms':>9} {'unf/ppl':>8}" if args.unfused else ""))
    rows = []
    # The generated models (1.4 GB for the default suite) go when the run ends.
    with tempfile.TemporaryDirectory(prefix="pplpy_bench_models_") as folder:
        for entry in entries:
            name, path = model_path(entry, folder)
            gflop = flop_counter.count(path)[0] / 1e9
            try:
                rows += bench_model(name, path, threads_list, engines, args, peak_best, gflop)
            except pplpy.PplError as exc:
                print(f"{name:18} pplpy failed: {str(exc).splitlines()[0][:100]}")
    summary = {}
    print()
    for t in threads_list:
        sel = [r for r in rows if r["threads"] == t]
        s = {"ort": geomean([r.get("ort_ratio") for r in sel]),
             "ov": geomean([r.get("ov_ratio") for r in sel]),
             "unfused": geomean([r.get("unfused_ratio") for r in sel]),
             "pplpy_peak_pct": geomean([r["pplpy_peak_pct"] for r in sel])}
        summary[t] = s
        parts = [f"ORT/pplpy {s['ort']:.2f}" if s["ort"] else "ORT -",
                 f"OpenVINO/pplpy {s['ov']:.2f}" if s["ov"] else "OpenVINO -"]
        if s["unfused"]:
            parts.append(f"unfused/pplpy {s['unfused']:.2f}")
        print(f"geometric mean, {t} thread{'s' if t > 1 else ''}: " + ", ".join(parts)
              + f" over {len(sel)} models")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows,
                       "geomean": {str(k): v for k, v in summary.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
