"""Read an ONNX model file into a pplpy Graph.

    file --onnx.load--> ModelProto --(external data checked)-->
         --one NodeProto at a time: (domain, op_type, opset) -> registry -> param--> Graph

The graph is validated before anything is built (``validate_graph``): every failure is a
ModelError naming the node, op, attribute or value and what is allowed.  External data is
read only from files inside the model's folder: a location that is absolute or climbs out
with ".." is refused (a model must not read arbitrary files), at any depth (If / Loop / Scan
bodies too).  The main graph's initializers in external files (a large model's weights) are
read straight into their numpy arrays (``read_external_array``), never into the ModelProto:
loading them through the proto held every weight twice at the peak, and protobuf aborts the
process where an allocation fails.
"""

import dataclasses
import math
import os
import stat

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.external_data_helper import (ExternalDataInfo, load_external_data_for_tensor,
                                       uses_external_data)

from pplpy.common.data_type import DataType
from pplpy.errors import ModelError, UnsupportedOpError
from pplpy.ir import Graph, Node, ValueInfo
from pplpy.models.onnx import weight_ranges
from pplpy.models.onnx.registry import find_parser, normalize_domain
from pplpy.models.onnx.uncomputed_constants import fold_uncomputed_constants


# The largest tensor a model may declare (an input's or initializer's static dims times its
# element size); the runtime applies the same limit to every value a plan holds.
MAX_TENSOR_BYTES = 1 << 40

# Element types pplpy does not compute in: cast to float32 at load when the caller asks for
# cast_to_float32; otherwise the engine refuses the nodes that would compute in them.
FLOAT_TYPES_TO_CAST = (onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def load_model_proto(path, files=None, inline=None):
    """onnx.load with pplpy errors, and external data confined to the model's folder.

    ``path`` may also be the model's bytes (then it may not use external data).  ``files``,
    a list, gets (path, file_identity) of each external data file, taken before it is
    read.  The main graph's initializers keep their external data in their files (``parse_model``
    with the ``model_folder`` reads them into arrays); the other tensors that use external
    data (node attributes, If / Loop / Scan bodies' initializers: small) are loaded into the
    proto here.

    ``inline``, an ``InlineWeights``, asks for a binary model file's large initializers to
    stay in the file too: the proto is parsed without their raw_data (``weight_ranges.scan``)
    and ``inline`` gets the open file and, per initializer of the graph in order, (offset,
    length) of its raw bytes or None; ``parse_model(..., inline_weights=inline)`` reads them
    from that same open file.  A file the scan does not handle is loaded whole and
    ``inline`` stays empty."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        data = bytes(path)
        if not data:
            raise ModelError("the model is empty (0 bytes)")
        try:
            model = onnx.load_model_from_string(data)
        except MemoryError:
            raise  # the caller's guard says out of memory
        except Exception as exc:  # noqa: BLE001 - protobuf raises several kinds
            raise ModelError(f"the bytes given are not an ONNX model: {exc}") from exc
        check_external_data(model, None)
        return model
    try:
        path = os.fspath(path)
    except TypeError:
        raise ModelError(f"a model is a file path or bytes, got {type(path).__name__}") from None
    if not os.path.isfile(path):
        raise ModelError(f"model file {path!r} does not exist or is not a file")
    if os.path.getsize(path) == 0:
        raise ModelError(f"model file {path!r} is empty (0 bytes)")
    model = _load_skeleton(path, inline) if inline is not None else None
    if model is None:
        try:
            model = onnx.load(path, load_external_data=False)
        except MemoryError:
            raise  # the caller's guard says out of memory
        except Exception as exc:  # noqa: BLE001 - DecodeError, ValueError, OSError, ...
            raise ModelError(f"{path!r} is not a readable ONNX model: {exc}") from exc
    base = model_folder(path)
    external = check_external_data(model, base)
    if files is not None:
        files.extend((name, file_identity(name)) for name in external)
    with _reading_weights(repr(path)):
        for tensor, main_initializer in _all_tensors(model.graph):
            if not main_initializer and uses_external_data(tensor):
                load_external_data_for_tensor(tensor, base)
    return model


def _load_skeleton(path, inline):
    """The ModelProto of the binary model file ``path`` without its large initializers'
    raw_data, the open file and the ranges put in ``inline``; None when the file is not
    protobuf by its extension (onnx.load reads text formats) or the scan or parse fails
    (onnx.load then gives the error)."""
    from onnx import serialization

    fmt = serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1])
    if (fmt or "protobuf") != "protobuf":
        return None
    file = open(path, "rb")  # noqa: SIM115 - kept open in ``inline`` for the weights
    try:
        found = weight_ranges.scan(file.fileno(), os.fstat(file.fileno()).st_size,
                                   _DIRECT_TYPES)
        model = None if found is None else onnx.load_model_from_string(found.skeleton)
    except MemoryError:
        file.close()
        raise  # the caller's guard says out of memory
    except Exception:  # noqa: BLE001 - onnx.load reads it again and says what is wrong
        model = None
    if model is None or len(found.ranges) != len(model.graph.initializer):
        file.close()
        return None
    inline.file, inline.ranges = file, list(found.ranges)
    return model


class InlineWeights:
    """A model file's large initializers that ``load_model_proto`` left in the file: the
    file, open from the scan until the weights are read (one file, even if the path is
    replaced meanwhile), and per initializer (offset, length) of its raw data or None."""

    def __init__(self):
        self.file, self.ranges = None, []

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


def model_folder(path):
    """The folder a model file's external data locations are relative to; None for a
    model given as bytes."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        return None
    return os.path.dirname(os.path.abspath(os.fspath(path)))


def read_model(path, files=None, cast_to_float32=False, override_initializers=False):
    """``parse_model(load_model_proto(path, files), ...)``, each weight read from its file
    (the model file itself or its external data) straight into its array."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        return parse_model(load_model_proto(path, files), cast_to_float32,
                           override_initializers)
    inline = InlineWeights()
    try:
        model = load_model_proto(path, files, inline)
        return parse_model(model, cast_to_float32, override_initializers,
                           model_folder=model_folder(path), inline_weights=inline)
    finally:
        inline.close()


class _reading_weights:
    """Errors while reading a model's weights from a file as ModelErrors that say so (a
    MemoryError's own text is empty)."""

    def __init__(self, where, what="external data"):
        self.where, self.what = where, what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is None or issubclass(kind, ModelError):
            return False
        if issubclass(kind, MemoryError):
            raise ModelError(f"{self.where}: cannot read its {self.what}: out of memory "
                             f"(the weights must fit in memory, with room to pack them)") from exc
        if issubclass(kind, Exception):  # OSError, ValueError, onnx's checker errors
            raise ModelError(f"{self.where}: cannot read its {self.what}: {exc}") from exc
        return False


# Element types whose external bytes are their numpy array's memory (little-endian, one
# element per item): read straight into the array.  Others (bfloat16, float8, int4 ...) go
# through onnx's reader.
_DIRECT_TYPES = frozenset([
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
    onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL,
    onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128])


def _allocate(dims, dtype):
    """np.empty: a MemoryError here is the load's (tests replace it)."""
    return np.empty(dims, dtype)


def read_external_array(tensor, folder):
    """A tensor's values read from its external data file into a new array of its dims
    (the file checked by ``check_external_data`` first): the length the tensor declares
    and the file's size are checked before anything is allocated."""
    what = f'tensor "{tensor.name}"'
    if tensor.data_type not in _DIRECT_TYPES:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        load_external_data_for_tensor(copy, folder)
        return numpy_helper.to_array(copy)
    info = ExternalDataInfo(tensor)
    dims = _tensor_dims(tensor, what)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
    nbytes = dtype.itemsize
    for d in dims:
        nbytes *= d
    offset = info.offset or 0
    if info.length is not None and info.length != nbytes:
        raise ModelError(f"{what}: its external data is {info.length} bytes long, but dims "
                         f"{dims} of {_type_name(tensor.data_type)} take {nbytes}")
    what = f"{what}: its external data"
    with _open_inside(folder, info.location, what) as file:
        return _read_array(file, offset, nbytes, dims, dtype, what, info.location)


def _open_inside(folder, location, what):
    """The external data file ``location`` of ``folder`` opened for reading, checked once
    open: a regular file (a FIFO would block the load), not a symbolic link, and really in
    ``folder`` (``check_external_data`` looked at the path before; a file swapped for a link
    since must not be read)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(os.path.join(folder, location), flags)
    except OSError as exc:
        raise ModelError(f"{what}: cannot open {location!r} (a regular file in the model's "
                         f"folder, not a link): {exc.strerror}") from None
    file = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelError(f"{what}: {location!r} is not a regular file")
        opened = f"/proc/self/fd/{fd}"
        if os.path.islink(opened):  # Linux: where the descriptor really points
            real_base = os.path.realpath(folder)
            target = os.path.realpath(opened)
            if os.path.commonpath([real_base, target]) != real_base:
                raise ModelError(f"{what}: {location!r} is outside the model's folder "
                                 f"{folder!r}; move the data file next to the model")
    except BaseException:
        file.close()
        raise
    return file


def _read_array(file, offset, nbytes, dims, dtype, what, shown):
    """Bytes [offset, offset + nbytes) of the open ``file`` (``shown`` in messages) as a new
    array of ``dims`` and little-endian ``dtype``; the file's size is checked first."""
    fd = file.fileno()
    size = os.fstat(fd).st_size
    if offset + nbytes > size:
        raise ModelError(f"{what} is bytes {offset} to {offset + nbytes} of {shown!r}, "
                         f"which has {size} bytes")
    array = _allocate(dims, dtype)
    view = memoryview(array.reshape(-1)).cast("B")
    done = 0
    while done < nbytes:
        got = os.preadv(fd, [view[done:]], offset + done)
        if not got:  # the file shrank while it was read
            raise ModelError(f"{what}: {shown!r} ended at byte {offset + done} "
                             f"while it was read")
        done += got
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


def _read_inline_array(init, file, offset, length):
    """An initializer whose raw_data ``weight_ranges.scan`` left in the open model file."""
    what = f'initializer "{init.name}"'
    dims = _tensor_dims(init, what)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).newbyteorder("<")
    nbytes = dtype.itemsize * math.prod(dims)
    if nbytes != length:
        raise ModelError(f"{what} cannot be decoded: its raw data is {length} bytes, but dims "
                         f"{dims} of {_type_name(init.data_type)} take {nbytes}")
    return _read_array(file, offset, nbytes, dims, dtype, f"{what}: its raw data",
                       os.path.basename(file.name))


def file_identity(path):
    """What tells a file from a changed one: (inode, size, modification time), None when
    ``path`` is a model's bytes or no longer a file."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        return None
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def check_external_data(model, base_dir):
    """Refuse external-data locations that leave ``base_dir`` or do not exist, in every
    graph of the model (If / Loop / Scan bodies too); returns the files, each once."""
    real_base = os.path.realpath(base_dir) if base_dir is not None else None
    files = []
    for tensor, _ in _all_tensors(model.graph):
        if not uses_external_data(tensor):
            continue
        if real_base is None:
            raise ModelError(f'tensor "{tensor.name}" uses external data, which a model given '
                             f"as bytes cannot have; load it from its file")
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if "\x00" in location:
            raise ModelError(f'tensor "{tensor.name}": external data location {location!r} '
                             f"holds a NUL byte")
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
        if target not in files:
            files.append(target)
    return files


def _all_tensors(graph, main=True):
    """Every TensorProto of ``graph`` and the graphs in its nodes' attributes, at any
    depth, as (tensor, whether it is an initializer of the model's own graph)."""
    for tensor in graph.initializer:
        yield tensor, main
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, False
            for tensor in attr.tensors:
                yield tensor, False
            if attr.HasField("g"):
                yield from _all_tensors(attr.g, False)
            for body in attr.graphs:
                yield from _all_tensors(body, False)


def _value_info(vi, role="value"):
    tensor_type = vi.type.tensor_type
    kind = vi.type.WhichOneof("value")
    if kind is None:  # onnx.checker refuses a graph input or output without a type too
        raise ModelError(f'{role} "{vi.name}" has no type; declare it as a tensor with its '
                         f"element type (onnx.helper.make_tensor_value_info(name, "
                         f"TensorProto.FLOAT, None) leaves the shape out)")
    if kind != "tensor_type":
        raise ModelError(f'{role} "{vi.name}": only tensors are supported (got a '
                         f'{kind.replace("_type", "")} type)')
    data_type = DataType.from_onnx(tensor_type.elem_type)
    dims = None
    if tensor_type.HasField("shape"):
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor_type.shape.dim
        )
        negative = [d for d in dims if isinstance(d, int) and d < 0]
        if negative:
            raise ModelError(f'{role} "{vi.name}": declared dims {_show_dims(dims)} hold a '
                             f"negative dim; dims are >= 0, or a name for a free dim")
        if data_type is not None:
            _check_size(f'{role} "{vi.name}"', [d for d in dims if isinstance(d, int)],
                        data_type.itemsize)
    return ValueInfo(vi.name, data_type, dims)


def _show_dims(dims):
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _check_size(what, dims, itemsize):
    """ModelError when ``dims`` (ints) times ``itemsize`` passes MAX_TENSOR_BYTES."""
    total = itemsize
    for d in dims:
        total *= int(d)
        if total > MAX_TENSOR_BYTES:
            raise ModelError(f"{what}: dims {list(dims)} need more than {MAX_TENSOR_BYTES} "
                             f"bytes, pplpy's limit for one tensor")


def _tensor_dims(tensor, what):
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"{what}: negative dim in {dims}")
    _check_size(what, dims, 1)
    return dims


def cast_floats_to_float32(model):
    """In place: float64 / float16 Constant values and declared inputs and outputs become
    float32 (the ``cast_to_float32`` load option; see docs/errors.md).  The initializers
    are cast as ``parse_model`` reads them."""
    for node in model.graph.node:
        for attr in node.attribute:
            # Cast(to=DOUBLE), RandomNormal(dtype=FLOAT16), EyeLike(dtype=...): the values
            # they make would be float64 / float16 again, and refused.
            if (node.domain in ("", "ai.onnx") and attr.name in ("to", "dtype")
                    and attr.type == onnx.AttributeProto.INT and attr.i in FLOAT_TYPES_TO_CAST):
                attr.i = onnx.TensorProto.FLOAT
            if attr.HasField("t") and attr.t.data_type in FLOAT_TYPES_TO_CAST:
                attr.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        tensor_type = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tensor_type.elem_type in FLOAT_TYPES_TO_CAST:
            tensor_type.elem_type = onnx.TensorProto.FLOAT


def _type_name(elem_type):
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def node_names(onnx_graph):
    """The name pplpy gives each NodeProto: its own, or ``<op_type>_<index>``; unique."""
    names, used = [], set()
    for index, node_proto in enumerate(onnx_graph.node):
        name = node_proto.name or f"{node_proto.op_type}_{index}"
        while name in used:
            name = f"{name}_{index}"
        used.add(name)
        names.append(name)
    return names


def _check_text(onnx_graph):
    """Names, op types and domains are text (protobuf hands back bytes for invalid UTF-8)."""
    def bad(value, what):
        raise ModelError(f"{what} {value!r} is not valid UTF-8 text")

    for index, node in enumerate(onnx_graph.node):
        for value in (node.name, node.op_type, node.domain, *node.input, *node.output,
                      *(attr.name for attr in node.attribute)):
            if type(value) is not str:  # noqa: E721 - exact type: protobuf gives bytes
                bad(value, f"node {index} ({node.op_type!r}): name, op type, domain, value "
                           f"or attribute name")
    for vi in [*onnx_graph.input, *onnx_graph.output, *onnx_graph.value_info]:
        if type(vi.name) is not str:  # noqa: E721
            bad(vi.name, "value name")
    for init in onnx_graph.initializer:
        if type(init.name) is not str:  # noqa: E721
            bad(init.name, "initializer name")


def validate_graph(onnx_graph, names, outer=None):
    """Structure checks before anything is built; each failure is a ModelError naming the
    node, op and value: no nodes, no outputs, duplicate inputs, a value produced twice, a node
    input or graph output nothing produces (cycles are found by the topological sort).

    ``outer`` is None for a model's graph; for a subgraph it is the set of names the
    enclosing graphs define, which the subgraph may read (and it may have no nodes: an If
    branch can return an outer value)."""
    _check_text(onnx_graph)
    outer = frozenset() if outer is None else outer
    if len(onnx_graph.node) == 0 and not outer:
        raise ModelError(f'graph "{onnx_graph.name}" has no nodes: there is nothing to run '
                         f"(is the file an ONNX model?)")
    if len(onnx_graph.output) == 0:
        raise ModelError(f'graph "{onnx_graph.name}" declares no outputs')
    producer = {}  # value name -> what produces it, for messages
    for init in onnx_graph.initializer:
        if init.name in producer:
            raise ModelError(f'initializer "{init.name}" is given twice')
        producer[init.name] = f'initializer "{init.name}"'
    for sparse in onnx_graph.sparse_initializer:
        producer[sparse.values.name] = f'sparse initializer "{sparse.values.name}"'
    seen_inputs = set()
    for vi in onnx_graph.input:
        if vi.name in seen_inputs:
            raise ModelError(f'graph input "{vi.name}" is declared twice')
        if not vi.name:
            raise ModelError("a graph input has an empty name")
        seen_inputs.add(vi.name)
        producer.setdefault(vi.name, f'graph input "{vi.name}"')
    for node_proto, name in zip(onnx_graph.node, names):
        for out in node_proto.output:
            if not out:
                continue
            if out in producer:
                raise ModelError(
                    f'node "{name}" ({node_proto.op_type}): output "{out}" is also produced by '
                    f"{producer[out]}; every value must have exactly one producer"
                )
            producer[out] = f'node "{name}" ({node_proto.op_type})'
    for node_proto, name in zip(onnx_graph.node, names):
        for index, value in enumerate(node_proto.input):
            if value and value not in producer and value not in outer:
                raise ModelError(
                    f'node "{name}" ({node_proto.op_type}): input {index} "{value}" is not '
                    f"produced by any node, graph input or initializer"
                )
    seen_outputs = set()
    for vi in onnx_graph.output:
        if vi.name not in producer and vi.name not in outer:
            raise ModelError(f'graph output "{vi.name}" is not produced by any node, graph '
                             f"input or initializer")
        if vi.name in seen_outputs:
            raise ModelError(f'graph output "{vi.name}" is declared twice')
        seen_outputs.add(vi.name)


def parse_model(model, cast_to_float32=False, override_initializers=False, model_folder=None,
                inline_weights=None):
    """Turn a ModelProto into a Graph, after ``validate_graph``.

    Returns ``(graph, unparsed)`` where ``unparsed`` lists the Nodes no parser covers (their
    ``param`` is None); the caller reports them with the engine's own unsupported nodes in
    one UnsupportedOpError.  Initializers the model also lists as inputs are constants, or
    with ``override_initializers`` inputs whose default is the initializer.  With
    ``cast_to_float32`` float64 / float16 inputs and initializers become float32; otherwise
    constant subgraphs in those types are folded now (uncomputed_constants.py) and a node
    that would compute in them at run time is refused by the engine's type check (data
    movement on them is fine).  Initializers in external data files are read from
    ``model_folder`` (``load_model_proto`` checked their locations); without one they are a
    ModelError.  ``inline_weights``: the ``InlineWeights`` of initializers whose raw_data
    ``load_model_proto`` left in the file.
    """
    onnx_graph = model.graph
    names = node_names(onnx_graph)
    validate_graph(onnx_graph, names)  # text, structure
    if cast_to_float32:
        cast_floats_to_float32(model)
    opsets = {}
    for o in model.opset_import:
        if o.version < 1:
            raise ModelError(f"the model imports opset {o.version} of domain "
                             f"{o.domain or 'ai.onnx'!r}; opsets start at 1")
        opsets[normalize_domain(o.domain)] = o.version
    graph = Graph(name=onnx_graph.name or "graph", opsets=opsets)
    inline = inline_weights.ranges if inline_weights is not None else ()
    for index, init in enumerate(onnx_graph.initializer):
        _tensor_dims(init, f'initializer "{init.name}"')
        if index < len(inline) and inline[index] is not None:
            with _reading_weights(f'initializer "{init.name}"', "raw data"):
                graph.constants[init.name] = _read_inline_array(init, inline_weights.file,
                                                                *inline[index])
        else:
            graph.constants[init.name] = _initializer_array(init, model_folder)
        if cast_to_float32 and init.data_type in FLOAT_TYPES_TO_CAST:
            graph.constants[init.name] = graph.constants[init.name].astype(np.float32)
        if DataType.from_numpy(graph.constants[init.name].dtype) is None:
            # A valid model (ONNX Runtime's int4 QDQ weights) in a type pplpy does not
            # compute in: unsupported, naming the nodes that read it, not an invalid model.
            readers = [n for n in onnx_graph.node if init.name in n.input]
            raise UnsupportedOpError(
                f'initializer "{init.name}" is {_type_name(init.data_type)}, an element type '
                f"pplpy does not compute in; read by "
                + (", ".join(f'node "{n.name}" ({n.domain or "ai.onnx"}::{n.op_type})'
                             for n in readers[:3]) or "no node"),
                nodes=[(n.name, n.domain, n.op_type, opsets.get(normalize_domain(n.domain)))
                       for n in readers])
    for init in onnx_graph.sparse_initializer:
        from pplpy.models.onnx.registry import sparse_to_dense

        _tensor_dims(init.values, f'sparse initializer "{init.values.name}"')
        try:
            graph.constants[init.values.name] = sparse_to_dense(init)
        except Exception as exc:  # noqa: BLE001 - bad indices, sizes: a model problem
            raise ModelError(f'sparse initializer "{init.values.name}" cannot be decoded: '
                             f"{exc}") from exc
    for vi in onnx_graph.input:
        if vi.name in graph.constants:
            # An initializer listed as input is a default a feed may override (ONNX IR).
            # Built as a constant unless ``override_initializers``: then it is an input and
            # its initializer the default.
            info = _value_info(vi, "input")
            graph.overridable[vi.name] = info
            if not override_initializers:
                continue
            graph.defaults[vi.name] = graph.constants[vi.name]
            if info.dims is None:
                info.dims = tuple(graph.defaults[vi.name].shape)
            del graph.constants[vi.name]
        else:
            info = _value_info(vi, "input")
        elem_type = vi.type.tensor_type.elem_type
        if info.data_type is None:
            raise ModelError(f'input "{vi.name}": element type {_type_name(elem_type)} is not '
                             f"supported by pplpy")
        graph.inputs.append(info)
        record = graph.value(info.name)
        record.dtype, record.dims = info.data_type, info.dims
    graph.outputs = [_value_info(vi, "output") for vi in onnx_graph.output]
    for vi in onnx_graph.value_info:
        if vi.type.HasField("tensor_type"):
            graph.value_info[vi.name] = _value_info(vi)

    unparsed = []
    folded = () if cast_to_float32 else fold_uncomputed_constants(onnx_graph, graph.constants,
                                                                  opsets)
    _parse_nodes(graph, onnx_graph, names, opsets, unparsed, frozenset(), skip=folded)
    try:
        graph.topological_sort()
    except ValueError as exc:
        raise ModelError(f"{exc}; an ONNX graph must be acyclic") from exc
    return graph, unparsed


def _initializer_array(init, model_folder):
    """An initializer of the model's graph as a numpy array: decoded from the proto, or
    read from its external data file."""
    if uses_external_data(init):
        if model_folder is None:
            raise ModelError(f'initializer "{init.name}" uses external data, which a model '
                             f"given as bytes or as a ModelProto cannot have; load it from "
                             f"its file")
        with _reading_weights(f'initializer "{init.name}"'):
            return read_external_array(init, model_folder)
    try:
        return numpy_helper.to_array(init)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a model problem
        raise ModelError(f'initializer "{init.name}" cannot be decoded: {exc}') from exc


def _visible_names(onnx_graph):
    """Every name ``onnx_graph`` defines: initializers, inputs, node outputs."""
    names = {init.name for init in onnx_graph.initializer}
    names.update(sparse.values.name for sparse in onnx_graph.sparse_initializer)
    names.update(vi.name for vi in onnx_graph.input)
    names.update(out for node in onnx_graph.node for out in node.output if out)
    return names


def _parse_nodes(graph, onnx_graph, names, opsets, unparsed, outer, skip=()):
    """Add a Node per NodeProto to ``graph``; nodes no parser covers go to ``unparsed``.
    ``outer``: the names the enclosing graphs define (subgraphs may read them); ``skip``:
    indices of nodes already folded into constants."""
    visible = None  # names a subgraph of these nodes may read, computed once if needed
    for index, (node_proto, name) in enumerate(zip(onnx_graph.node, names)):
        if index in skip:
            continue
        domain = normalize_domain(node_proto.domain)
        opset = opsets.get(domain)
        node = Node(name, node_proto.op_type, domain, opset if opset is not None else 0,
                    node_proto.input, node_proto.output)
        if opset is None:
            raise ModelError(
                f"{node.describe()}: the model imports no opset for domain "
                f"{domain or 'ai.onnx'!r}"
            )
        entry = find_parser(domain, node_proto.op_type, opset)
        graph_attrs = any(attr.type == onnx.AttributeProto.GRAPH
                          for attr in node_proto.attribute)
        if entry is None or any(attr.type == onnx.AttributeProto.GRAPHS
                                for attr in node_proto.attribute):
            unparsed.append(node)  # no standard op takes a list of graphs
        elif graph_attrs and not entry.takes_graphs:
            # If, Loop, Scan: bodies that read the enclosing graph's values.
            if visible is None:
                visible = outer | _visible_names(onnx_graph)
            node = _parse_control_flow(node, node_proto, entry, opsets, unparsed, visible)
        else:
            node.param = entry.parse_node(node_proto, opset, name, opsets=opsets)
        graph.add_node(node)


def _parse_control_flow(node, node_proto, entry, opsets, unparsed, visible):
    """A node with GRAPH attributes (If, Loop, Scan): each attribute becomes a pplpy Graph in
    the param field of the same name; the outer values the bodies read (their free names)
    are appended to the node's inputs and to every body's inputs, in one order (see
    ``pplpy.ir.graph``)."""
    bodies = {}
    for attr in node_proto.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            bodies[attr.name] = parse_subgraph(attr.g, opsets, unparsed, visible,
                                               f'{node.describe()}, attribute {attr.name!r}')
    rest = onnx.NodeProto()
    rest.CopyFrom(node_proto)
    del rest.attribute[:]
    rest.attribute.extend(a for a in node_proto.attribute
                          if a.type != onnx.AttributeProto.GRAPH)
    param = entry.parse_node(rest, node.opset, node.name)
    fields = {f.name for f in dataclasses.fields(param)} if dataclasses.is_dataclass(
        param) else set()
    unknown = sorted(set(bodies) - fields)
    if unknown:
        raise ModelError(f"{node.describe()}: graph attribute(s) {unknown} are not taken by "
                         f"this op")
    captured = list(dict.fromkeys(name for body in bodies.values() for name in body.captured))
    for body in bodies.values():
        _capture(body, captured)
    node.param = dataclasses.replace(param, **bodies)
    return Node(node.name, node.op_type, node.domain, node.opset,
                [*node.inputs, *captured], node.outputs, node.param)


def _capture(body, captured):
    """Make ``captured`` (outer names, in this order) the last inputs of ``body``."""
    body.inputs = [info for info in body.inputs if info.name not in set(body.captured)]
    for name in captured:
        body.inputs.append(ValueInfo(name, None, None))
        body.value(name)
    body.captured = list(captured)


def parse_subgraph(onnx_graph, opsets, unparsed, outer, where):
    """A GraphProto attribute (a body of If, Loop or Scan) as a pplpy Graph.

    Its initializers become its constants; its declared inputs may leave type and shape
    out (the op fills them from the values it feeds).  Names it reads but does not define
    (its free names, nested bodies' included) are listed in ``captured`` and appended to its
    inputs; each must be defined by an enclosing graph (``outer``).  Unparsed nodes (at any
    depth) join ``unparsed``; sequence, map and optional types are a ModelError."""
    names = node_names(onnx_graph)
    try:
        validate_graph(onnx_graph, names, outer)
    except ModelError as exc:
        raise ModelError(f"{where}: {exc}") from exc
    body = Graph(name=onnx_graph.name or "body", opsets=opsets)
    for init in onnx_graph.initializer:
        _tensor_dims(init, f'{where}: initializer "{init.name}"')
        try:
            body.constants[init.name] = numpy_helper.to_array(init)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a model problem
            raise ModelError(f'{where}: initializer "{init.name}" cannot be decoded: '
                             f"{exc}") from exc
    for vi in onnx_graph.input:
        info = _body_value_info(vi, f"{where}: input")
        body.inputs.append(info)
        record = body.value(info.name)
        record.dtype, record.dims = info.data_type, info.dims
    body.outputs = [_body_value_info(vi, f"{where}: output") for vi in onnx_graph.output]
    _parse_nodes(body, onnx_graph, names, opsets, unparsed, outer)
    defined = set(body.constants) | set(body.input_names) | {
        out for node in body.nodes for out in node.outputs if out}
    read = [name for node in body.nodes for name in node.inputs if name]
    read += body.output_names
    body.captured = [name for name in dict.fromkeys(read) if name not in defined]
    _capture(body, body.captured)
    try:
        body.topological_sort()
    except ValueError as exc:
        raise ModelError(f"{where}: {exc}; an ONNX graph must be acyclic") from exc
    return body


def _body_value_info(vi, role):
    """A body input's or output's declaration; unlike a model's, type and shape may be
    left out (None)."""
    if vi.type.HasField("tensor_type") or not vi.type.WhichOneof("value"):
        if vi.type.tensor_type.elem_type == 0:
            return ValueInfo(vi.name, None, None)
    info = _value_info(vi, role)
    if info.data_type is None:
        raise ModelError(f'{role} "{vi.name}": element type '
                         f"{_type_name(vi.type.tensor_type.elem_type)} is not supported by pplpy")
    return info
