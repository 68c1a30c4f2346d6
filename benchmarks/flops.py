"""FLOPs of an ONNX model's Conv, ConvTranspose, Gemm and MatMul nodes (2 per multiply-add).

    python benchmarks/flops.py model.onnx [...]

Shapes come from onnx.shape_inference (with data propagation, so weights built by
ConstantOfShape count too).  Every other op (element-wise, pooling, BN) is left out: they are
memory-bound and the GFLOP/s quoted by the benchmark measures the multiply work only, the
usual convention.
"""

import sys

import numpy as np
import onnx
from onnx import shape_inference


def _shapes(model):
    model = shape_inference.infer_shapes(model, data_prop=True)
    shapes = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                               for d in t.shape.dim]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    return model, shapes


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _prod(dims):
    return int(np.prod(dims, dtype=np.int64)) if dims else 1


def node_flops(node, shapes):
    """FLOPs of one node, or None when a shape it needs is unknown; 0 for other ops."""
    get = shapes.get
    if node.op_type == "Conv":
        w, y = get(node.input[1]), get(node.output[0])
        if not w or not y or None in w or None in y:
            return None
        # each output element: (C_in / group) * prod(kernel) multiply-adds = prod(w[1:])
        return 2 * _prod(y) * _prod(w[1:])
    if node.op_type == "ConvTranspose":
        x, w = get(node.input[0]), get(node.input[1])
        if not x or not w or None in x or None in w:
            return None
        # each input element scatters into (C_out / group) * prod(kernel) = prod(w[1:])
        return 2 * _prod(x) * _prod(w[1:])
    if node.op_type == "Gemm":
        a, y = get(node.input[0]), get(node.output[0])
        if not a or not y or None in a or None in y:
            return None
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return 2 * _prod(y) * k
    if node.op_type == "MatMul":
        a, y = get(node.input[0]), get(node.output[0])
        if not a or not y or None in a or None in y:
            return None
        return 2 * _prod(y) * a[-1]
    return 0


def count(model):
    """(total FLOPs, {op_type: FLOPs}, nodes whose shapes were unknown)."""
    if isinstance(model, (str, bytes)):
        model = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
    model, shapes = _shapes(model)
    by_op, unknown = {}, []
    for node in model.graph.node:
        f = node_flops(node, shapes)
        if f is None:
            unknown.append(node.name or node.output[0])
        elif f:
            by_op[node.op_type] = by_op.get(node.op_type, 0) + f
    return sum(by_op.values()), by_op, unknown


def main(argv):
    for path in argv[1:]:
        total, by_op, unknown = count(path)
        parts = ", ".join(f"{k} {v / 1e9:.3f}" for k, v in sorted(by_op.items()))
        note = f"; shapes unknown for {len(unknown)} nodes" if unknown else ""
        print(f"{path}: {total / 1e9:.3f} GFLOP ({parts}){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
