"""The ``fp4spec`` command line (also ``python -m fp4spec``)."""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import sys

from .cli_options import DeprecatedAlias, add_deprecated, parse_args  # noqa: F401 -- shared by the subcommands
from .number_formats import formats, get_format


def _cmd_formats(args) -> int:
    for fmt in formats.values():
        print(fmt.describe())
    return 0


def render_table(fmt_name: str, output: str) -> str:
    """Every code of a format as markdown, CSV or JSON."""
    fmt = get_format(fmt_name)
    rows = fmt.code_table()
    if output == "json":
        return json.dumps({"format": fmt.name, "bits": fmt.bits, "codes": [
            {"code": r.code, "hex": r.hex, "sign": r.sign, "exponent": r.exponent, "mantissa": r.mantissa,
             "value": None if r.value != r.value else r.value} for r in rows]}, indent=2)
    if output == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["code", "hex", "sign", "exponent", "mantissa", "value"])
        for r in rows:
            w.writerow([r.code, r.hex, r.sign, r.exponent, r.mantissa, repr(r.value)])
        return buf.getvalue().rstrip("\n")
    lines = ["| hex | sign | exponent | mantissa | value |", "|---|---|---|---|---|"]
    lines += [f"| {r.hex} | {r.sign or '-'} | {r.exponent or '-'} | {r.mantissa or '-'} | {r.value!r} |" for r in rows]
    return "\n".join(lines)


def _cmd_table(args) -> int:
    print(render_table(args.format, args.output))
    return 0


def _cmd_profiles(args) -> int:
    from .profiles import describe_profiles

    print(describe_profiles())
    return 0


#: Subcommands with parsers of their own (everything after the name is theirs): the module
#: whose ``main(argv)`` runs them, the optional package it needs, the extra that installs it,
#: what needs it, the help line.
_DELEGATED = {
    "conform": ("conformance.command", "hypothesis", "conform", "the conformance suite",
                "check a backend bit for bit against the spec"),
    "vectors": ("conformance.vectors", "hypothesis", "conform", "the conformance suite",
                "generate or check test vectors for hardware run elsewhere"),
    "train": ("training.pretrain", "torch", "torch", "training", "pretrain a small GPT with a 4-bit training recipe"),
    "train-summary": ("training.summary", "torch", "torch", "training", "tabulate and plot fp4spec train runs"),
}


def _run_delegated(command: str, rest) -> int:
    module, package, extra, what, _help = _DELEGATED[command]
    try:
        mod = importlib.import_module(f"fp4spec.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != package:
            raise
        print(f"fp4spec {command}: error: {what} needs {package}; install it with: pip install 'fp4spec[{extra}]'",
              file=sys.stderr)
        return 2
    return mod.main(list(rest))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fp4spec", description="The executable, bit-exact specification of 4-bit number formats.")
    parser.add_argument("--version", action="version", version=f"fp4spec {__import__('fp4spec').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("formats", help="list every catalogued format, one line each",
                       description="List every catalogued number format, one line each: kind, bits, bias, largest "
                                   "value, smallest normal and subnormal, signedness and special codes.")
    p.set_defaults(func=_cmd_formats)

    p = sub.add_parser("table", help="every code of a format: hex, sign/exponent/mantissa bits, value",
                       description="Print every code of one format with its hex code, sign, exponent and mantissa "
                                   "bits and its exact value, as Markdown, CSV or JSON.")
    p.add_argument("format", choices=list(formats), metavar="FORMAT", help=f"one of: {', '.join(formats)}")
    p.add_argument("--output", choices=["md", "csv", "json"], default="md", help="md (default), csv or json")
    p.set_defaults(func=_cmd_table)

    p = sub.add_parser("profiles", help="list the vendor profiles and where their policies differ",
                       description="Print every vendor profile's choice for each policy as a Markdown table; "
                                   "rows where the profiles disagree are marked.")
    p.set_defaults(func=_cmd_profiles)

    for name, (*_, help_text) in _DELEGATED.items():
        p = sub.add_parser(name, add_help=False, help=f"{help_text} (fp4spec {name} --help)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=lambda a, name=name: _run_delegated(name, a.rest))

    from .analysis.report import add_analyze_parser

    add_analyze_parser(sub)
    return parser




def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _DELEGATED:
        return _run_delegated(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except (ValueError, TypeError) as exc:
        print(f"fp4spec: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
