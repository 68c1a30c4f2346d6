"""How the run-time fault messages of the index steps say which values were valid (the
steps' ``set_fault`` texts; see pplpy_step.h): one wording for every kernel, an empty range
included (an axis of 0 has no valid index, not "-0 to -1")."""


def valid_indices(n, negative=True):
    """The valid indices of an axis of ``n``: "valid: -n to n - 1" (or "0 to n - 1")."""
    if n <= 0:
        return "the axis is empty: no index is valid"
    return f"valid: {-n if negative else 0} to {n - 1}"
