"""``fp4spec conform``: run every property for every scheme and rounding a backend claims.

:func:`run` is the library entry point (returns a :class:`~fp4spec.conformance.report.Report`);
:func:`main` is the command line (``main(argv) -> exit code``: 0 when everything claimed
conforms, 1 when anything departs, 2 on usage errors).

Reproducibility: every (property, scheme, rounding) gets its own seed, derived from the run
seed and its names with CRC-32, which seeds both the deterministic checks (numpy) and
hypothesis. The same seed, backend and fp4spec/hypothesis versions give the same inputs,
and selecting a subset (``--scheme``, ``--rounding``, ``--property``) does not change the
inputs of what remains.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import zlib

from fp4spec.backends.base import BackendError, resolve_scheme, scheme_spec
from fp4spec.backends.registry import as_availability, get_backend
from fp4spec.rounding import ROUNDING_MODES

from .compare import Departure
from .properties import PROPERTIES, Env, Property, Target
from .report import ERROR, FAIL, PASS, SKIP, Counterexample, PropertyResult, Report, render_text, write_report

DEFAULT_MAX_EXAMPLES = 20
DEFAULT_SEED = 0


class BackendUnavailable(BackendError):
    """The backend says it cannot run here (``is_available()`` is falsy)."""


def derive_seed(seed: int, *parts) -> int:
    """A 32-bit seed for one (property, scheme, rounding), stable across runs and subsets."""
    return zlib.crc32("/".join(map(str, (seed,) + parts)).encode())


# -- planning ------------------------------------------------------------------------------------------

def _check_names(kind: str, asked, allowed) -> list[str]:
    for a in asked:
        if a not in allowed:
            raise BackendError(f"{kind}: {a!r} is not one of {', '.join(map(repr, allowed))}")
    return list(asked)


def plan(backend, caps, *, schemes=None, rounding=None, properties=None, sr_bits: int = 8):
    """The (Property, Target) pairs a run will check, in report order, and the rows it skips.

    Raises BackendError for a scheme or rounding the backend does not claim (usage errors).
    """
    props = [PROPERTIES[p] for p in _check_names("property", properties, PROPERTIES)] if properties \
        else list(PROPERTIES.values())
    if schemes:
        specs = []
        for s in schemes:
            sch = resolve_scheme(s)
            if not caps.supports_scheme(sch):
                raise BackendError(f"scheme: {scheme_spec(sch)!r} is not claimed by backend {backend.name!r}; "
                                   f"it claims {', '.join(caps.schemes) or 'nothing'}")
            specs.append(scheme_spec(sch))
    else:
        specs = list(caps.schemes)
    asked_r = _check_names("rounding", rounding or [], ROUNDING_MODES)
    if asked_r:
        claimed = {r for s in specs for r in caps.roundings_for(s)}
        missing = [r for r in asked_r if r not in claimed]
        if missing:
            raise BackendError(f"rounding: {missing[0]!r} is not claimed by backend {backend.name!r} for "
                               f"{', '.join(specs)}; it claims {', '.join(sorted(claimed)) or 'nothing'}")
    items = []
    for spec in specs:
        sch = resolve_scheme(spec)
        modes = [r for r in caps.roundings_for(spec) if not asked_r or r in asked_r]
        for r in modes:
            for p in props:
                if p.scope == "rounding" and (p.roundings is None or r in p.roundings):
                    items.append((p, Target(sch, spec, r, sr_bits)))
        if modes:
            r0 = "rne" if "rne" in modes else modes[0]
            for p in props:
                if p.scope == "scheme":
                    items.append((p, Target(sch, spec, r0, sr_bits)))
    for p in props:
        if p.scope == "backend":
            items.append((p, Target(None, "*", "-", sr_bits)))
    return items


# -- running one property ------------------------------------------------------------------------------

def _hypothesis_examples(strategy, fn, max_examples: int, seed: int, shrink: bool) -> int:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    count = [0]
    failures: list[Departure] = []

    def body(example):
        count[0] += 1
        try:
            fn(example)
        except Departure as d:
            failures.append(d)
            raise

    test = settings(max_examples=max_examples, database=None, deadline=None, derandomize=False,
                    phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,),
                    suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                    report_multiple_bugs=False, print_blob=False)(hseed(seed)(given(strategy)(body)))
    try:
        test()
    except Departure as d:
        raise (failures[-1] if failures else d) from None
    except Exception:
        if failures:  # e.g. hypothesis' Flaky: the backend answered differently on a replay
            d = failures[-1]
            d.counterexample.notes.append("the backend's answer for this input was not reproducible on a replay")
            raise d from None
        raise
    return count[0]


def run_property(env: Env, prop: Property, target: Target, *, max_examples: int = DEFAULT_MAX_EXAMPLES,
                 seed: int = DEFAULT_SEED, shrink: bool = False) -> PropertyResult:
    """Check one property for one target: the deterministic checks, then ``max_examples``
    hypothesis examples; the first departure stops it."""
    import numpy as np

    start = time.perf_counter()
    result = PropertyResult(prop.name, target.spec, target.rounding, PASS)
    reason = prop.applies(target, env.caps) if target.scheme is not None or prop.scope == "backend" else None
    if reason:
        result.status, result.reason = SKIP, reason
        return result
    s = derive_seed(seed, prop.name, target.spec, target.rounding)
    rng = np.random.default_rng(s)
    n = 0
    try:
        for check in prop.explicit(env, target, rng):
            n += 1
            check()
        strategy = prop.strategy(env, target) if max_examples > 0 else None
        if strategy is not None:
            n += _hypothesis_examples(strategy, lambda ex: prop.check(env, target, ex), max_examples,
                                      derive_seed(s, "hypothesis"), shrink)
    except Departure as d:
        result.status, result.counterexample = FAIL, d.counterexample
        n = max(n, 1)
    except Exception as exc:  # noqa: BLE001 -- reported, never hidden
        result.status = ERROR
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        result.reason = f"{type(exc).__name__}: {exc} ({tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        result.counterexample = Counterexample(f"internal error while checking: {result.reason}", field="exception")
    result.examples = n
    result.seconds = time.perf_counter() - start
    return result


# -- running everything --------------------------------------------------------------------------------

class StderrProgress:
    """Progress on stderr: one updating line on a terminal, one line per scheme otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.group = None
        self.counts = {PASS: 0, FAIL: 0, ERROR: 0, SKIP: 0}
        self.group_start = time.perf_counter()

    def __call__(self, done: int, total: int, result: PropertyResult) -> None:
        if self.tty:
            line = f"[{done}/{total}] {result.scheme} {result.rounding} {result.property}: {result.status}"
            self.stream.write("\r" + line[:100].ljust(100))
            self.stream.flush()
            return
        if result.scheme != self.group:
            self._flush_group()
            self.group = result.scheme
            self.group_start = time.perf_counter()
        self.counts[result.status] += 1
        self.done, self.total = done, total

    def _flush_group(self) -> None:
        if self.group is None:
            return
        c = self.counts
        bad = f", {c[FAIL]} failed" if c[FAIL] else ""
        bad += f", {c[ERROR]} errors" if c[ERROR] else ""
        self.stream.write(f"[{self.done}/{self.total}] {self.group}: {c[PASS]} passed{bad}, {c[SKIP]} skipped "
                          f"({time.perf_counter() - self.group_start:.1f} s)\n")
        self.stream.flush()
        self.counts = {k: 0 for k in self.counts}

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
        else:
            self._flush_group()
        self.stream.flush()


def run(backend, *, schemes=None, rounding=None, properties=None, max_examples: int = DEFAULT_MAX_EXAMPLES,
        seed: int = DEFAULT_SEED, shrink: bool = False, progress=None, reference=None) -> Report:
    """Check a backend (a name, ``"module:Name"``, a Backend class or instance).

    Args:
        schemes: scheme specs to check (default: every scheme the backend claims).
        rounding: rounding modes to check (default: every mode claimed per scheme).
        properties: property names (default: all of :data:`~fp4spec.conformance.properties.PROPERTIES`).
        max_examples: hypothesis examples per (property, scheme, rounding), after the
            deterministic checks (0: deterministic checks only).
        seed: the run seed (same seed, same inputs).
        shrink: let hypothesis shrink a counterexample (slower; default: report the first).
        progress: ``callable(done, total, PropertyResult)`` or None.
        reference: the reference backend (default: the numpy emulator).

    Raises :class:`~fp4spec.backends.BackendError` on usage errors (unknown or unclaimed
    scheme, unavailable backend).
    """
    if not isinstance(max_examples, int) or max_examples < 0:
        raise BackendError(f"max_examples: {max_examples!r} is not a non-negative integer")
    be = get_backend(backend)
    avail = as_availability(be.is_available())
    if not avail:
        raise BackendUnavailable(f"backend: {be.name!r} is not available here: {avail.reason or 'no reason given'}")
    caps = be.capabilities()
    ref = get_backend(reference or "numpy")
    sr_bits = 8 if 8 in caps.sr_bits else caps.sr_bits[0]
    items = plan(be, caps, schemes=schemes, rounding=rounding, properties=properties, sr_bits=sr_bits)
    env = Env(be, ref, caps)
    start = time.perf_counter()
    results = []
    for i, (prop, target) in enumerate(items, 1):
        res = run_property(env, prop, target, max_examples=max_examples, seed=seed, shrink=shrink)
        results.append(res)
        if progress is not None:
            progress(i, len(items), res)
    if progress is not None and hasattr(progress, "close"):
        progress.close()
    notes = "; ".join(filter(None, [avail.reason, caps.notes]))
    return Report(be.name, results, seed=seed, max_examples=max_examples, seconds=time.perf_counter() - start,
                  notes=notes)


# -- command line --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fp4spec conform",
        description="Check a backend against the fp4spec reference, bit for bit: every property, for every "
                    "scheme and rounding mode the backend claims. Exit 0: conforms; 1: departs; 2: usage error.")
    p.add_argument("--backend", required=True, metavar="NAME|module:Name",
                   help="a built-in backend (numpy) or a Backend class importable as package.module:Name")
    p.add_argument("--scheme", action="extend", nargs="+", metavar="S", default=None,
                   help="scheme specs to check, e.g. nvfp4 or mxfp4:scale_rule=rceil (default: all claimed)")
    p.add_argument("--rounding", action="extend", nargs="+", metavar="R", default=None, choices=ROUNDING_MODES,
                   help=f"rounding modes to check, among {', '.join(ROUNDING_MODES)} (default: all claimed)")
    p.add_argument("--property", action="extend", nargs="+", metavar="P", default=None, choices=list(PROPERTIES),
                   help=f"properties to check, among {', '.join(PROPERTIES)} (default: all)")
    p.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, metavar="N",
                   help=f"hypothesis examples per property, scheme and rounding, after the deterministic "
                        f"checks (default {DEFAULT_MAX_EXAMPLES})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N", help=f"run seed (default {DEFAULT_SEED})")
    p.add_argument("--report", metavar="FILE.json|FILE.md", help="also write the full report (JSON or Markdown)")
    p.add_argument("--shrink", action="store_true", help="shrink counterexamples with hypothesis (slower)")
    p.add_argument("--all", action="store_true", help="show skipped rows in the table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--list", action="store_true", help="print what the backend claims and the properties, then exit")
    return p


def _describe_claims(be, caps) -> str:
    lines = [f"backend {be.name!r}: {caps.notes}".rstrip(": ")]
    for s in caps.schemes:
        lines.append(f"  {s:<32} rounding: {', '.join(caps.roundings_for(s))}")
    lines.append(f"  operations: {', '.join(sorted(caps.operations))}")
    lines.append("properties:")
    for p in PROPERTIES.values():
        lines.append(f"  {p.name:<15} [{p.scope}] {p.title}  (catches {p.catches})")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``fp4spec conform ...``; returns the exit code (0 conforms, 1 departs, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.report and not args.report.endswith((".json", ".md")):
        print(f"fp4spec conform: error: report: {args.report!r} must end in .json or .md", file=sys.stderr)
        return 2
    if args.max_examples < 0:
        print(f"fp4spec conform: error: max-examples: {args.max_examples} is negative", file=sys.stderr)
        return 2
    try:
        if args.list:
            be = get_backend(args.backend)
            print(_describe_claims(be, be.capabilities()))
            return 0
        report = run(args.backend, schemes=args.scheme, rounding=args.rounding, properties=args.property,
                     max_examples=args.max_examples, seed=args.seed, shrink=args.shrink,
                     progress=None if args.quiet else StderrProgress())
    except BackendError as exc:
        print(f"fp4spec conform: error: {exc}", file=sys.stderr)
        return 2
    print(render_text(report, skipped=args.all))
    if report.departures:
        print(f"reproduce: fp4spec conform --backend {args.backend} --seed {args.seed} "
              f"--max-examples {args.max_examples} (add --scheme/--rounding/--property to narrow it down)")
    if args.report:
        try:
            write_report(report, args.report)
        except OSError as exc:
            print(f"fp4spec conform: error: report: cannot write {args.report!r}: {exc}", file=sys.stderr)
            return 2
    return report.exit_code()


__all__ = ["BackendUnavailable", "DEFAULT_MAX_EXAMPLES", "DEFAULT_SEED", "StderrProgress", "derive_seed", "main",
           "plan", "run", "run_property"]


if __name__ == "__main__":  # python -m fp4spec.conformance.runner --backend ...
    sys.exit(main())
