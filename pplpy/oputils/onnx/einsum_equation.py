"""ONNX Einsum equations: the labels of each operand and of the output, shared by the x86
Einsum op (which plans its contraction from them) and the graph optimiser's
einsum_to_matmul (which rewrites matmul-shaped ones).

    "bhqd,bhkd->bhqk"   explicit output;   "ij,jk"   implicit (labels seen once, sorted)
    "...ii->...i"       ellipsis (broadcast, right-aligned) and repeated labels (diagonals)
"""

# Fresh labels for the ellipsis dims: equations use ASCII letters (both cases), so these
# characters past ASCII never collide with them.
_ELLIPSIS_LABELS = [chr(c) for c in range(0x100, 0x140)]


def parse_equation(equation, ranks):
    """(operand label lists, output label list) with each ellipsis expanded to fresh labels
    (the same ones, right-aligned, for every operand).  Raises ValueError."""
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->", 1)
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, the node "
                         f"{len(ranks)}")
    ell_rank = 0
    operands = []
    for term, rank in zip(terms, ranks):
        if term.count("...") > 1:
            raise ValueError(f"term {term!r} has more than one ellipsis")
        named = len(term.replace("...", ""))
        if "..." in term:
            if named > rank:
                raise ValueError(f"term {term!r} names more dims than the operand's {rank}")
            ell_rank = max(ell_rank, rank - named)
        elif named != rank:
            raise ValueError(f"term {term!r} names {named} dims, the operand has {rank}")
        operands.append(term)
    ell = _ELLIPSIS_LABELS[:ell_rank]
    labels = []
    for term, rank in zip(operands, ranks):
        if "..." in term:
            before, after = term.split("...")
            n = rank - len(before) - len(after)
            labels.append(list(before) + ell[ell_rank - n:] + list(after))
        else:
            labels.append(list(term))
    for term_labels in labels:
        for c in term_labels:
            if not (c.isalpha() or c in ell):
                raise ValueError(f"label {c!r} is not a letter")
    if rhs is None:
        counts = {}
        for term_labels in labels:
            for c in term_labels:
                if c not in ell:
                    counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1)
    else:
        if rhs.count("...") > 1:
            raise ValueError(f"output {rhs!r} has more than one ellipsis")
        if "..." in rhs:
            before, after = rhs.split("...")
            out = list(before) + ell + list(after)
        else:
            out = list(rhs)  # without "...", the ellipsis dims are summed away
        seen = {c for term_labels in labels for c in term_labels}
        for c in out:
            if c not in seen:
                raise ValueError(f"output label {c!r} is in no operand")
        if len(set(out)) != len(out):
            raise ValueError(f"output {rhs!r} repeats a label")
    return labels, out
