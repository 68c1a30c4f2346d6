"""Hugging Face transformers exported by PyTorch's own exporters, pplpy against ONNX Runtime
in one process: what a user who exports a model with torch.onnx.export gets.

    python benchmarks/hf_models.py export DIR [--models bert,gpt2,vit,distilbert]
                                              (or any of MORE_MODELS: convnext,segformer,
                                              deberta; SURVEY_MODELS: wav2vec2,cvt,levit,
                                              upernet,regnet,poolformer)
                                              [--exporters torchscript,dynamo]
    python benchmarks/hf_models.py run DIR [--threads 1,2] [--repeats 7]

``export`` needs torch and transformers (optional, not pplpy's dependencies; a CPU build
of torch is enough).  It builds each model from its default config with random weights
(no download: biases and norm weights are given trained-like values, since the exporters
fold all-zero biases and all-one norm weights away, which a trained checkpoint never
allows), sequence 128, and writes DIR/<model>_<exporter>.onnx.  ``run`` times every .onnx
in DIR with batch 1 and sequence 128 (free dims: the first 1, the others 128; ids below the
vocab of the model's first Gather table, masks all ones), checks pplpy's outputs against
ONNX Runtime's, and prints the median ms of each, ORT time / pplpy time, the geometric mean,
and what fused: pplpy's attention, MatMulBias and LayerNorm nodes per model, and the node
types left that a fully fused transformer layer would not have.
"""

import argparse
import collections
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, median_ms, prefer_checkout  # noqa: E402

prefer_checkout()

SEQ = 128
MODELS = ("bert", "gpt2", "vit", "distilbert")
# Exported on request (--models): ConvNeXt-T at 224 x 224, SegFormer's MiT-b0 at 512 x 512
# and DeBERTa-v3-base (relative attention, p2c and c2p): models pplpy had run behind ORT
# (slow transposes, GatherElements, two-thread GEMM splits; docs/benchmarks.md "Session 22").
MORE_MODELS = ("convnext", "segformer", "deberta")
# Session 25's survey of vision and audio models (default configs, batch 1, static shapes,
# input 224 x 224 or one second of 16 kHz audio): where pplpy had a path far off ONNX
# Runtime's (docs/benchmarks.md "Session 25").  name: (model class, config class, input).
SURVEY_MODELS = {
    "wav2vec2": ("Wav2Vec2Model", "Wav2Vec2Config", "audio"),     # 1-channel first conv
    "cvt": ("CvtModel", "CvtConfig", "image"),                     # Einsum attention
    "levit": ("LevitModel", "LevitConfig", "image"),               # Linear + BatchNorm1d
    "upernet": ("UperNetForSemanticSegmentation", "UperNetConfig", "image"),  # 2048 -> 512
    "regnet": ("RegNetModel", "RegNetConfig", "image"),            # grouped 3x3 convs
    "poolformer": ("PoolFormerModel", "PoolFormerConfig", "image"),  # NDARRAY AveragePool
}
EXPORTERS = ("torchscript", "dynamo")
FUSED = ("Attention", "PackedAttention", "MatMulBias", "AddLayerNormalization",
         "LayerNormalization", "RMSNormalization")
# Node types a fully fused layer does not have (shape arithmetic the engine evaluates on
# the host once per plan is not counted).
LEFT = ("MatMul", "Gemm", "Softmax", "Transpose", "Split", "IsNaN", "Erf", "Tanh", "Pow",
        "ReduceMean", "Gelu", "Where")


def _trained_like(model, torch):
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                norm = "norm" in name.lower() or ".ln_" in name or name.startswith("ln_")
                if norm and name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator))
                else:
                    p.add_(0.05 * torch.randn(p.shape, generator=generator))


def _model(name, torch, transformers):
    """(module, example args, input names, output names, dynamic axes)."""
    ids = torch.randint(0, 1000, (1, SEQ), dtype=torch.int64)
    ones = torch.ones(1, SEQ, dtype=torch.int64)
    tokens = {0: "batch", 1: "seq"}
    images = {"vit": ("ViTModel", "ViTConfig", 224),
              "convnext": ("ConvNextModel", "ConvNextConfig", 224),
              "segformer": ("SegformerModel", "SegformerConfig", 512)}
    if name in images:
        cls, config, size = images[name]
        module = getattr(transformers, cls)(getattr(transformers, config)())
        # batch 2: with an example batch of 1, torch.export specializes ConvNeXt's batch
        # to 1 and the dynamo export fails ("Constraints violated (batch)")
        return (module, (torch.randn(2, 3, size, size),), ["pixel_values"],
                ["last_hidden_state"], {"pixel_values": {0: "batch"}})
    if name in SURVEY_MODELS:
        cls, config, kind = SURVEY_MODELS[name]
        module = getattr(transformers, cls)(getattr(transformers, config)())
        if kind == "audio":
            return module, (torch.randn(1, 16000),), ["input_values"], ["output"], {}
        return module, (torch.randn(1, 3, 224, 224),), ["pixel_values"], ["output"], {}
    if name == "deberta":  # v3-base: relative attention through p2c and c2p, 256 buckets
        config = transformers.DebertaV2Config(
            hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, relative_attention=True, pos_att_type=["p2c", "c2p"],
            max_relative_positions=-1, position_buckets=256, norm_rel_ebd="layer_norm",
            share_att_key=True, vocab_size=128100, position_biased_input=False)
        return (transformers.DebertaV2Model(config), (ids, ones),
                ["input_ids", "attention_mask"], ["last_hidden_state"],
                {"input_ids": tokens, "attention_mask": tokens, "last_hidden_state": tokens})
    config, cls = {"bert": ("BertConfig", "BertModel"), "gpt2": ("GPT2Config", "GPT2Model"),
                   "distilbert": ("DistilBertConfig", "DistilBertModel")}[name]
    module = getattr(transformers, cls)(getattr(transformers, config)())
    if name == "gpt2":
        module.config.use_cache = False
    return (module, (ids, ones), ["input_ids", "attention_mask"], ["last_hidden_state"],
            {"input_ids": tokens, "attention_mask": tokens, "last_hidden_state": tokens})


class _FirstOutput:
    """forward(*args) -> the HF output's first tensor (the exporters want tensors)."""

    @staticmethod
    def wrap(module, names, torch):
        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *args):
                return self.inner(**dict(zip(names, args)))[0]
        return Wrapped().eval()


def export(folder, models, exporters):
    try:
        import torch
        import transformers
    except ImportError as exc:
        sys.exit(f"export needs torch and transformers ({exc}); pip install torch "
                 f"transformers onnxscript")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    for name in models:
        module, args, inputs, outputs, axes = _model(name, torch, transformers)
        _trained_like(module, torch)
        wrapped = _FirstOutput.wrap(module.eval(), inputs, torch)
        for exporter in exporters:
            torch.set_grad_enabled(False)
            path = os.path.join(folder, f"{name}_{exporter}.onnx")
            try:
                if exporter == "torchscript":
                    torch.onnx.export(wrapped, args, path, input_names=inputs,
                                      output_names=outputs, dynamic_axes=axes,
                                      opset_version=17, dynamo=False)
                else:  # the dynamo exporter takes torch.export's dynamic shapes; named
                    # Dims, so that every input's batch and sequence are one symbol each
                    dims = {}
                    shapes = tuple(
                        {axis: dims.setdefault(label, torch.export.Dim(label))
                         for axis, label in axes.get(n, {}).items()} or None
                        for n in inputs)
                    program = torch.onnx.export(wrapped, args, input_names=inputs,
                                                output_names=outputs, dynamo=True,
                                                dynamic_shapes={"args": shapes})
                    program.save(path)
                print(f"wrote {path}")
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                print(f"{name} ({exporter}): export failed: {type(exc).__name__}: {exc}")


def _feeds(model):
    import onnx

    tables = {t.name: t.dims[0] for t in model.graph.initializer if len(t.dims) == 2}
    vocab = next((tables[n.input[0]] for n in model.graph.node
                  if n.op_type == "Gather" and n.input[0] in tables), 1000)
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.dim_value else (1 if i == 0 else SEQ)
                for i, d in enumerate(tensor.shape.dim)]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if "mask" in value.name:
            feeds[value.name] = np.ones(dims, dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, min(vocab, 1000), dims).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def run(folder, threads, warmup, repeats):
    import onnx
    import onnxruntime as ort

    import pplpy

    print(machine_line())
    print(f"pplpy {pplpy.__version__}, onnxruntime {ort.__version__}; medians of {repeats} "
          f"runs after {warmup}; batch 1, sequence {SEQ}")
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".onnx"))
    ratios = collections.defaultdict(list)
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        feeds = _feeds(model)
        name = os.path.basename(path)[:-5]
        for n in threads:
            rt = pplpy.load(path, num_threads=n)
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = n, 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            got, want = rt.run(feeds), session.run(None, feeds)
            err = max(float(np.abs(got[o.name] - w).max() / max(1e-6, np.abs(w).max()))
                      for o, w in zip(session.get_outputs(), want))
            ppl = median_ms(lambda: rt.run(feeds), warmup, repeats)
            ref = median_ms(lambda: session.run(None, feeds), warmup, repeats)
            ratios[n].append(ref / ppl)
            types = collections.Counter(node.op_type for node in rt.graph.nodes)
            fused = ", ".join(f"{t} {types[t]}" for t in FUSED if types[t])
            left = ", ".join(f"{t} {types[t]}" for t in LEFT if types[t]) or "none"
            print(f"{name:24} {n:2}t  pplpy {ppl:8.2f} ms  ORT {ref:8.2f} ms  "
                  f"ORT/ppl {ref / ppl:5.2f}  rel err {err:.1e}")
            print(f"{'':28}fused: {fused}; left: {left}")
    for n, values in ratios.items():
        mean = math.exp(sum(map(math.log, values)) / len(values))
        print(f"geometric mean, {n} thread(s): ORT/pplpy {mean:.2f} over {len(values)} models")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="export HF models (needs torch and transformers)")
    e.add_argument("folder")
    e.add_argument("--models", default=",".join(MODELS))
    e.add_argument("--exporters", default=",".join(EXPORTERS))
    r = sub.add_parser("run", help="time every .onnx in the folder, pplpy against ORT")
    r.add_argument("folder")
    r.add_argument("--threads", default="1")
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.command == "export":
        models = args.models.split(",")
        known = MODELS + MORE_MODELS + tuple(SURVEY_MODELS)
        unknown = sorted(set(models) - set(known))
        if unknown:
            parser.error(f"unknown model(s) {unknown}; choose from {', '.join(known)}")
        export(args.folder, models, args.exporters.split(","))
    else:
        run(args.folder, [int(t) for t in args.threads.split(",")], args.warmup, args.repeats)


if __name__ == "__main__":
    main()
