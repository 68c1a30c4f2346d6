"""ONNX Runtime's time per op type on a model, to set beside pplpy's
(``pplnn --enable-profiling``): which ops ORT runs faster, not only that it is faster.

    python benchmarks/ort_profile.py model.onnx [--threads 1] [--runs 10] [--nodes 0]

ORT's own profiler (SessionOptions.enable_profiling) records every node's kernel time; this
sums them per op type over --runs runs after two untimed ones and prints ms per run and the
share of the total, ORT's op names as its graph optimiser left them (Gemm, FusedMatMul,
FusedConv, SkipLayerNormalization ...); --nodes N adds the N slowest nodes (ORT names a
fused node after its output, so most can be matched with pplpy's per-node profile by eye).
Inputs are random: floats standard normal, integers in [0, 100), bools half True.  The
profile file is written to a temporary folder and removed.
"""

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np


def random_feeds(model, seed=0):
    """Random inputs for every graph input of ``model`` that is not an initializer."""
    import onnx

    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.integers(0, 100, shape).astype(dtype)
    return feeds


def profile(path, threads, runs):
    """({op type: (nodes, ms per run)}, {(node, op type): ms per run}) of ORT's kernel times
    on the model at ``path``."""
    import onnx
    import onnxruntime as ort

    feeds = random_feeds(onnx.load(path, load_external_data=False))
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "ort")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for _ in range(2):
            session.run(None, feeds)
        # The untimed runs are in the file too: count from the third run of each node.
        for _ in range(runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    seen = collections.Counter()
    total_us = collections.defaultdict(float)
    node_us = collections.defaultdict(float)
    nodes = collections.defaultdict(set)
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        name = event["name"]
        seen[name] += 1
        if seen[name] <= 2:
            continue
        op_type = event["args"]["op_name"]
        total_us[op_type] += event["dur"]
        node_us[name[:-len("_kernel_time")], op_type] += event["dur"]
        nodes[op_type].add(name)
    return ({t: (len(nodes[t]), total_us[t] / runs / 1e3) for t in total_us},
            {key: us / runs / 1e3 for key, us in node_us.items()})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=0, help="also list the N slowest nodes")
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort
    except ImportError:
        print("ort_profile: onnxruntime is not installed")
        return 1
    table, per_node = profile(args.model, args.threads, args.runs)
    total = sum(ms for _, ms in table.values())
    print(f"ONNX Runtime {ort.__version__}, {args.model}, {args.threads} thread(s), mean of "
          f"{args.runs} runs after 2 untimed")
    print(f"  {'op type':28} {'nodes':>5} {'ms':>10} {'%':>6}")
    for op_type, (count, ms) in sorted(table.items(), key=lambda kv: -kv[1][1]):
        print(f"  {op_type:28} {count:>5} {ms:>10.4f} {100 * ms / total:>6.1f}")
    print(f"  total of nodes: {total:.4f} ms per run")
    if args.nodes > 0:
        print(f"  {'node':50} {'op type':20} {'ms':>9}")
        for (name, op_type), ms in sorted(per_node.items(), key=lambda kv: -kv[1])[:args.nodes]:
            print(f"  {name:50} {op_type:20} {ms:>9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
