"""The demo model: a small image classifier built with onnx.helper.

    image [1,3,32,32]
      -> Conv 3->16 3x3 pad 1 -> Relu -> MaxPool 2x2
      -> Conv 16->24 3x3 pad 1 -> LeakyRelu(0.1)
      -> GlobalAveragePool -> Flatten -> Gemm 24->10 -> Softmax
      -> probabilities [1,10]

Weights are He-scaled normal draws from ``numpy.random.default_rng(0)``, so the file is
the same on every machine.  Regenerate ``demo.onnx`` with ``python -m pplpy.data.demo_model``
(a test checks the committed file matches this function).
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8  # opset 13 needs IR 7+; 8 keeps the file readable by older onnx releases
INPUT_SHAPE = (1, 3, 32, 32)
NUM_CLASSES = 10


def _he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def build_demo_model():
    """The demo CNN as an onnx.ModelProto (deterministic weights)."""
    rng = np.random.default_rng(0)
    weights = {
        "conv1.weight": _he(rng, (16, 3, 3, 3), 3 * 9),
        "conv1.bias": (0.1 * rng.standard_normal(16)).astype(np.float32),
        "conv2.weight": _he(rng, (24, 16, 3, 3), 16 * 9),
        "conv2.bias": (0.1 * rng.standard_normal(24)).astype(np.float32),
        "fc.weight": _he(rng, (NUM_CLASSES, 24), 24),  # [out, in]: Gemm with transB=1
        "fc.bias": (0.1 * rng.standard_normal(NUM_CLASSES)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"],
                         name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"],
                         name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["conv2"], ["leaky_relu2"], name="leaky_relu2",
                         alpha=0.1),
        helper.make_node("GlobalAveragePool", ["leaky_relu2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flatten"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flatten", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "pplpy_demo_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                       [INPUT_SHAPE[0], NUM_CLASSES])],
        initializer=[numpy_helper.from_array(v, name) for name, v in weights.items()],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="pplpy.data.demo_model",
        doc_string="pplpy's demo CNN: run it with `pplnn` (no arguments)",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv=None):
    """Write the demo model (to pplpy/data/demo.onnx unless a path is given)."""
    from pplpy.data import DEMO_MODEL_PATH

    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else DEMO_MODEL_PATH
    onnx.save(build_demo_model(), path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
