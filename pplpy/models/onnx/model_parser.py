"""Read an ONNX model file into a pplpy Graph.

    file --onnx.load--> ModelProto --(external data checked, then loaded)-->
         --one NodeProto at a time: (domain, op_type, opset) -> registry -> param--> Graph

External data is read only from files inside the model's folder: a location that is
absolute or climbs out with ".." is refused (a model must not read arbitrary files).
"""

import os

import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper
from onnx.external_data_helper import load_external_data_for_model, uses_external_data

from pplpy.common.data_type import DataType
from pplpy.errors import ModelError
from pplpy.ir import Graph, Node, ValueInfo
from pplpy.models.onnx.registry import find_parser, normalize_domain


def load_model_proto(path):
    """onnx.load with pplpy errors, and external data confined to the model's folder."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelError(f"model file {path!r} does not exist or is not a file")
    try:
        model = onnx.load(path, load_external_data=False)
    except (DecodeError, ValueError, OSError) as exc:
        raise ModelError(f"{path!r} is not a readable ONNX model: {exc}") from exc
    base = os.path.dirname(os.path.abspath(path))
    check_external_data(model, base)
    try:
        load_external_data_for_model(model, base)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path!r}: cannot read its external data: {exc}") from exc
    return model


def check_external_data(model, base_dir):
    """Refuse external-data locations that leave ``base_dir`` or do not exist."""
    real_base = os.path.realpath(base_dir)
    for tensor in _all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        target = os.path.realpath(os.path.join(real_base, location))
        if os.path.isabs(location) or os.path.commonpath([real_base, target]) != real_base:
            raise ModelError(
                f'tensor "{tensor.name}": external data location {location!r} is outside the '
                f"model's folder {base_dir!r}; move the data file next to the model"
            )
        if not os.path.isfile(target):
            raise ModelError(
                f'tensor "{tensor.name}": external data file {location!r} not found in '
                f"{base_dir!r}"
            )


def _all_tensors(model):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t


def _value_info(vi):
    tensor_type = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ModelError(f'value "{vi.name}": only tensor inputs/outputs are supported')
    data_type = DataType.from_onnx(tensor_type.elem_type)
    dims = None
    if tensor_type.HasField("shape"):
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor_type.shape.dim
        )
    return ValueInfo(vi.name, data_type, dims)


def parse_model(model):
    """Turn a ModelProto into a Graph.

    Returns ``(graph, unparsed)`` where ``unparsed`` lists the Nodes no parser covers (their
    ``param`` is None); the caller reports them with the engine's own unsupported nodes in
    one UnsupportedOpError.
    """
    onnx_graph = model.graph
    opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
    graph = Graph(name=onnx_graph.name or "graph", opsets=opsets)
    for init in onnx_graph.initializer:
        try:
            graph.constants[init.name] = numpy_helper.to_array(init)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a model problem
            raise ModelError(f'initializer "{init.name}" cannot be decoded: {exc}') from exc
    for init in onnx_graph.sparse_initializer:
        from pplpy.models.onnx.registry import sparse_to_dense

        graph.constants[init.values.name] = sparse_to_dense(init)
    for vi in onnx_graph.input:
        if vi.name in graph.constants:
            continue  # an initializer listed as input: a default that pplpy treats as constant
        info = _value_info(vi)
        if info.data_type is None:
            raise ModelError(
                f'input "{vi.name}": element type {vi.type.tensor_type.elem_type} is not '
                f"supported by pplpy"
            )
        graph.inputs.append(info)
        record = graph.value(info.name)
        record.dtype, record.dims = info.data_type, info.dims
    graph.outputs = [_value_info(vi) for vi in onnx_graph.output]
    for vi in onnx_graph.value_info:
        if vi.type.HasField("tensor_type"):
            graph.value_info[vi.name] = _value_info(vi)

    unparsed = []
    names = set()
    for index, node_proto in enumerate(onnx_graph.node):
        domain = normalize_domain(node_proto.domain)
        opset = opsets.get(domain)
        name = node_proto.name or f"{node_proto.op_type}_{index}"
        while name in names:
            name = f"{name}_{index}"
        names.add(name)
        node = Node(name, node_proto.op_type, domain, opset if opset is not None else 0,
                    node_proto.input, node_proto.output)
        if opset is None:
            raise ModelError(
                f"{node.describe()}: the model imports no opset for domain "
                f"{domain or 'ai.onnx'!r}"
            )
        if node_proto.op_type in ("If", "Loop", "Scan") or any(
            attr.HasField("g") or len(attr.graphs) for attr in node_proto.attribute
        ):
            unparsed.append(node)
            graph.add_node(node)
            continue
        entry = find_parser(domain, node_proto.op_type, opset)
        if entry is None:
            unparsed.append(node)
        else:
            node.param = entry.parse_node(node_proto, opset)
        graph.add_node(node)
    try:
        graph.topological_sort()
    except ValueError as exc:
        raise ModelError(str(exc)) from exc
    return graph, unparsed
