"""Real-size CNNs and transformers built with onnx.helper and random weights (fixed seed,
no downloads).

    python benchmarks/models.py --verify        # check every builder (see verify())
    python benchmarks/models.py --save DIR      # write the full-size models as .onnx

Each builder returns an opset-17 ModelProto shaped the way torch.onnx.export writes the
torchvision network in eval mode without constant folding: Conv with bias, then a
BatchNormalization node (left for the engine to fold), Clip(min, max as inputs) for ReLU6,
Sigmoid * Mul for SiLU/Swish, GlobalAveragePool -> Flatten -> Gemm(transB=1) classifier.
Input "input" (N x 3 x H x W), output "output" (N x classes).  ``width`` scales every
channel count and ``size`` the image side, so a small variant of the same graph can be
checked against onnx.reference.

The transformers (BERT-base, GPT-2 small, ViT-B/16: ``TRANSFORMER_BUILDERS``, with a
``layers`` option, 12 by default) come from tests/models/graph_builders.py, in the forms the
PyTorch exporter writes: Linear as MatMul + Add, attention as MatMul/Div/Add(mask)/Softmax/
MatMul with Reshape/Transpose and Shape/Gather/Concat shape subgraphs, Erf (BERT, ViT) or
Tanh (GPT-2) GELU, LayerNormalization (``ln="decomposed"``: ReduceMean/Sub/Pow/Sqrt/Div).
"""

import argparse
import importlib.util
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import REPO, prefer_checkout  # noqa: E402

prefer_checkout()

OPSET = 17


class _Net:
    """Accumulates nodes and initializers; each layer method returns its output name."""

    def __init__(self, name, seed, gain=2.0):
        self.name = name
        self.gain = gain        # He init: weight variance gain / fan_in (2 suits ReLU)
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def _fresh(self, kind):
        self.count += 1
        return f"{kind}_{self.count}"

    def _const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def _node(self, op, inputs, **attrs):
        out = self._fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, group=1, bias_center=0.0):
        """Conv with bias (He-initialised weights), 'same'-style symmetric padding."""
        name = self._fresh("conv")
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(self.gain / fan_in)
        b = bias_center + self.rng.uniform(-0.05, 0.05, cout)
        pad = (k - 1) // 2
        out = name
        self.nodes.append(helper.make_node(
            "Conv", [x, self._const(name + ".weight", w), self._const(name + ".bias", b)],
            [out], name=name, kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad] * 4, group=group, dilations=[1, 1]))
        return out

    def bn(self, x, c, gamma_scale=1.0):
        name = self._fresh("bn")
        r = self.rng
        var = r.uniform(0.5, 1.5, c)
        # gamma ~ sqrt(var): each BN keeps the activations' scale, so that 50 layers deep the
        # output still depends on the input (a gain of 0.75 per BN would shrink it by 1e-6)
        params = [r.uniform(0.9, 1.1, c) * np.sqrt(var) * gamma_scale,
                  r.uniform(-0.1, 0.1, c), r.uniform(-0.1, 0.1, c), var]
        ins = [self._const(f"{name}.{p}", v)
               for p, v in zip(("weight", "bias", "running_mean", "running_var"), params)]
        self.nodes.append(helper.make_node("BatchNormalization", [x, *ins], [name], name=name,
                                           epsilon=1e-5, momentum=0.9))
        return name

    def relu(self, x):
        return self._node("Relu", [x])

    def relu6(self, x):
        if "relu6.min" not in {t.name for t in self.inits}:
            self._const("relu6.min", np.float32(0.0))
            self._const("relu6.max", np.float32(6.0))
        return self._node("Clip", [x, "relu6.min", "relu6.max"])

    def swish(self, x):
        return self._node("Mul", [x, self._node("Sigmoid", [x])])

    def add(self, a, b):
        return self._node("Add", [a, b])

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act=None, gamma_scale=1.0):
        y = self.bn(self.conv(x, cin, cout, k, stride, group), cout, gamma_scale)
        return act(y) if act else y

    def squeeze_excite(self, x, c, c_squeeze, act):
        s = self._node("GlobalAveragePool", [x])
        s = act(self.conv(s, c, c_squeeze, 1))
        # gates near 0.95 (bias 3): random gates near 0.5 would halve the signal per block
        s = self._node("Sigmoid", [self.conv(s, c_squeeze, c, 1, bias_center=3.0)])
        return self._node("Mul", [x, s])

    def classifier(self, x, c, classes):
        x = self._node("Flatten", [self._node("GlobalAveragePool", [x])], axis=1)
        w = self.rng.standard_normal((classes, c)) * np.sqrt(1.0 / c)
        b = self.rng.uniform(-0.05, 0.05, classes)
        self.nodes.append(helper.make_node(
            "Gemm", [x, self._const("fc.weight", w), self._const("fc.bias", b)], ["output"],
            name="fc", alpha=1.0, beta=1.0, transB=1))
        return "output"

    def model(self, batch, size, classes):
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="pplpy-benchmarks")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def _ch(c, width, divisor=8):
    """Channels scaled by width, rounded to a multiple of divisor as torchvision does."""
    c = c * width
    new = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return int(new + divisor) if new < 0.9 * c else int(new)


def mobilenet_v2(batch=1, size=224, width=1.0, classes=1000, seed=0):
    """torchvision MobileNetV2: inverted residuals with ReLU6, depthwise 3x3."""
    net = _Net("mobilenet_v2", seed)
    cin = _ch(32, width)
    x = net.conv_bn("input", 3, cin, 3, 2, act=net.relu6)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        cout = _ch(c, width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = net.conv_bn(y, cin, hidden, 1, act=net.relu6)
            y = net.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act=net.relu6)
            y = net.conv_bn(y, hidden, cout, 1, gamma_scale=0.5)
            x = net.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    last = _ch(1280, max(1.0, width))
    x = net.conv_bn(x, cin, last, 1, act=net.relu6)
    net.classifier(x, last, classes)
    return net.model(batch, size, classes)


def resnet50(batch=1, size=224, width=1.0, classes=1000, seed=0):
    """torchvision ResNet-50 (v1.5: stride on the 3x3 conv of each bottleneck)."""
    net = _Net("resnet50", seed)
    stem = _ch(64, width)
    x = net.conv_bn("input", 3, stem, 7, 2, act=net.relu)
    x = net._node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = stem
    for planes, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        mid = _ch(planes, width)
        cout = mid * 4
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = net.conv_bn(x, cin, mid, 1, act=net.relu)
            y = net.conv_bn(y, mid, mid, 3, s, act=net.relu)
            # small last gamma keeps 16 residual additions from growing the activations
            y = net.conv_bn(y, mid, cout, 1, gamma_scale=0.3)
            shortcut = net.conv_bn(x, cin, cout, 1, s) if i == 0 else x
            x = net.relu(net.add(y, shortcut))
            cin = cout
    net.classifier(x, cin, classes)
    return net.model(batch, size, classes)


def resnet18(batch=1, size=224, width=1.0, classes=1000, seed=0):
    """torchvision ResNet-18: basic blocks (Conv-BN-Relu-Conv-BN, Add of the shortcut, Relu),
    the residual Add that fuses into the second conv as a sum post-op."""
    net = _Net("resnet18", seed)
    stem = _ch(64, width)
    x = net.conv_bn("input", 3, stem, 7, 2, act=net.relu)
    x = net._node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = stem
    for planes, blocks, stride in [(64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)]:
        cout = _ch(planes, width)
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = net.conv_bn(x, cin, cout, 3, s, act=net.relu)
            y = net.conv_bn(y, cout, cout, 3, gamma_scale=0.3)
            shortcut = net.conv_bn(x, cin, cout, 1, s) if s != 1 or cin != cout else x
            x = net.relu(net.add(y, shortcut))
            cin = cout
    net.classifier(x, cin, classes)
    return net.model(batch, size, classes)


def efficientnet_b0(batch=1, size=224, width=1.0, classes=1000, seed=0):
    """EfficientNet-B0 layout: MBConv blocks with depthwise 3x3/5x5, SiLU as Sigmoid*Mul,
    squeeze-excite (GlobalAveragePool -> Conv -> SiLU -> Conv -> Sigmoid -> Mul)."""
    # SiLU passes less of a unit-variance signal than ReLU: a larger init gain keeps the
    # activations' scale, so the output still depends on the input 80 layers deep
    net = _Net("efficientnet_b0", seed, gain=2.5)
    cin = _ch(32, width)
    x = net.conv_bn("input", 3, cin, 3, 2, act=net.swish)
    for e, k, s, c, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2),
                          (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
                          (6, 3, 1, 320, 1)]:
        cout = _ch(c, width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * e
            y = x
            if e != 1:
                y = net.conv_bn(y, cin, hidden, 1, act=net.swish)
            y = net.conv_bn(y, hidden, hidden, k, stride, group=hidden, act=net.swish)
            y = net.squeeze_excite(y, hidden, max(1, cin // 4), net.swish)
            y = net.conv_bn(y, hidden, cout, 1, gamma_scale=0.5)
            x = net.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    last = _ch(1280, max(1.0, width))
    x = net.conv_bn(x, cin, last, 1, act=net.swish)
    net.classifier(x, last, classes)
    return net.model(batch, size, classes)


CNN_BUILDERS = {"mobilenet_v2": mobilenet_v2, "resnet18": resnet18, "resnet50": resnet50,
                "efficientnet_b0": efficientnet_b0}


def _graph_builders():
    """tests/models/graph_builders.py, where the exporter-style transformer builders live
    once: the tests check them at tiny size (tests/models/test_transformer_benchmarks.py),
    the suite times them at real size.  Loaded by path: the tests' folder is no package."""
    path = os.path.join(REPO, "tests", "models", "graph_builders.py")
    spec = importlib.util.spec_from_file_location("pplpy_tests_graph_builders", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bert_base(layers=12, batch=1, seq=128, ln="fused", seed=0):
    """BERT-base (hidden 768, 12 heads, FFN 3072, vocab 30522) with fixed input dims:
    inputs input_ids and attention_mask [batch, seq] int64."""
    return _graph_builders().bert_model(layers=layers, batch=batch, seq=seq, ln=ln, seed=seed)


def gpt2_small(layers=12, batch=1, seq=128, seed=1):
    """GPT-2 small (hidden 768, 12 heads, vocab 50257, causal mask): input input_ids."""
    return _graph_builders().gpt2_model(layers=layers, batch=batch, seq=seq, seed=seed)


def vit_b16(layers=12, batch=1, size=224, seed=5):
    """ViT-B/16 (patch 16 as a Conv, hidden 768, 12 heads, 1000 classes): input
    pixel_values [batch, 3, size, size]."""
    return _graph_builders().vit_model(layers=layers, batch=batch, image=size, seed=seed)


# Checked at tiny size by tests/models/test_transformer_benchmarks.py (verify() skips them).
TRANSFORMER_BUILDERS = {"bert_base": bert_base, "gpt2_small": gpt2_small, "vit_b16": vit_b16}
BUILDERS = {**CNN_BUILDERS, **TRANSFORMER_BUILDERS}


def _input(model, seed=1):
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def _rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))


def verify(names=None, tol=1e-3):
    """Each builder twice: a small variant (width 0.25, 64x64: same graph structure) through
    pplpy against onnx.reference, and the full-size model through pplpy against ONNX Runtime.
    Returns the number of failures."""
    import pplpy

    from onnx.reference import ReferenceEvaluator

    failures = 0
    for name in names or CNN_BUILDERS:
        if name in TRANSFORMER_BUILDERS:
            print(f"{name:16} checked at tiny size against ONNX Runtime by "
                  f"tests/models/test_transformer_benchmarks.py")
            continue
        small = BUILDERS[name](size=64, width=0.25, classes=10)
        x = _input(small)
        want = ReferenceEvaluator(small).run(None, {"input": x})[0]
        got = pplpy.load(small.SerializeToString(), num_threads=1).run({"input": x})
        got = got["output"] if isinstance(got, dict) else got[0]
        err = _rel_err(np.asarray(got), want)
        failures += err > tol
        print(f"{name:16} small vs onnx.reference: max rel err {err:.2e} "
              f"{'ok' if err <= tol else 'FAIL'}")
        try:
            import onnxruntime as ort
        except ImportError:
            print(f"{name:16} full size: onnxruntime not installed, skipped")
            continue
        full = BUILDERS[name]()
        x = _input(full)
        blob = full.SerializeToString()
        want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(
            None, {"input": x})[0]
        got = pplpy.load(blob, num_threads=1).run({"input": x})
        got = got["output"] if isinstance(got, dict) else got[0]
        err = _rel_err(np.asarray(got), want)
        failures += err > tol
        print(f"{name:16} full vs onnxruntime:    max rel err {err:.2e} "
              f"{'ok' if err <= tol else 'FAIL'} ({len(full.graph.node)} nodes)")
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--save", metavar="DIR")
    parser.add_argument("--models", default=",".join(BUILDERS))
    args = parser.parse_args(argv)
    names = args.models.split(",")
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for name in names:
            onnx.save(BUILDERS[name](), os.path.join(args.save, f"{name}.onnx"))
    if args.verify:
        return 1 if verify(names) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
