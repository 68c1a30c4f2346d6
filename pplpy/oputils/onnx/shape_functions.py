"""Output-shape rules of ONNX ops, as pure functions of input shapes and attribute values.

Each raises ValueError with a message a user can act on; op contexts wrap it into a
ShapeError naming the node.  Conv and pooling geometry lives in ``pool_geometry``.
"""


def normalize_axis(axis, rank, what="axis"):
    """Map a possibly negative axis into [0, rank)."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def broadcast_shapes(*shapes):
    """numpy (multidirectional) broadcasting of several shapes."""
    rank = max(len(s) for s in shapes)
    result = []
    for i in range(rank):
        dim = 1
        for shape in shapes:
            d = shape[i - rank + len(shape)] if i - rank + len(shape) >= 0 else 1
            if d == 1:
                continue
            if dim not in (1, d):
                listed = " and ".join(str(list(s)) for s in shapes)
                raise ValueError(f"shapes {listed} cannot be broadcast together")
            dim = d
        result.append(dim)
    return tuple(result)


def reshape_shape(in_shape, target, allowzero=0):
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    target = [int(d) for d in target]
    out = []
    infer_at = None
    for i, d in enumerate(target):
        if d == -1:
            if infer_at is not None:
                raise ValueError(f"shape {target} has more than one -1")
            infer_at = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"shape {target} copies dim {i} (0) but the input has rank "
                                 f"{len(in_shape)}")
            out.append(in_shape[i])
        elif d < 0:
            raise ValueError(f"shape {target} has a negative dim {d}")
        else:
            out.append(d)
    total = 1
    for d in in_shape:
        total *= d
    known = 1
    for i, d in enumerate(out):
        if i != infer_at:
            known *= d
    if infer_at is not None:
        if allowzero and 0 in target:
            raise ValueError(f"shape {target}: -1 together with 0 under allowzero=1")
        if known == 0 or total % known:
            raise ValueError(f"cannot reshape {list(in_shape)} ({total} elements) to {target}")
        out[infer_at] = total // known
    elif known != total:
        raise ValueError(f"cannot reshape {list(in_shape)} ({total} elements) to {target} "
                         f"({known} elements)")
    return tuple(out)


def flatten_shape(in_shape, axis):
    rank = len(in_shape)
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    if axis < 0:
        axis += rank  # ONNX: a negative axis counts from the back, -1 is the last dim
    outer = 1
    for d in in_shape[:axis]:
        outer *= d
    inner = 1
    for d in in_shape[axis:]:
        inner *= d
    return (outer, inner)


def transpose_shape(in_shape, perm):
    rank = len(in_shape)
    if perm is None:
        perm = tuple(reversed(range(rank)))
    perm = tuple(int(p) for p in perm)
    if (len(perm) != rank or any(not -rank <= p < rank for p in perm)
            or sorted(p % rank for p in perm) != list(range(rank))):
        raise ValueError(f"perm {list(perm)} is not a permutation of {rank} axes")
    perm = tuple(p % rank for p in perm)
    return tuple(in_shape[p] for p in perm), perm


def unsqueeze_shape(in_shape, axes):
    rank = len(in_shape) + len(axes)
    axes = sorted(normalize_axis(int(a), rank, "axes entry") for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {list(axes)} has duplicates")
    out = list(in_shape)
    for a in axes:
        out.insert(a, 1)
    return tuple(out)


def concat_shape(in_shapes, axis):
    first = in_shapes[0]
    rank = len(first)
    axis = normalize_axis(axis, rank)
    total = 0
    for shape in in_shapes:
        if len(shape) != rank or any(
            shape[i] != first[i] for i in range(rank) if i != axis
        ):
            raise ValueError(f"inputs must match on all axes but {axis}")
        total += shape[axis]
    return first[:axis] + (total,) + first[axis + 1:], axis


def matmul_shape(a, b):
    """numpy matmul: 1-D operands are promoted and the added dim removed afterwards."""
    if len(a) == 0 or len(b) == 0:
        raise ValueError("MatMul operands must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dims differ: {a2[-1]} (A) vs {b2[-2]} (B)")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return tuple(out)


def squeeze_shape(in_shape, axes):
    """ONNX Squeeze: drop the size-1 dims at ``axes`` (None: every size-1 dim)."""
    rank = len(in_shape)
    if axes is None:
        return tuple(d for d in in_shape if d != 1)
    axes = [normalize_axis(int(a), rank, "axes entry") for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {list(axes)} has duplicates")
    for a in axes:
        if in_shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {in_shape[a]}")
    return tuple(d for i, d in enumerate(in_shape) if i not in axes)


def shape_slice(rank, start=0, end=None):
    """ONNX Shape-15's range of dims, Python-style: negative counts from the back, out of
    range clamps.  Returns (first, last) with first <= last."""
    first, last, _ = slice(start, end).indices(rank)
    return first, max(first, last)


def gather_shape(data_shape, indices_shape, axis):
    """ONNX Gather: data dims with ``axis`` replaced by the indices' dims."""
    axis = normalize_axis(axis, len(data_shape))
    return tuple(data_shape[:axis]) + tuple(indices_shape) + tuple(data_shape[axis + 1:]), axis


def _onnx_slice_bounds(dim, start, end, step):
    """(first, stop) of ONNX Slice on a dim of size ``dim`` (see slice_geometry)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def slice_geometry(in_shape, starts, ends, axes=None, steps=None):
    """ONNX Slice: (output dims, first index per dim, step per dim).

    ONNX's rule: a negative start or end adds the dim; then, for a positive step, both clamp
    to [0, dim]; for a negative one the start clamps to [0, dim - 1] and the end to
    [-1, dim - 1].  (Python's slices differ there: a start below -dim with a negative step
    gives them an empty range, ONNX the first element.)  A step is never 0.
    """
    rank = len(in_shape)
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} must "
                         f"have one entry per sliced axis")
    axes = [normalize_axis(a, rank, "axes entry") for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes {axes} has duplicates")
    dims, firsts, strides = list(in_shape), [0] * rank, [1] * rank
    for a, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise ValueError(f"steps {steps} has a 0")
        r = range(*_onnx_slice_bounds(in_shape[a], start, end, step), step)
        dims[a], firsts[a], strides[a] = len(r), r.start, step
    return tuple(dims), firsts, strides
