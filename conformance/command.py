"""The ``fp4spec conform`` command line: parse, run, print, write the report, exit 0 / 1 / 2.

Exit status: 0 when everything claimed conforms, 1 when anything departs, 2 on a usage or
set-up error (one line on stderr: an unknown option, an unclaimed scheme, a backend that does
not load, whose ``__init__``, ``is_available()`` or ``capabilities()`` raises, an unwritable
report path -- checked before the run).

Nothing here needs hypothesis: ``--help`` and a run without ``--shrink`` work without it.
"""

from __future__ import annotations

import argparse
import sys

from fp4spec.backends.base import BackendError
from fp4spec.cli_options import add_deprecated, parse_args
from fp4spec.rounding import ROUNDING_MODES

from .loading import load_backend, capabilities
from .matmul_properties import schemes_for
from .properties import PROPERTIES
from .report import render_text, report_path_problem, write_report
from .runner import (
    DEFAULT_MATMUL_MAX_EXAMPLES,
    DEFAULT_MAX_EXAMPLES,
    DEFAULT_SEED,
    MATMUL_PROPERTIES,
    THOROUGH_MATMUL_MAX_EXAMPLES,
    THOROUGH_MAX_EXAMPLES,
    StderrProgress,
    run,
)

PROG = "fp4spec conform"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Check a backend against the fp4spec reference, bit for bit: every property, for every "
                    "scheme and rounding mode the backend claims -- the deterministic checks first, then random "
                    "examples. A departure names its first counterexample and, where it matches one, the known "
                    "mistake behind it. Exit 0: conforms; 1: departs; 2: usage or set-up error.",
        epilog="Output: a summary per scheme, the departing rows with their counterexamples, and the departures "
               "grouped by cause; --all lists every row. The return contract and a tutorial: "
               "https://fp4spec.readthedocs.io/tutorial/")
    p.add_argument("--backend", required=True, metavar="NAME|module:Name|file.py:Name",
                   help="a built-in backend (numpy, torch, triton, native), a Backend class importable as "
                        "package.module:Name (the current directory included), or one in a file, "
                        "path/to/file.py:Name")
    p.add_argument("--scheme", action="extend", nargs="+", metavar="S", default=None,
                   help="scheme specs to check, e.g. nvfp4 or mxfp4:scale_rule=rceil (default: all claimed)")
    add_deprecated(p, "--schemes", "--scheme", "scheme", "extend", metavar="S")
    p.add_argument("--rounding", action="extend", nargs="+", metavar="R", default=None, choices=ROUNDING_MODES,
                   help=f"rounding modes to check, among {', '.join(ROUNDING_MODES)} (default: all claimed)")
    p.add_argument("--property", action="extend", nargs="+", metavar="P", default=None,
                   choices=list(PROPERTIES) + ["matmul"] + list(MATMUL_PROPERTIES),
                   help=f"properties to check, among {', '.join(PROPERTIES)}, matmul (every GEMM row) and "
                        f"{', '.join(MATMUL_PROPERTIES)} (default: all)")
    p.add_argument("--accumulator", action="extend", nargs="+", metavar="ACC", default=None,
                   help="accumulator models to check the backend's matmul under, among those it claims "
                        "(default: all claimed; see fp4spec.accumulators)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help=f"random examples per property, scheme and rounding, after the deterministic checks "
                        f"(default {DEFAULT_MAX_EXAMPLES}, --thorough {THOROUGH_MAX_EXAMPLES}; 0: the deterministic "
                        f"checks only)")
    p.add_argument("--matmul-max-examples", type=int, default=None, metavar="N",
                   help=f"random examples (whole GEMMs) per matmul row, family and accumulator model (default "
                        f"{DEFAULT_MATMUL_MAX_EXAMPLES}, --thorough {THOROUGH_MATMUL_MAX_EXAMPLES}; 0 skips the "
                        f"matmul rows)")
    p.add_argument("--thorough", action="store_true",
                   help=f"the full depth: {THOROUGH_MAX_EXAMPLES} examples per row and "
                        f"{THOROUGH_MATMUL_MAX_EXAMPLES} per matmul row (unless given)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N", help=f"run seed (default {DEFAULT_SEED})")
    p.add_argument("--shrink", action="store_true",
                   help="draw the random examples with hypothesis and shrink counterexamples (slower; needs "
                        "hypothesis)")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first departing row")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run the rows in N processes, as tasks per scheme, rounding mode and property (the same "
                        "rows and verdicts; for backends that compile kernels, e.g. triton, the compiles run side "
                        "by side); default 1")
    p.add_argument("--report", metavar="FILE.json|FILE.md",
                   help="also write the full report, every row, as JSON or Markdown (checked before the run)")
    p.add_argument("--all", action="store_true", help="list every row (passing and skipped too), not only departures")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    add_deprecated(p, "--quiet", "--no-progress", "no_progress", "store_true")
    p.add_argument("--list", action="store_true", help="print what the backend claims and the properties, then exit")
    return p


def describe_claims(be, caps) -> str:
    """What ``--list`` prints: the backend's claims and the properties."""
    lines = [f"backend {be.name!r}: {caps.notes}".rstrip(": ")]
    for s in caps.schemes:
        lines.append(f"  {s:<32} rounding: {', '.join(caps.roundings_for(s))}")
    lines.append(f"  operations: {', '.join(sorted(caps.operations))}")
    if caps.rht:
        lines.append(f"  rht (quantize(..., rht=)): {', '.join(caps.rht)}")
    if caps.supports("matmul"):
        lines.append("  accumulators (matmul):")
        for acc in caps.accumulators:
            lines.append(f"    {acc:<16} schemes: {', '.join(schemes_for(acc))}")
    lines.append("properties:")
    for p in PROPERTIES.values():
        lines.append(f"  {p.name:<15} [{p.scope}] {p.title}  (catches {p.catches})")
    lines.append(f"  {', '.join(MATMUL_PROPERTIES)} [accumulator] matmul equals fp4spec.matmul with the "
                 f"claimed model, bit for bit (selected together as 'matmul')")
    return "\n".join(lines)


def _error(text: str) -> int:
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 2


def _examples(args) -> tuple[int, int]:
    n = args.max_examples if args.max_examples is not None else \
        THOROUGH_MAX_EXAMPLES if args.thorough else DEFAULT_MAX_EXAMPLES
    m = args.matmul_max_examples if args.matmul_max_examples is not None else \
        THOROUGH_MATMUL_MAX_EXAMPLES if args.thorough else DEFAULT_MATMUL_MAX_EXAMPLES
    return n, m


def _reproduce(args, report, n: int, m: int) -> str:
    mm = "" if report.matmul_max_examples is None else f" --matmul-max-examples {m}"
    shrink = " --shrink" if args.shrink else ""
    return (f"reproduce: {PROG} --backend {args.backend} --seed {args.seed} --max-examples {n}{mm}{shrink} "
            f"(add --scheme/--rounding/--property/--accumulator to narrow it down)")


def main(argv=None) -> int:
    """``fp4spec conform ...``; returns the exit code (0 conforms, 1 departs, 2 usage error)."""
    parser = build_parser()
    args, code = parse_args(parser, argv)
    if args is None:
        return code
    n, m = _examples(args)
    for flag, value in (("max-examples", n), ("matmul-max-examples", m)):
        if value < 0:
            return _error(f"{flag}: {value} is negative")
    if args.report:
        problem = report_path_problem(args.report)
        if problem:
            return _error(f"report: {problem}")
    try:
        if args.list:
            be = load_backend(args.backend)
            print(describe_claims(be, capabilities(be)))
            return 0
        if args.jobs != 1:
            if args.jobs < 1:
                return _error(f"jobs: {args.jobs} is not a positive number of processes")
            if args.fail_fast:
                return _error("fail-fast: not with --jobs (the tasks run at once; give --jobs 1)")
            from .parallel import run_parallel

            report = run_parallel(args.backend, args.jobs, schemes=args.scheme, rounding=args.rounding,
                                  properties=args.property, max_examples=n, seed=args.seed, shrink=args.shrink,
                                  accumulators=args.accumulator, matmul_max_examples=m,
                                  progress=None if args.no_progress else sys.stderr)
        else:
            report = run(args.backend, schemes=args.scheme, rounding=args.rounding, properties=args.property,
                         max_examples=n, seed=args.seed, shrink=args.shrink,
                         progress=None if args.no_progress else StderrProgress(), accumulators=args.accumulator,
                         matmul_max_examples=m, fail_fast=args.fail_fast)
    except BackendError as exc:
        return _error(str(exc))
    print(render_text(report, all_rows=args.all))
    if report.departures:
        print(_reproduce(args, report, n, m))
    if args.report:
        try:
            write_report(report, args.report)
        except OSError as exc:
            return _error(f"report: cannot write {args.report!r}: {exc}")
    return report.exit_code()


__all__ = ["build_parser", "describe_claims", "main"]


if __name__ == "__main__":  # python -m fp4spec.conformance.command --backend ...
    sys.exit(main())
