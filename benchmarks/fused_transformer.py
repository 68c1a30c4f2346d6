"""The transformer fusions of the graph optimiser against the graphs they replace, and ONNX
Runtime on the same unfused graph.

    python benchmarks/fused_transformer.py [--repeats 7] [--threads 1,2] [--mask]

  attention   MatMul(Q, K^T) / sqrt(d) [+ mask] -> Softmax -> MatMul(., V), 4-D (B, H, S, d),
              built with onnx.helper; pplpy with recognize_attention (one Attention node)
              and without it (the pipeline minus that pass)
  add_ln      Add(a, b) -> LayerNormalization on (1, 128, 768), the sum read only by the
              norm (BERT) or also by another Add (GPT-2); with and without
              recognize_add_layer_norm

Fastest of --repeats timeit runs (3 calls each for attention, 20 for add_ln), in ms.
"""

import argparse
import os
import sys
import timeit

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, prefer_checkout  # noqa: E402

prefer_checkout()

import onnxruntime as ort  # noqa: E402

import pplpy  # noqa: E402
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE  # noqa: E402

F = TensorProto.FLOAT
ATTENTION_SHAPES = [(1, 12, 128, 64), (1, 12, 512, 64), (2, 4, 128, 64)]


def without(pass_id):
    return tuple(e for e in DEFAULT_PIPELINE if e.pass_id != pass_id)


def attention_model(B, H, S, d, mask):
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["sd"])]
    scores = "sd"
    inputs = [helper.make_tensor_value_info(n, F, [B, H, S, d]) for n in "qkv"]
    if mask:
        nodes.append(helper.make_node("Add", ["sd", "m"], ["sm"]))
        scores = "sm"
        inputs.append(helper.make_tensor_value_info("m", F, [B, 1, S, S]))
    nodes += [helper.make_node("Softmax", [scores], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention", inputs,
                              [helper.make_tensor_value_info("y", F, None)],
                              [helper.make_tensor("c", F, [], [float(np.sqrt(d))])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)  # loadable by older onnxruntime too


def add_ln_model(shape, sum_read):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(np.float32), n)
             for n in ("gamma", "beta", "c")]
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1)]
    outputs = ["y"]
    if sum_read:
        nodes.append(helper.make_node("Add", ["s", "c"], ["z"]))
        outputs.append("z")
    else:
        inits.pop()
    graph = helper.make_graph(
        nodes, "add_ln", [helper.make_tensor_value_info(n, F, list(shape)) for n in "ab"],
        [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)  # loadable by older onnxruntime too


def fastest_ms(fn, number, repeats):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e3


def compare(label, model, feeds, fused_op, pass_id, threads, number, repeats):
    data = model.SerializeToString()
    fused = pplpy.load(data, num_threads=threads)
    unfused = pplpy.load(data, num_threads=threads, passes=without(pass_id))
    assert fused_op in {n.op_type for n in fused.graph.nodes}, f"{pass_id} did not fire"
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    out = model.graph.output[0].name
    err = float(np.abs(fused.run(feeds)[out] - sess.run(None, feeds)[0]).max())
    tf = fastest_ms(lambda: fused.run(feeds), number, repeats)
    tu = fastest_ms(lambda: unfused.run(feeds), number, repeats)
    to = fastest_ms(lambda: sess.run(None, feeds), number, repeats)
    print(f"{label:34s} threads={threads}: fused {tf:8.3f}  unfused {tu:8.3f}  "
          f"onnxruntime {to:8.3f} ms   fused/unfused {tf / tu:.2f}  max|err| {err:.1e}",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--mask", action="store_true", help="attention with an additive mask")
    args = parser.parse_args()
    print(machine_line())
    rng = np.random.default_rng(0)
    for threads in (int(t) for t in args.threads.split(",")):
        for B, H, S, d in ATTENTION_SHAPES:
            feeds = {n: rng.standard_normal((B, H, S, d)).astype(np.float32) for n in "qkv"}
            if args.mask:
                feeds["m"] = np.where(rng.random((B, 1, S, S)) < 0.1, -1e4, 0).astype(
                    np.float32)
            compare(f"attention B{B} H{H} S{S} d{d}" + (" mask" if args.mask else ""),
                    attention_model(B, H, S, d, args.mask), feeds, "Attention",
                    "recognize_attention", threads, 3, args.repeats)
        shape = (1, 128, 768)
        feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "ab"}
        for sum_read in (False, True):
            compare(f"add_ln {shape}" + (" sum read" if sum_read else ""),
                    add_ln_model(shape, sum_read), feeds, "AddLayerNormalization",
                    "recognize_add_layer_norm", threads, 20, args.repeats)


if __name__ == "__main__":
    main()
