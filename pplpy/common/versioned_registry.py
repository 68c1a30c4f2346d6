"""A registry keyed by (domain, op_type) whose entries cover ranges of opsets.

Both the parser registry (models/onnx) and the op-context registry (engines/x86) are one of
these.  An entry starts at the opset ``since`` where the op took the meaning the entry
implements and is open-ended: it lasts until the next entry of the same op starts, or up to
``LATEST_OPSET`` (the newest opset pplpy's ops are checked against).  A closed range
(``until``) is for ops that stop at a known opset.  Two entries starting at the same opset,
or a closed range that overlaps another, fail when registered.

Every entry records its ``provider``: the top-level package of the code that registered it
("pplpy" for built-ins, a plugin's package otherwise).  A provider may not add to an op
another provider registered (that would silently replace it for the later opsets) unless it
says ``override=True``; then the other provider's entries from ``since`` on are replaced and
remembered in ``overridden()``.
"""

from dataclasses import dataclass

from pplpy.errors import RegistryError

# The newest ONNX opset whose definitions of pplpy's ops have been checked (a test compares
# every param class with onnx.defs at both ends of its range).
LATEST_OPSET = 28


def normalize_domain(domain):
    """ONNX writes the default domain as "" or "ai.onnx"; pplpy uses ""."""
    return "" if domain in ("", "ai.onnx") else domain


def provider_of(obj):
    """The top-level package that defines ``obj`` ("pplpy" for built-ins)."""
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] or "?"


@dataclass(frozen=True)
class VersionedEntry:
    domain: str
    op_type: str
    first: int
    last: int
    value: object
    provider: str = "pplpy"


class VersionedRegistry:
    def __init__(self, what):
        self.what = what  # "parser" or "x86 op", for messages
        self._entries = {}  # (domain, op_type) -> [(since, until or None, value, provider)]
        self._resolved = {}  # (domain, op_type) -> [(first, last, value, provider)]
        self._overridden = []  # VersionedEntry replaced by an override=True registration

    def add(self, domain, op_type, since, until, value, provider=None, override=False):
        domain = normalize_domain(domain)
        since = int(since)
        provider = provider or provider_of(value)
        label = f"{self.what} {domain or 'ai.onnx'}::{op_type}"
        if until is not None and int(until) < since:
            raise RegistryError(f"{label}: empty opset range {since}-{until}")
        entries = self._entries.setdefault((domain, op_type), [])
        others = [e for e in entries if e[3] != provider]
        replaced = []
        if others and not override:
            who = sorted({e[3] for e in others})
            raise RegistryError(
                f"{label} (opset {since}, from {provider!r}) is already provided by "
                f"{', '.join(map(repr, who))}; to replace it, declare it with override=True "
                f"(@op(..., override=True)), or use your own domain"
            )
        if override:
            replaced = [e for e in others if e[0] >= since]
            kept = [e for e in entries if e not in replaced]
        else:
            kept = list(entries)
        candidate = sorted([*kept, (since, until, value, provider)], key=lambda e: e[0])
        ranges = _resolve(candidate)
        for (a_first, a_last, a, _), (b_first, b_last, b, _) in zip(ranges, ranges[1:]):
            if b_first <= a_last or a_first == b_first:
                raise RegistryError(
                    f"{label} opsets {b_first}-{b_last} ({_name(b)}) overlap "
                    f"{a_first}-{a_last} ({_name(a)}); register a later 'since', or remove the "
                    f"other registration"
                )
        if override:
            (new_first, new_last), = [(f, l) for f, l, v, _ in ranges if v is value]
            for first, last, old, who in _resolve(entries):
                if who != provider and first <= new_last and new_first <= last:
                    self._overridden.append(VersionedEntry(
                        domain, op_type, max(first, new_first), min(last, new_last), old, who))
        entries[:] = candidate
        self._resolved[(domain, op_type)] = ranges

    def find(self, domain, op_type, opset):
        """The value whose range covers ``opset``, or None."""
        ranges = self._resolved.get((normalize_domain(domain), op_type))
        for first, last, value, _ in ranges or ():
            if first <= opset <= last:
                return value
        return None

    def find_entry(self, domain, op_type, opset):
        """The VersionedEntry whose range covers ``opset``, or None."""
        key = (normalize_domain(domain), op_type)
        for first, last, value, provider in self._resolved.get(key, ()):
            if first <= opset <= last:
                return VersionedEntry(key[0], op_type, first, last, value, provider)
        return None

    def entries_of(self, domain, op_type):
        """The resolved entries of one op, oldest first."""
        key = (normalize_domain(domain), op_type)
        return [VersionedEntry(key[0], op_type, f, l, v, p)
                for f, l, v, p in self._resolved.get(key, ())]

    def has(self, domain, op_type):
        return (normalize_domain(domain), op_type) in self._entries

    def entries(self):
        """Every entry with its resolved range, sorted by domain, op type and first opset."""
        result = [
            VersionedEntry(d, t, *resolved)
            for (d, t), entries in self._entries.items()
            for resolved in _resolve(entries)
        ]
        return sorted(result, key=lambda e: (e.domain, e.op_type, e.first))

    def overridden(self):
        """The entries that ``override=True`` registrations replaced."""
        return list(self._overridden)


def _resolve(entries):
    """[(first, last, value, provider)]: open-ended entries end where the next one starts."""
    entries = sorted(entries, key=lambda e: e[0])
    resolved = []
    for i, (since, until, value, provider) in enumerate(entries):
        if until is None:
            until = entries[i + 1][0] - 1 if i + 1 < len(entries) else LATEST_OPSET
        resolved.append((since, until, value, provider))
    return resolved


def _name(value):
    return getattr(value, "__name__", None) or getattr(value, "label", None) or repr(value)
