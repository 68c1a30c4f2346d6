"""How an operand broadcasts into a value without growing it, as one contiguous run of axes:
what pplpy::EltwiseChain can read cheaply (a scalar, a last-axis bias, a per-channel vector,
a tensor of the value's shape), shared by the optimiser pass that builds chains and the op
that runs them."""


def operand_run(dims, out):
    """How an operand of ``dims`` broadcast to ``out`` varies: (first, last) axes of the one
    contiguous run of out's axes along which it varies (size-1 axes of out ignored), or
    (None, None) for a single value; raises ValueError for any other pattern.  Dims may be
    ints or symbolic names; equal names are equal dims."""
    dims, out = tuple(dims), tuple(out)
    if len(dims) > len(out):
        raise ValueError(f"operand of rank {len(dims)} would grow a value of rank {len(out)}")
    dims = (1,) * (len(out) - len(dims)) + dims
    varying = []
    for axis, (d, o) in enumerate(zip(dims, out)):
        if d == 1 or o == 1:
            if d != 1:
                raise ValueError(f"operand dim {d} on axis {axis} would grow dim 1")
            continue
        if d is None or d != o:
            raise ValueError(f"operand dims {list(dims)} do not broadcast into {list(out)}")
        varying.append(axis)
    if not varying:
        return None, None
    first, last = varying[0], varying[-1]
    if any(out[a] != 1 and a not in varying for a in range(first, last + 1)):
        raise ValueError(f"operand dims {list(dims)} vary along non-adjacent axes of "
                         f"{list(out)}")
    return first, last
