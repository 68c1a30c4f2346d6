"""Post-ops as ONNX attributes: how a saved optimised model writes the post-op chain fused
into a Conv / Gemm / MatMul / MatMulBias / pool / reduction / Resize, and how pplpy reads it
back.

A fused node carries, one entry per post-op in the order they apply:

    post_ops            STRINGS  names: an activation ("relu", "clip"), "sum", "prelu",
                                 "binary_add", "binary_mul", "binary_max", "binary_min",
                                 "select" (Where(cond, x, other)), "select_swapped"
                                 (Where(cond, other, x))
    post_op_params      FLOATS   p0, p1 of every post-op (two each)
    post_op_operands    INTS     the node input an entry reads (sum, binary, prelu; select:
                                 other), or -1
    post_op_broadcasts  INTS     how that operand broadcasts (post_ops.Broadcast)
    post_op_conditions  INTS     a select's condition input, or -1 (written only when a
                                 chain has a select; absent means all -1)
    post_op_condition_broadcasts  INTS  how each condition broadcasts (likewise)

The operands are ordinary inputs of the node (the fusion pass appended them), so the file
keeps the data flow Netron shows.
"""

from pplpy.engines.x86.impls.post_ops import BinaryAlg, Broadcast, PostOp, PostOpEntry, \
    PostOpKind, SelectAlg
from pplpy.errors import ModelError, PplError

POST_OPS = "post_ops"
POST_OP_PARAMS = "post_op_params"
POST_OP_OPERANDS = "post_op_operands"
POST_OP_BROADCASTS = "post_op_broadcasts"
POST_OP_CONDITIONS = "post_op_conditions"
POST_OP_CONDITION_BROADCASTS = "post_op_condition_broadcasts"
ATTRIBUTE_NAMES = (POST_OPS, POST_OP_PARAMS, POST_OP_OPERANDS, POST_OP_BROADCASTS,
                   POST_OP_CONDITIONS, POST_OP_CONDITION_BROADCASTS)

# name -> (kind, alg) for the entries that are not activations.
_OTHER = {"sum": (PostOpKind.SUM, 0), "prelu": (PostOpKind.PRELU, 0),
          **{f"binary_{a.name.lower()}": (PostOpKind.BINARY, int(a)) for a in BinaryAlg},
          "select": (PostOpKind.SELECT, int(SelectAlg.KEEP_WHERE_TRUE)),
          "select_swapped": (PostOpKind.SELECT, int(SelectAlg.KEEP_WHERE_FALSE))}
_ACTIVATIONS = {c.name.lower(): c for c in PostOp if c is not PostOp.NONE}


def _name(entry):
    if entry.kind is PostOpKind.ELTWISE:
        return PostOp(entry.alg).name.lower()
    return next(n for n, (k, a) in _OTHER.items() if k is entry.kind and a == entry.alg)


def post_op_attributes(post_ops, where):
    """{attribute name: value} for ``post_ops`` (PostOpEntry; empty when there are none); a
    post-op of another form is a PplError naming ``where`` (the node)."""
    if not post_ops:
        return {}
    if not all(isinstance(e, PostOpEntry) for e in post_ops):
        raise PplError(f"{where}: post-ops {post_ops!r} cannot be written as ONNX attributes")
    values = {POST_OPS: [_name(e) for e in post_ops],
              POST_OP_PARAMS: [float(v) for e in post_ops for v in (e.p0, e.p1)],
              POST_OP_OPERANDS: [-1 if e.operand is None else int(e.operand) for e in post_ops],
              POST_OP_BROADCASTS: [int(e.broadcast) for e in post_ops]}
    if any(e.condition is not None for e in post_ops):
        values[POST_OP_CONDITIONS] = [-1 if e.condition is None else int(e.condition)
                                      for e in post_ops]
        values[POST_OP_CONDITION_BROADCASTS] = [int(e.condition_broadcast) for e in post_ops]
    return values


def _broadcast(value, name, where):
    try:
        return Broadcast(value)
    except ValueError:
        raise ModelError(f"{where}: post-op {name!r}: broadcast {value} is not one of "
                         f"{[int(b) for b in Broadcast]}") from None


def read_post_ops(values, where):
    """The post-ops of a node from its attribute values (``registry.attribute_values``);
    () when it has none.  ModelError naming ``where`` for an unknown name or lists of the
    wrong length."""
    names = values.get(POST_OPS, ())
    if isinstance(names, str):
        names = (names,)
    n = len(names)
    floats = tuple(float(v) for v in values.get(POST_OP_PARAMS, ()))
    operands = tuple(int(v) for v in values.get(POST_OP_OPERANDS, (-1,) * n))
    broadcasts = tuple(int(v) for v in values.get(POST_OP_BROADCASTS,
                                                  (int(Broadcast.ELEMENT),) * n))
    conditions = tuple(int(v) for v in values.get(POST_OP_CONDITIONS, (-1,) * n))
    condition_broadcasts = tuple(int(v) for v in values.get(
        POST_OP_CONDITION_BROADCASTS, (int(Broadcast.ELEMENT),) * n))
    if (len(floats) != 2 * n or len(operands) != n or len(broadcasts) != n
            or len(conditions) != n or len(condition_broadcasts) != n):
        raise ModelError(f"{where}: {n} post-op(s) {list(names)} need {2 * n} "
                         f"{POST_OP_PARAMS} and {n} of each of {POST_OP_OPERANDS}, "
                         f"{POST_OP_BROADCASTS}, {POST_OP_CONDITIONS}, "
                         f"{POST_OP_CONDITION_BROADCASTS}; got {len(floats)}, {len(operands)}, "
                         f"{len(broadcasts)}, {len(conditions)}, {len(condition_broadcasts)}")
    posts = []
    for k, name in enumerate(names):
        if name in _ACTIVATIONS:
            kind, alg = PostOpKind.ELTWISE, int(_ACTIVATIONS[name])
        elif name in _OTHER:
            kind, alg = _OTHER[name]
        else:
            raise ModelError(f"{where}: unknown post-op {name!r} (known: "
                             f"{', '.join(sorted([*_ACTIVATIONS, *_OTHER]))})")
        operand = operands[k]
        if (kind is PostOpKind.ELTWISE) != (operand < 0):
            raise ModelError(f"{where}: post-op {name!r} {'takes no' if operand >= 0 else 'needs an'}"
                             f" operand input")
        if (kind is PostOpKind.SELECT) != (conditions[k] >= 0):
            raise ModelError(f"{where}: post-op {name!r} "
                             f"{'needs a' if kind is PostOpKind.SELECT else 'takes no'} "
                             f"condition input")
        posts.append(PostOpEntry(kind, alg, floats[2 * k], floats[2 * k + 1],
                                 None if operand < 0 else operand,
                                 _broadcast(broadcasts[k], name, where),
                                 None if conditions[k] < 0 else conditions[k],
                                 _broadcast(condition_broadcasts[k], name, where)))
    return tuple(posts)
