"""Generate docs/supported_ops.md from the registries (``python -m pplpy.tools.supported_ops``).

The table is never edited by hand: a test regenerates it and fails when the committed file
is stale, so it always says what the code registers.
"""

import argparse
import sys

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.declare import registered_ops
from pplpy.models.onnx.registry import registered_parsers


# The ONNX domains pplpy implements ops of: the standard one and the preview one.
ONNX_DOMAINS = ("", "ai.onnx.preview")


def _ranges(entries):
    return ", ".join(f"{first}-{last}" if first != last else str(first) for first, last in entries)


def render():
    parsers = {}
    for entry in registered_parsers():
        parsers.setdefault((entry.domain, entry.op_type), []).append((entry.first, entry.last))
    lines = [
        "# Supported operators",
        "",
        "Generated from pplpy's registries by `python -m pplpy.tools.supported_ops`; do not "
        "edit by hand.",
        "",
        "| domain | op | parsed opsets | x86 opsets | types (input 0) | N16CX |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for domain, op_type, first, last, cls in registered_ops():
        if domain not in ONNX_DOMAINS:  # pplpy's own nodes and plugins' ops are not ONNX's
            continue
        types = ", ".join(str(t) for t in cls.supported_types)
        if len(cls.supported_types) > 6:
            types = "any"
        blocked = "yes" if DataFormat.N16CX in cls.formats else ""
        lines.append(
            f"| {domain or 'ai.onnx'} | {op_type} | {_ranges(parsers.get((domain, op_type), []))} "
            f"| {first}-{last} | {types} | {blocked} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pplpy.tools.supported_ops",
        description="Write the table of operators pplpy supports (Markdown), generated from "
        "its registries.")
    parser.add_argument("path", nargs="?", default="docs/supported_ops.md",
                        help="where to write it (default: docs/supported_ops.md); '-' prints it")
    args = parser.parse_args(argv)
    if args.path == "-":
        sys.stdout.write(render())
        return 0
    try:
        with open(args.path, "w") as f:
            f.write(render())
    except OSError as exc:
        parser.error(f"cannot write {args.path!r}: {exc.strerror or exc}")
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
