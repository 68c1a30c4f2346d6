"""Framework overhead of pplpy against ONNX Runtime, side by side in one process.

    python benchmarks/overhead.py [--nodes 1000] [--load-nodes 4000] [--threads 1,2]

- per-node run overhead: a chain of Relu/Sigmoid nodes on a [1, 16] tensor, where kernels
  cost almost nothing and the run loop is all that is measured (median run time / nodes);
- load time: building a runtime (pplpy.load) and creating a session (ONNX Runtime) for a
  chain of --load-nodes nodes;
- re-planning: a run at a new batch size, and returning to one seen before (plan cache);
- a run after idle: eight element-wise nodes on a [4, 64, 64, 64] tensor (every step split
  over the threads) timed back to back and after 0.1 s of idle, when the workers sleep and
  must be woken (pplpy's caller never waits for a worker that has not woken yet).

Targets (not asserted anywhere): per-node overhead no more than ONNX Runtime's, load no more
than 2x ONNX Runtime's session creation.  ONNX Runtime is optional (pip install ".[bench]").
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import pplpy


def chain_model(nodes, batch="N", width=(16,)):
    ops = ["Relu", "Sigmoid"]
    graph_nodes = [helper.make_node(ops[i % 2], [f"v{i}" if i else "x"], [f"v{i + 1}"])
                   for i in range(nodes)]
    graph = helper.make_graph(
        graph_nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *width])],
        [helper.make_tensor_value_info(f"v{nodes}", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)  # loadable by older onnxruntime too


def median_s(fn, repeats, warmup=3, idle=0.0):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if idle:
            time.sleep(idle)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ort_session(path, threads):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--load-nodes", type=int, default=4000)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory(prefix="pplpy_overhead_") as tmp:
        return _measure(args, threads, tmp)


def _measure(args, threads, tmp):
    run_path = os.path.join(tmp, "run_chain.onnx")
    load_path = os.path.join(tmp, "load_chain.onnx")
    onnx.save(chain_model(args.nodes), run_path)
    onnx.save(chain_model(args.load_nodes), load_path)
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    have_ort = ort_session(run_path, 1) is not None
    print(f"pplpy {pplpy.__version__}; onnxruntime "
          f"{__import__('onnxruntime').__version__ if have_ort else 'not installed'}")

    print(f"\nper-node run overhead, chain of {args.nodes} Relu/Sigmoid on [1,16] (median us)")
    print(f"{'threads':>8} {'pplpy':>10} {'ORT':>10} {'ORT/pplpy':>10}")
    for t in threads:
        rt = pplpy.load(run_path, num_threads=t)
        ours = median_s(lambda: rt.run({"x": x}), 50) / args.nodes * 1e6
        theirs = ratio = float("nan")
        if have_ort:
            sess = ort_session(run_path, t)
            theirs = median_s(lambda: sess.run(None, {"x": x}), 50) / args.nodes * 1e6
            ratio = theirs / ours
        print(f"{t:>8} {ours:>10.3f} {theirs:>10.3f} {ratio:>10.2f}")

    print("\na run after idle: 8 nodes on [4,64,64,64], back to back and after 0.1 s idle "
          "(median ms)")
    print(f"{'threads':>8} {'pplpy':>8} {'idle':>8} {'ORT':>8} {'idle':>8}")
    wide_path = os.path.join(tmp, "wide_chain.onnx")
    onnx.save(chain_model(8, batch=4, width=[64, 64, 64]), wide_path)
    wide = np.random.default_rng(0).standard_normal((4, 64, 64, 64)).astype(np.float32)
    for t in threads:
        rt = pplpy.load(wide_path, num_threads=t, fusion=False)  # 8 steps, not one chain
        row = [median_s(lambda: rt.run({"x": wide}), 20, idle=idle) * 1e3 for idle in (0, 0.1)]
        sess = ort_session(wide_path, t) if have_ort else None
        row += ([median_s(lambda: sess.run(None, {"x": wide}), 20, idle=idle) * 1e3
                 for idle in (0, 0.1)] if sess else [float("nan")] * 2)
        print(f"{t:>8} " + " ".join(f"{v:>8.2f}" for v in row))

    print(f"\nload time, chain of {args.load_nodes} nodes (median of 3, ms)")
    ours = median_s(lambda: pplpy.load(load_path, num_threads=1), 3, warmup=1) * 1e3
    line = f"  pplpy.load {ours:.1f}"
    if have_ort:
        theirs = median_s(lambda: ort_session(load_path, 1), 3, warmup=1) * 1e3
        line += f"; ORT session {theirs:.1f}; pplpy/ORT {ours / theirs:.2f} (target <= 2)"
    print(line)

    print(f"\nre-planning, chain of {args.load_nodes} nodes with a free batch (ms)")
    rt = pplpy.load(load_path, num_threads=1)
    xs = {n: np.zeros((n, 16), np.float32) for n in (1, 2, 3)}
    rt.run({"x": xs[1]})
    start = time.perf_counter()
    rt.run({"x": xs[2]})
    new_shape = (time.perf_counter() - start) * 1e3
    cached = median_s(lambda: rt.run({"x": xs[1]}), 5, warmup=0) * 1e3
    print(f"  first run at a new batch size {new_shape:.1f}; back to a cached size "
          f"{cached:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
