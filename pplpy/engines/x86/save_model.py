"""The engine's graph, as it stands after graph rewrites and post-op fusion, written as ONNX
(``pplpy.save_optimized_model``, ``pplnn --save-optimized-model``).

Taken by an ``on_pass`` callback after ``fuse_post_ops`` (``SAVE_AFTER``), while constants
still hold their raw data (``release_raw_weights`` drops packed weights' raw data later):

- the engine's ``pplpy::Reorder`` nodes are left out (their readers read the reorder's
  input; one that writes a graph output becomes an Identity): formats are chosen again
  when the file is loaded;
- a Conv / ConvTranspose / Gemm / MatMul / pool / Reduce* / Resize with post-ops is written
  as its pplpy-domain twin with the post-ops as attributes, and ``pplpy::MatMulBias`` with
  them as attributes (ops/pplpy/standard_twins.py, ops/post_op_attributes.py);
- every other node is written as it is, its param turned back into attributes
  (models/onnx/param_writer.py), under the opset the model imports for its domain when
  pplpy reads the op the same at that opset; a node the optimiser wrote at an opset the
  model does not have (Gelu 20, LayerNormalization 17, Attention 23 in an opset-17 model)
  is written as its pplpy-domain twin instead, so the model keeps its own opsets and the
  standard part stays valid for ``onnx.checker``;
- constants become initializers; inputs and outputs keep their declared types and
  symbolic dims; inferred types and dims of the other values go to ``value_info``;
- opset imports: the model's, plus ``pplpy`` version 1.

A node that cannot be written faithfully (control flow, a param no attribute holds, a
post-op no kind covers) is a ``ParamWriteError`` naming it, never a wrong file.
"""

import os

import onnx
from onnx import helper, numpy_helper

from pplpy.engines.x86.ops.declare import find_op
from pplpy.engines.x86.ops.post_op_attributes import post_op_attributes
from pplpy.engines.x86.ops.pplpy.standard_twins import (TWIN_DOMAIN, TWIN_VERSION, TWINS,
                                                        twin_attributes, twin_opset)
from pplpy.errors import PplError
from pplpy.ir import subgraphs
from pplpy.models.onnx.param_writer import ParamWriteError, _same, write_attributes
from pplpy.models.onnx.registry import find_parser
from pplpy.params.x86 import FusedParam

SAVE_AFTER = "fuse_post_ops"  # the engine pass after which the graph is taken
REORDER = ("pplpy", "Reorder")
MATMUL_BIAS = ("pplpy", "MatMulBias")  # a pplpy op that carries its post-ops itself
# Beyond this many bytes of initializers the protobuf limit (2 GiB) is near: the weights go
# to one external data file beside the model.
EXTERNAL_DATA_BYTES = 1 << 30


def same_op(domain, op_type, first, second):
    """Whether pplpy reads (domain, op_type) the same at opsets ``first`` and ``second``:
    one parser entry and one op context cover both."""
    a, b = find_parser(domain, op_type, first), find_parser(domain, op_type, second)
    return (a is not None and b is not None and (a.first, a.last) == (b.first, b.last)
            and find_op(domain, op_type, first) is find_op(domain, op_type, second))


def _standard_identity(node):
    """(domain, op_type, opset) of the op a node runs: a twin's standard op, else its own."""
    if node.domain == TWIN_DOMAIN and node.op_type in TWINS:
        # the opset a twin was read as (its onnx_opset attribute: ReduceMean-13 keeps its
        # axes attribute), else the one TWINS gives it
        standard = getattr(node.param, "opset", None)
        return "", node.op_type, standard if standard is not None else TWINS[node.op_type].opset
    return node.domain, node.op_type, node.opset


def _placement(node, post_ops, opsets):
    """(domain, opset) the node is written under, and as a twin (FusedParam) the ai.onnx
    opset the twin stands for (twin_opset), else None."""
    domain, op_type, opset = _standard_identity(node)
    carrier = (domain, op_type) == MATMUL_BIAS
    model_opset = opsets.get(domain)
    if ((not post_ops or carrier) and model_opset is not None
            and same_op(domain, op_type, opset, model_opset)):
        return domain, model_opset, None
    twin = TWINS.get(op_type) if domain == "" else None
    standard = twin_opset(op_type, opset) if twin is not None else None
    if standard is not None and (standard == twin.opset or post_ops) and (
            not post_ops or twin.carries_post_ops):
        return TWIN_DOMAIN, TWIN_VERSION, standard
    if post_ops:
        why = "it has post-ops and no pplpy-domain twin that carries them"
    else:
        why = (f"the model imports opset {model_opset} of its domain, where pplpy reads "
               f"{op_type} differently, and it has no pplpy-domain twin")
    raise ParamWriteError(f"{node.describe()}: cannot be written as ONNX: {why}")


def node_proto(node, op, opsets, inputs):
    """The NodeProto of one engine node (see the module docstring)."""
    where = node.describe()
    if any(True for _ in subgraphs(node)):
        raise ParamWriteError(f"{where}: control-flow bodies cannot be saved yet")
    post_ops = tuple(getattr(op, "post_ops", None) or ())
    param = op.param
    domain, opset, standard = _placement(node, post_ops, opsets)
    twin = standard is not None
    extra = twin_attributes(node.op_type, standard) if twin else {}
    post_attrs = [helper.make_attribute(k, v) for k, v in
                  {**post_op_attributes(post_ops, where), **extra}.items()]
    entry = find_parser(domain, node.op_type, opset)
    schema = ("", node.op_type, standard if twin else opset)

    def make(attrs):
        proto = helper.make_node(node.op_type, inputs, node.outputs, name=node.name,
                                 domain=domain)
        proto.attribute.extend(attrs)
        return proto

    def reparse(attrs):
        back = entry.parse_node(make(attrs + post_attrs), opset, node.name)
        back_param, back_posts = ((back.op, back.post_ops) if isinstance(back, FusedParam)
                                  else (back, ()))
        if not _same(back_posts, post_ops):
            raise ParamWriteError(f"post-ops {post_ops} read back as {back_posts}")
        return back_param

    attrs = write_attributes(param, where, reparse,
                             schema if domain in ("", TWIN_DOMAIN) else None)
    return make(attrs + post_attrs)


def _value_info(name, dtype, dims):
    elem = dtype.value if dtype is not None else onnx.TensorProto.UNDEFINED
    shape = None if dims is None else [d if isinstance(d, (int, str)) else None for d in dims]
    return helper.make_tensor_value_info(name, elem, shape)


def optimized_model(state):
    """The ModelProto of the engine's graph in ``state`` (an EngineState after
    ``SAVE_AFTER``)."""
    graph, ops = state.graph, state.ops
    opsets = dict(graph.opsets)
    opsets.setdefault("", 1)
    opsets[TWIN_DOMAIN] = max(opsets.get(TWIN_DOMAIN, 0), TWIN_VERSION)
    for node in graph.nodes:  # domains only the engine or the optimiser wrote nodes of
        opsets.setdefault(node.domain, node.opset)
    graph_outputs = set(graph.output_names)
    alias, nodes = {}, []
    for node in graph.nodes:
        inputs = [alias.get(name, name) for name in node.inputs]
        if node.key == REORDER:
            if node.outputs[0] in graph_outputs:
                nodes.append(helper.make_node("Identity", inputs[:1], node.outputs[:1],
                                              name=node.name))
            else:
                alias[node.outputs[0]] = inputs[0]
            continue
        nodes.append(node_proto(node, ops[node], opsets, inputs))
    used = {name for proto in nodes for name in proto.input if name} | graph_outputs
    initializers = [numpy_helper.from_array(graph.constants[name], name)
                    for name in graph.constants if name in used]
    inputs = [_value_info(info.name, info.data_type, info.dims) for info in graph.inputs]
    outputs = []
    for info in graph.outputs:
        record = graph.values.get(info.name)
        outputs.append(_value_info(
            info.name, info.data_type or (record.dtype if record else None),
            info.dims if info.dims is not None else (record.dims if record else None)))
    declared = graph_outputs | set(graph.input_names) | set(graph.constants)
    value_info = [_value_info(name, graph.values[name].dtype, graph.values[name].dims)
                  for proto in nodes for name in proto.output
                  if name and name not in declared and graph.values[name].dtype is not None]
    graph_proto = helper.make_graph(nodes, graph.name, inputs, outputs, initializers,
                                    value_info=value_info)
    imports = [helper.make_opsetid(domain, version) for domain, version in sorted(opsets.items())]
    from pplpy import __version__

    model = helper.make_model(graph_proto, opset_imports=imports, producer_name="pplpy",
                              producer_version=__version__,
                              doc_string="optimised by pplpy: graph rewrites and post-op "
                                         "fusion applied; formats are chosen on load")
    model.ir_version = helper.find_min_ir_version_for(imports, ignore_unknown=True)
    return model


def capture(on_pass=None):
    """(callback, holder): ``callback(name, state)`` stores the optimised ModelProto in
    ``holder["model"]`` after ``SAVE_AFTER`` and passes every call on to ``on_pass``."""
    holder = {}

    def callback(name, state):
        if name == SAVE_AFTER:
            holder["model"] = optimized_model(state)
        if on_pass is not None:
            on_pass(name, state)

    return callback, holder


def write_model(model, path):
    """Write ``model`` to ``path`` (its weights to ``<file>.data`` beside it when they near
    protobuf's 2 GiB); a PplError saying why when it cannot."""
    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    try:
        if weights > EXTERNAL_DATA_BYTES:
            onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=os.path.basename(path) + ".data")
        else:
            onnx.save_model(model, path)
    except OSError as exc:
        raise PplError(f'cannot write the optimized model to "{path}": '
                       f"{exc.strerror or exc}") from None
