"""Type and shape inference over a graph in topological order, with host evaluation of the
small integer values that decide shapes.

Types are inferred when the engine builds the graph.  Shapes are inferred then from the
declared or given input dims (free dims take probe values; see ``symbolic_dims``) and again
whenever a run feeds new input shapes, when the runtime makes a plan for them.  While shapes
flow, a node whose inputs are all known values (constants, value-deciding feeds, earlier host
results) and whose outputs are small integer tensors, and every Shape node, is evaluated on
the host: PyTorch's Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains cost nothing
per inference.
"""

import operator

from pplpy.common.data_type import DataType
from pplpy.common.versioned_registry import provider_of
from pplpy.engines.x86.ops.op_context import ValueRequired
from pplpy.errors import (InputError, InternalError, PluginError, PplError, ShapeError,
                          UnsupportedOpError)
from pplpy.models.onnx.registry import inputs_typed_as_first

# Element types and sizes of values worth computing on the host (shape arithmetic).
HOST_TYPES = (DataType.INT64, DataType.INT32, DataType.BOOL)
HOST_MAX_ELEMENTS = 4096


# Float types pplpy moves but does not compute in.
UNCOMPUTED_FLOATS = (DataType.FLOAT16, DataType.FLOAT64)


def infer_types(nodes, ops, known):
    """Fill ``known`` (value name -> DataType) for every node output; returns it.

    A node reading a float16 / float64 value its op does not take (any math op: only
    data-movement ops take every type) is refused naming the value, rather than converted
    silently; ``cast_to_float32=True`` casts such models at load instead."""
    for node in nodes:
        op = ops[node]
        in_types = [known.get(name) if name else None for name in node.inputs]
        for name, data_type in zip(node.inputs, in_types):
            if data_type in UNCOMPUTED_FLOATS and data_type not in op.supported_types:
                raise UnsupportedOpError(
                    f'{node.describe()}: input "{name}" is {data_type}, which pplpy does not '
                    f"compute in (it computes in float32 and does not convert silently); "
                    f"convert the model, or load it with cast_to_float32=True "
                    f"(pplnn --cast-to-float32)",
                    nodes=[(node.name, node.domain, node.op_type, node.opset)])
        out_types = checked_types(op, op.infer_type(in_types))
        check_shared_types(node, in_types)
        for name, data_type in zip(node.outputs, out_types):
            if name:
                known[name] = data_type
    return known


def _contract_error(op, message):
    """An op context broke docs/op_context_contract.md: a PluginError naming the node and
    the plugin's package, or an InternalError when the op context is pplpy's own."""
    package = provider_of(type(op))
    text = f"{op.node.describe()}: {type(op).__name__}.{message}"
    if package == "pplpy":
        return InternalError(f"{text} (please report this)")
    return PluginError(text, node=op.node.name, plugin=package)


def checked_types(op, out_types):
    """infer_type's result: one DataType per present output (rule 1)."""
    node = op.node
    present = [i for i, name in enumerate(node.outputs) if name]
    if not isinstance(out_types, (list, tuple)) or (present and len(out_types) <= present[-1]):
        raise _contract_error(op, f"infer_type returned {out_types!r}; it must return a list "
                              f"of one DataType per output ({len(node.outputs)})")
    for name, data_type in zip(node.outputs, out_types):
        if name and not isinstance(data_type, DataType):
            raise _contract_error(op, f"infer_type gave output \"{name}\" the type "
                                  f"{data_type!r}, not a pplpy DataType")
    return out_types


def checked_dims(op, name, dims):
    """One output shape from infer_shape as a tuple of ints (rule 2); numpy ints are
    accepted, floats, strings and None are not."""
    try:
        if type(dims) is tuple and all(type(d) is int for d in dims):
            return dims
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        raise _contract_error(op, f"infer_shape gave output \"{name}\" the shape {dims!r}; "
                              f"a shape is a tuple of ints") from None


def check_shared_types(node, in_types):
    """ShapeError where an input the op's ONNX schema types like input 0 (Conv's W and B,
    MatMul's B, every input of Concat) has another element type.  ONNX Runtime refuses such
    a model; pplpy's kernels would read the input's bytes as input 0's type, and pplpy never
    casts silently.  Ops without a schema (pplpy's own, plugins' domains) are not checked."""
    if not in_types or in_types[0] is None:  # an omitted optional first input
        return
    same, repeats_from = inputs_typed_as_first(node.domain, node.op_type, node.opset)
    for i in range(1, len(in_types)):
        if in_types[i] is None or in_types[i] is in_types[0]:
            continue
        if i in same or (repeats_from is not None and i >= repeats_from):
            formal = f" ({same[i]})" if i in same else ""
            raise ShapeError(
                f'{node.describe()}: input {i} "{node.inputs[i]}"{formal} is {in_types[i]}, '
                f"but {node.op_type} takes it in input 0's type ({in_types[0]}): cast one "
                f"of them in the model")


def host_evaluable(node, op, types, shapes, values):
    """Whether ``node`` is computed on the host when a plan is made (see module doc)."""
    if not op.deterministic:
        return False
    if getattr(op, "computes_from_shapes", False):  # Shape, Size: only the input's dims
        return all(shapes.get(name) is not None for name in node.inputs if name)
    for name in node.inputs:
        if name and name not in values:
            return False
    for name in node.outputs:
        if name and (types.get(name) not in HOST_TYPES or shapes.get(name) is None
                     or _count(shapes[name]) > HOST_MAX_ELEMENTS):
            return False
    return True


def _count(dims):
    total = 1
    for d in dims:
        total *= d
    return total


def infer_shapes(nodes, ops, known, values, partial=False, types=None, evaluate=None,
                 host=None, strict=False):
    """Fill ``known`` (value name -> dims tuple) for every node output; returns it.

    ``values`` maps value names to known numpy values (constants, value-deciding feeds); with
    ``evaluate(node, inputs, in_shapes, in_types) -> outputs`` and ``types``, host-evaluable nodes are computed,
    their outputs added to ``values`` and the nodes added to the set ``host``.  With
    ``partial`` (build time, from probe dims) a node whose shape cannot be inferred gets
    unknown (absent) output shapes instead of an error, unless ``strict``: then only a value
    known at run time alone is tolerated, and a shape error is raised.  Any failure inside an op's rule is a
    ShapeError naming the node and its input shapes, so a bad model or feed never reaches a
    kernel.
    """
    for node in nodes:
        op = ops[node]
        inputs = node.inputs
        in_shapes = [known.get(name) if name else None for name in inputs]
        if partial and None in in_shapes and any(
                s is None for s, n in zip(in_shapes, inputs) if n):
            continue
        in_values = [values.get(name) if name else None for name in inputs]
        try:
            out_shapes = op.infer_shape(in_shapes, in_values)
        except ValueRequired as exc:
            if partial:
                continue
            raise UnsupportedOpError(str(exc), nodes=[(node.name, node.domain, node.op_type,
                                                       node.opset)]) from exc
        except ShapeError:
            if partial and not strict:
                continue
            raise
        except PplError:
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError) as exc:
            if partial and not strict:
                continue
            raise op.shape_error(str(exc), in_shapes) from exc
        outputs = node.outputs
        if not isinstance(out_shapes, (list, tuple)):
            raise _contract_error(op, f"infer_shape returned {out_shapes!r}; it must return "
                                  f"a list of one shape per output")
        if len(out_shapes) < len(outputs) and len(out_shapes) < len([o for o in outputs if o]):
            raise ShapeError(f"{node.describe()}: shape inference gave {len(out_shapes)} "
                             f"shapes for {len(outputs)} outputs")
        for name, dims in zip(outputs, out_shapes):
            if name:
                dims = checked_dims(op, name, dims)
                if any(d < 0 for d in dims):
                    if partial and not strict:
                        break
                    raise op.shape_error(f"inferred a negative output dim {list(dims)}",
                                         in_shapes)
                known[name] = dims
        if evaluate is not None and host_evaluable(node, op, types, known, values):
            try:
                outputs = evaluate(node, in_values, in_shapes,
                                   [types.get(name) if name else None for name in inputs])
            except InputError:
                # Bad data met while computing it (a Loop's Gather past its table at a probe
                # trip count): at build time the node is left to the run, which meets it
                # with the real feeds; at run time it is the run's error.
                if partial:
                    continue
                raise
            for name, value in zip(node.outputs, outputs):
                if name:
                    values[name] = value
            host.add(node)
    return known


def symbolic_dims(probes, symbol_of, probe_values=None):
    """Merge inferences made with different probe values for the free input dims (a list of
    value name -> dims): a dim equal in the first two and in every later inference that
    reached it is static; one that follows a free input dim is that dim's name (decided by
    the first two: ``symbol_of`` maps their pair of probe values -> name); any other dim is
    unknown (None).  A value the second inference did not reach is unknown.

    A later inference may take a name back (``probe_values``: a name -> its value in each
    probe): where the dim there is larger than the name's probe value, it follows something
    else (a derived dim such as (N - 64)(N - 97) + N equals N at the first two probes only;
    named N, a Reshape of it to N rows looked like it kept its input's dims and was removed).
    A smaller one keeps the name: a table clamps the slice of it a free length takes (a
    position table of 128 rows at the third probe's 321)."""
    merged = {}
    for name, dims_a in probes[0].items():
        dims_b = probes[1].get(name)
        if dims_b is None or len(dims_b) != len(dims_a):
            merged[name] = tuple(None for _ in dims_a)
            continue
        later = [(i, p[name]) for i, p in enumerate(probes[2:], 2) if p.get(name) is not None
                 and len(p[name]) == len(dims_a)]
        merged[name] = tuple(
            (a if all(d[k] == a for _, d in later) else None) if a == b
            else _checked_symbol(symbol_of.get((a, b)), k, later, probe_values)
            for k, (a, b) in enumerate(zip(dims_a, dims_b)))
    return merged


def _checked_symbol(symbol, k, later, probe_values):
    """``symbol``, unless dim ``k`` of a later inference is larger than its probe value."""
    values = (probe_values or {}).get(symbol)
    if symbol is None or values is None:
        return symbol
    if any(d[k] is not None and d[k] > values[i] for i, d in later):
        return None
    return symbol


def shape_deciding_values(nodes, ops, types):
    """The names whose values can decide a shape: the inputs ops list in ``value_inputs``
    (Reshape's shape), and, backwards, the inputs of deterministic nodes with integer or
    bool outputs that lead there (the host arithmetic of ``infer_shapes``).  ``nodes`` in
    topological order; ``types``: value name -> DataType.

    A control-flow body feeds these of its inputs by value, so its plans are keyed by them
    (a loop counter that becomes a Slice's start)."""
    deciding = set()
    for node in nodes:
        deciding.update(node.inputs[i] for i in ops[node].value_inputs
                        if i < len(node.inputs) and node.inputs[i])
    for node in reversed(nodes):
        outputs = [name for name in node.outputs if name]
        if getattr(ops[node], "computes_from_shapes", False):
            continue  # Shape and Size read only dims: their input's values decide nothing
        if (ops[node].deterministic and any(name in deciding for name in outputs)
                and all(types.get(name) in HOST_TYPES for name in outputs)):
            deciding.update(name for name in node.inputs if name)
    return deciding
