"""A registry keyed by (domain, op_type) whose entries cover ranges of opsets.

Both the parser registry (models/onnx) and the op-context registry (engines/x86) are one of
these.  An entry starts at the opset ``since`` where the op took the meaning the entry
implements and is open-ended: it lasts until the next entry of the same op starts, or up to
``LATEST_OPSET`` (the newest opset pplpy's ops are checked against).  A closed range
(``until``) is for ops that stop at a known opset.  Two entries starting at the same opset,
or a closed range that overlaps another, fail when registered.
"""

from dataclasses import dataclass

from pplpy.errors import RegistryError

# The newest ONNX opset whose definitions of pplpy's ops have been checked (a test compares
# every param class with onnx.defs at both ends of its range).
LATEST_OPSET = 28


def normalize_domain(domain):
    """ONNX writes the default domain as "" or "ai.onnx"; pplpy uses ""."""
    return "" if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class VersionedEntry:
    domain: str
    op_type: str
    first: int
    last: int
    value: object


class VersionedRegistry:
    def __init__(self, what):
        self.what = what  # "parser" or "x86 op", for messages
        self._entries = {}  # (domain, op_type) -> [(since, until or None, value)]
        self._resolved = {}  # (domain, op_type) -> [(first, last, value)]

    def add(self, domain, op_type, since, until, value):
        domain = normalize_domain(domain)
        since = int(since)
        if until is not None and int(until) < since:
            raise RegistryError(f"{self.what} {domain or 'ai.onnx'}::{op_type}: empty opset range "
                                f"{since}-{until}")
        entries = self._entries.setdefault((domain, op_type), [])
        candidate = sorted([*entries, (since, until, value)], key=lambda e: e[0])
        ranges = _resolve(candidate)
        for (a_first, a_last, a), (b_first, b_last, b) in zip(ranges, ranges[1:]):
            if b_first <= a_last or a_first == b_first:
                raise RegistryError(
                    f"{self.what} {domain or 'ai.onnx'}::{op_type} opsets {b_first}-{b_last} "
                    f"({_name(b)}) overlap {a_first}-{a_last} ({_name(a)}); register a later "
                    f"'since', or remove the other registration"
                )
        entries[:] = candidate
        self._resolved[(domain, op_type)] = ranges

    def find(self, domain, op_type, opset):
        """The value whose range covers ``opset``, or None."""
        ranges = self._resolved.get((normalize_domain(domain), op_type))
        for first, last, value in ranges or ():
            if first <= opset <= last:
                return value
        return None

    def entries_of(self, domain, op_type):
        """The resolved entries of one op, oldest first."""
        key = (normalize_domain(domain), op_type)
        return [VersionedEntry(key[0], op_type, f, l, v) for f, l, v in self._resolved.get(key, ())]

    def has(self, domain, op_type):
        return (normalize_domain(domain), op_type) in self._entries

    def entries(self):
        """Every entry with its resolved range, sorted by domain, op type and first opset."""
        result = [
            VersionedEntry(d, t, first, last, value)
            for (d, t), entries in self._entries.items()
            for first, last, value in _resolve(entries)
        ]
        return sorted(result, key=lambda e: (e.domain, e.op_type, e.first))


def _resolve(entries):
    """[(first, last, value)]: open-ended entries end where the next one starts."""
    entries = sorted(entries, key=lambda e: e[0])
    resolved = []
    for i, (since, until, value) in enumerate(entries):
        if until is None:
            until = entries[i + 1][0] - 1 if i + 1 < len(entries) else LATEST_OPSET
        resolved.append((since, until, value))
    return resolved


def _name(value):
    return getattr(value, "__name__", None) or getattr(value, "label", None) or repr(value)
