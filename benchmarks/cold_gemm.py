"""Transformer GEMMs with their weights cold, as a model runs them: pplpy against ONNX
Runtime in one process, and pplpy at several B-prefetch distances.

    python benchmarks/cold_gemm.py [--threads 1,4] [--rows 128] [--layers 12]
                                   [--prefetch 0,4,8,16] [--max-isa fma] [--repeats 5]

A chain of --layers MLP blocks, MatMul + bias 768 -> 3072 then 3072 -> 768 (BERT-base's and
GPT-2's feed-forward shapes at --rows tokens), each with weights of its own: 226 MB at 12
layers, more than any cache, so each GEMM streams its B from memory as in a model; one block
run over and over (19 MB of weights, warm wherever the last-level cache holds them) is timed
beside it.  On the Zen 4
EPYC the chain ran at 93% of the core's peak, ORT at 87-90%; on the 16-core Xeon BERT-base
and GPT-2 ran at 63% of peak at one thread (ORT 56-60%) while the same GEMM steps with warm
weights (benchmarks/brgemm.py) reached 90%: this tells whether streaming cold weights is the
difference, and which prefetch distance (PPLPY_B_PREFETCH_BLOCKS, b_prefetch.py) serves it.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

HIDDEN, FFN = 768, 3072


def mlp_chain(rows, layers, seed=0):
    """An ONNX model of `layers` MLP blocks (no activation: only the GEMMs), input x."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        for j, (k, n) in enumerate([(HIDDEN, FFN), (FFN, HIDDEN)]):
            w, b, m, y = f"w{i}_{j}", f"b{i}_{j}", f"m{i}_{j}", f"y{i}_{j}"
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), w))
            inits.append(numpy_helper.from_array(
                (0.1 * rng.standard_normal(n)).astype(np.float32), b))
            nodes += [helper.make_node("MatMul", [x, w], [m]),
                      helper.make_node("Add", [m, b], [y])]
            x = y
    nodes.append(helper.make_node("Identity", [x], ["out"]))
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, rows, HIDDEN])
          for name in ("x", "out")]
    graph = helper.make_graph(nodes, "mlp_chain", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def best_median_ms(fn, rounds, repeats):
    """The lowest of `rounds` medians of `repeats` timed calls (after one untimed call)."""
    best = float("inf")
    for _ in range(rounds):
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        best = min(best, statistics.median(times))
    return best * 1e3


def main(argv=None):
    import pplpy

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1", help="comma-separated counts")
    parser.add_argument("--rows", type=int, default=128, help="tokens (GEMM M)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--prefetch", default="", help="comma-separated "
                        "PPLPY_B_PREFETCH_BLOCKS values to time pplpy at (default: as built)")
    parser.add_argument("--max-isa", default=None, choices=("avx512", "fma", "sse"),
                        help="pplpy's ISA tier (default: the best this CPU has)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        print("onnxruntime not installed: pplpy only")
    from peak import measure

    tier = args.max_isa or pplpy.common.isa.supported_isas()[0]
    peak = measure(tier)[0]
    print(machine_line())
    print(f"pplpy tier {tier}, its single-core FMA peak {peak:.1f} GFLOP/s; {args.layers} "
          f"MLP blocks {HIDDEN} -> {FFN} -> {HIDDEN} at {args.rows} rows; best of "
          f"{args.rounds} medians of {args.repeats} runs")
    x = np.random.default_rng(1).standard_normal((1, args.rows, HIDDEN)).astype(np.float32)
    flops_per_layer = 2 * 2 * args.rows * HIDDEN * FFN
    distances = [v.strip() for v in args.prefetch.split(",") if v.strip()] or [None]
    print(f"{'case':34} {'thr':>3} {'ms':>9} {'GFLOP/s':>8} {'%peak':>6} {'ORT/ppl':>8}")
    for threads in (int(t) for t in args.threads.split(",")):
        for label, layers in (("cold (a chain)", args.layers), ("warm (one block)", 1)):
            model = mlp_chain(args.rows, layers).SerializeToString()
            flops = flops_per_layer * layers
            ort_ms = None
            if ort is not None:
                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                session = ort.InferenceSession(model, options,
                                               providers=["CPUExecutionProvider"])
                ort_ms = best_median_ms(lambda: session.run(None, {"x": x}), args.rounds,
                                        args.repeats)
                print(f"{'ORT ' + label:34} {threads:>3} {ort_ms:>9.2f} "
                      f"{flops / ort_ms / 1e6:>8.1f} "
                      f"{100 * flops / ort_ms / 1e6 / (peak * threads):>6.1f}")
            for distance in distances:
                if distance is None:
                    os.environ.pop("PPLPY_B_PREFETCH_BLOCKS", None)
                    name = f"pplpy {label}"
                else:
                    os.environ["PPLPY_B_PREFETCH_BLOCKS"] = distance
                    name = f"pplpy {label}, prefetch {distance}"
                rt = pplpy.load(model, num_threads=threads, max_isa=tier)
                ms = best_median_ms(lambda: rt.run({"x": x}), args.rounds, args.repeats)
                ratio = f"{ort_ms / ms:>8.3f}" if ort_ms is not None else f"{'-':>8}"
                print(f"{name:34} {threads:>3} {ms:>9.2f} {flops / ms / 1e6:>8.1f} "
                      f"{100 * flops / ms / 1e6 / (peak * threads):>6.1f} {ratio}")
            os.environ.pop("PPLPY_B_PREFETCH_BLOCKS", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
