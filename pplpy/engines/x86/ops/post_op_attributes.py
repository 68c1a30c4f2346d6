"""Post-ops as ONNX attributes: how a saved optimised model writes the post-ops fused into a
Conv / Gemm / MatMul / MatMulBias epilogue, and how pplpy reads them back.

A fused node carries two attributes:

    post_ops        STRINGS  one name per post-op, in the order they apply ("relu", "clip")
    post_op_params  FLOATS   the float parameters of every post-op, concatenated in order

Each kind of post-op is one row of ``KINDS``: which post-ops it covers (``covers``), how
one is written (``write`` -> (name, floats)) and read back (``read``), the names it reads
and how many floats each takes.  Today every post-op is an element-wise activation
``(PostOp code, p0, p1)``; a new kind (an operand input added in the epilogue, say) is a new
row: its ``write`` may also name the extra input it reads (written as a node input and
listed in a ``post_op_inputs`` INTS attribute by the kind that needs it).
"""

from dataclasses import dataclass

from pplpy.engines.x86.impls.post_ops import PostOp
from pplpy.errors import ModelError, PplError

POST_OPS = "post_ops"
POST_OP_PARAMS = "post_op_params"
ATTRIBUTE_NAMES = (POST_OPS, POST_OP_PARAMS)


@dataclass(frozen=True)
class PostOpKind:
    covers: object  # post_op -> bool: whether this kind writes it
    write: object  # post_op -> (name, tuple of floats)
    read: object  # (name, tuple of floats) -> post_op
    names: frozenset  # the names this kind reads
    floats: int  # floats per post-op of this kind


def _is_eltwise(post):
    return isinstance(post, tuple) and len(post) == 3 and isinstance(post[0], int)


def _write_eltwise(post):
    code, p0, p1 = post
    return PostOp(int(code)).name.lower(), (float(p0), float(p1))


def _read_eltwise(name, floats):
    return (PostOp[name.upper()], float(floats[0]), float(floats[1]))


KINDS = (
    PostOpKind(_is_eltwise, _write_eltwise, _read_eltwise,
               frozenset(c.name.lower() for c in PostOp if c is not PostOp.NONE), 2),
)


def post_op_attributes(post_ops, where):
    """{attribute name: value} for ``post_ops`` (empty when there are none); a post-op no
    kind covers is a PplError naming ``where`` (the node)."""
    names, floats = [], []
    for post in post_ops:
        kind = next((k for k in KINDS if k.covers(post)), None)
        if kind is None:
            raise PplError(f"{where}: post-op {post!r} cannot be written as ONNX attributes "
                           f"(pplpy.engines.x86.ops.post_op_attributes has no kind for it)")
        name, params = kind.write(post)
        names.append(name)
        floats.extend(params)
    return {POST_OPS: names, POST_OP_PARAMS: floats} if names else {}


def read_post_ops(values, where):
    """The post-ops of a node from its attribute values (``registry.attribute_values``);
    () when it has none.  ModelError naming ``where`` for an unknown name or a wrong number
    of floats."""
    names = values.get(POST_OPS, ())
    floats = tuple(float(v) for v in values.get(POST_OP_PARAMS, ()))
    if isinstance(names, str):
        names = (names,)
    posts, used = [], 0
    for name in names:
        kind = next((k for k in KINDS if name in k.names), None)
        if kind is None:
            raise ModelError(f"{where}: unknown post-op {name!r} (known: "
                             f"{', '.join(sorted(n for k in KINDS for n in k.names))})")
        if used + kind.floats > len(floats):
            raise ModelError(f"{where}: {POST_OP_PARAMS} has {len(floats)} values, too few "
                             f"for post-ops {list(names)}")
        posts.append(kind.read(name, floats[used:used + kind.floats]))
        used += kind.floats
    if used != len(floats):
        raise ModelError(f"{where}: {POST_OP_PARAMS} has {len(floats)} values; post-ops "
                         f"{list(names)} take {used}")
    return tuple(posts)
