"""Post-ops as ONNX attributes: how a saved optimised model writes the post-op chain fused
into a Conv / Gemm / MatMul / MatMulBias epilogue, and how pplpy reads it back.

A fused node carries, one entry per post-op in the order they apply:

    post_ops            STRINGS  names: an activation ("relu", "clip"), "sum", "prelu",
                                 "binary_add", "binary_mul", "binary_max", "binary_min"
    post_op_params      FLOATS   p0, p1 of every post-op (two each)
    post_op_operands    INTS     the node input an entry reads (sum, binary, prelu), or -1
    post_op_broadcasts  INTS     how that operand broadcasts (post_ops.Broadcast)

The operands are ordinary inputs of the node (the fusion pass appended them), so the file
keeps the data flow Netron shows.
"""

from pplpy.engines.x86.impls.post_ops import BinaryAlg, Broadcast, PostOp, PostOpEntry, \
    PostOpKind
from pplpy.errors import ModelError, PplError

POST_OPS = "post_ops"
POST_OP_PARAMS = "post_op_params"
POST_OP_OPERANDS = "post_op_operands"
POST_OP_BROADCASTS = "post_op_broadcasts"
ATTRIBUTE_NAMES = (POST_OPS, POST_OP_PARAMS, POST_OP_OPERANDS, POST_OP_BROADCASTS)

# name -> (kind, alg) for the entries that are not activations.
_OTHER = {"sum": (PostOpKind.SUM, 0), "prelu": (PostOpKind.PRELU, 0),
          **{f"binary_{a.name.lower()}": (PostOpKind.BINARY, int(a)) for a in BinaryAlg}}
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
    return {POST_OPS: [_name(e) for e in post_ops],
            POST_OP_PARAMS: [float(v) for e in post_ops for v in (e.p0, e.p1)],
            POST_OP_OPERANDS: [-1 if e.operand is None else int(e.operand) for e in post_ops],
            POST_OP_BROADCASTS: [int(e.broadcast) for e in post_ops]}


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
    if len(floats) != 2 * n or len(operands) != n or len(broadcasts) != n:
        raise ModelError(f"{where}: {n} post-op(s) {list(names)} need {2 * n} "
                         f"{POST_OP_PARAMS} and {n} {POST_OP_OPERANDS} / "
                         f"{POST_OP_BROADCASTS}; got {len(floats)}, {len(operands)}, "
                         f"{len(broadcasts)}")
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
        try:
            broadcast = Broadcast(broadcasts[k])
        except ValueError:
            raise ModelError(f"{where}: post-op {name!r}: broadcast {broadcasts[k]} is not "
                             f"one of {[int(b) for b in Broadcast]}") from None
        posts.append(PostOpEntry(kind, alg, floats[2 * k], floats[2 * k + 1],
                                 None if operand < 0 else operand, broadcast))
    return tuple(posts)
