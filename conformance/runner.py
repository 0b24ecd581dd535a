"""``fp4spec conform``: run every property for every scheme and rounding a backend claims.

A backend that claims the ``matmul`` operation is also checked, for every accumulator model it
claims (``Capabilities.accumulators``), by the GEMM properties of
:mod:`~fp4spec.conformance.matmul_properties`: one row per (case family, model), named
``matmul/<family>`` with rounding ``acc=<model>``; A and B are drawn from the schemes the
backend claims (by name) that the model takes.

:func:`run` is the library entry point (returns a :class:`~fp4spec.conformance.report.Report`);
:func:`main` is the command line (``main(argv) -> exit code``: 0 when everything claimed
conforms, 1 when anything departs, 2 on usage errors).

Reproducibility: every (property, scheme, rounding) gets its own seed, derived from the run
seed and its names with CRC-32, which seeds both the deterministic checks (numpy) and
hypothesis (matmul rows: the names of the row, ``matmul/<family>``, its schemes and
``acc=<model>``). The same seed, backend and fp4spec/hypothesis versions give the same
inputs, and selecting a subset (``--scheme``, ``--rounding``, ``--property``,
``--accumulator``) does not change the inputs of what remains (``--scheme`` changes the
schemes, hence the inputs, of a matmul row).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback
import zlib

from fp4spec.backends.base import BackendError, as_numpy, resolve_scheme, scheme_spec
from fp4spec.backends.registry import as_availability, get_backend
from fp4spec.rounding import ROUNDING_MODES

from .compare import Departure
from .matmul_properties import FAMILIES, check_matmul, schemes_for, to_report_rows
from .properties import PROPERTIES, Env, Property, Target
from .report import ERROR, FAIL, PASS, SKIP, Counterexample, PropertyResult, Report, render_text, write_report

DEFAULT_MAX_EXAMPLES = 20
#: Hypothesis examples per matmul row (family x accumulator model) by default: GEMM rows have
#: no deterministic checks, but each example is a whole GEMM and the families are aimed at
#: where the models differ (the ``truncation`` family catches a one-bit change of F in 2).
DEFAULT_MATMUL_MAX_EXAMPLES = 10
DEFAULT_SEED = 0

#: ``--property`` names of the GEMM rows: ``matmul`` (all of them) or ``matmul/<family>``.
MATMUL_PROPERTIES = tuple(f"matmul/{f}" for f in FAMILIES)


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


@dataclasses.dataclass(frozen=True)
class MatmulItem:
    """One matmul row of a run: a case family under one accumulator model, A and B drawn
    from ``schemes``; ``reason`` set: the row is skipped (shown with ``--all``)."""

    family: str
    accumulator: str
    schemes: tuple[str, ...] = ()
    reason: str = ""

    @property
    def name(self) -> str:
        """The row's property name: ``matmul/<family>`` (``matmul`` for a skipped model)."""
        return f"matmul/{self.family}" if self.family else "matmul"

    @property
    def spec(self) -> str:
        return ",".join(self.schemes) or "*"

    @property
    def rounding(self) -> str:
        return f"acc={self.accumulator}" if self.accumulator else "-"


def split_properties(properties) -> tuple[list[str] | None, list[str]]:
    """(quantize property names or None for all, matmul families) of a ``--property`` list.

    ``None`` selects everything; ``"matmul"`` every family, ``"matmul/<family>"`` one.
    Raises BackendError naming an unknown property.
    """
    if not properties:
        return None, list(FAMILIES)
    allowed = list(PROPERTIES) + ["matmul"] + list(MATMUL_PROPERTIES)
    _check_names("property", properties, allowed)
    quantize = [p for p in properties if p in PROPERTIES]
    families = [f for f in FAMILIES if "matmul" in properties or f"matmul/{f}" in properties]
    return quantize, families


def plan_matmul(backend, caps, *, schemes=None, accumulators=None, families=FAMILIES) -> list[MatmulItem]:
    """The matmul rows of a run: every family for every accumulator model claimed (or asked
    for), A and B drawn from the claimed (or asked) schemes, by name, that the model takes.

    Raises BackendError for an accumulator model that is unknown or not claimed (usage errors).
    """
    from fp4spec.accumulator_models import accumulators as catalogue

    claimed = caps.accumulators if caps.supports("matmul") else ()
    for a in accumulators or ():
        if a not in catalogue:
            raise BackendError(f"accumulator: {a!r} is not one of {', '.join(map(repr, catalogue))}")
        if not caps.supports("matmul"):
            raise BackendError(f"accumulator: {a!r} asked for, but backend {backend.name!r} does not claim "
                               f"the 'matmul' operation")
        if a not in claimed:
            raise BackendError(f"accumulator: {a!r} is not claimed by backend {backend.name!r}; it claims "
                               f"{', '.join(claimed)}")
    if not families:
        return []
    if not caps.supports("matmul"):
        return [MatmulItem("", "", reason="operation 'matmul' not claimed")]
    names = []
    for spec in (schemes or caps.schemes):
        name = resolve_scheme(spec).name
        if name not in names:
            names.append(name)
    items = []
    for acc in (list(dict.fromkeys(accumulators)) if accumulators else claimed):
        takes = schemes_for(acc)
        picked = tuple(s for s in takes if s in names)
        if not picked:
            items.append(MatmulItem("", acc, reason=f"accumulator {acc!r} takes none of the schemes checked "
                                                    f"({', '.join(names)}); it takes {', '.join(takes)}"))
            continue
        items += [MatmulItem(f, acc, picked) for f in families]
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


def run_matmul_row(backend, item: MatmulItem, *, max_examples: int = DEFAULT_MATMUL_MAX_EXAMPLES,
                   seed: int = DEFAULT_SEED, shrink: bool = False) -> PropertyResult:
    """Check one matmul row: ``check_matmul(backend.matmul, ...)`` for one family and model,
    ``max_examples`` cases from the row's own seed; the first departure stops it."""
    start = time.perf_counter()
    if item.reason or max_examples == 0:
        return PropertyResult(item.name, item.spec, item.rounding, SKIP,
                              reason=item.reason or "matmul max examples is 0")

    def backend_matmul(qa, qb, *, accumulator, c):
        return as_numpy(backend.matmul(qa, qb, accumulator=accumulator, c=c))

    s = derive_seed(seed, item.name, item.spec, item.rounding)
    try:
        (res,) = check_matmul(backend_matmul, item.accumulator, seed=s, max_examples=max_examples,
                              families=(item.family,), schemes=item.schemes, shrink=shrink)
        (row,) = to_report_rows([res])
    except Exception as exc:  # noqa: BLE001 -- the suite or the reference failed: reported, never hidden
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        reason = f"{type(exc).__name__}: {exc} ({tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        row = PropertyResult(item.name, item.spec, item.rounding, ERROR, reason=reason,
                             counterexample=Counterexample(f"internal error while checking: {reason}",
                                                           field="exception"))
    row.seconds = time.perf_counter() - start
    return row


# -- running everything --------------------------------------------------------------------------------

def _group(result: PropertyResult) -> str:
    """Progress groups: a scheme, or ``matmul acc=<model>`` for the GEMM rows."""
    return f"matmul {result.rounding}" if result.property.startswith("matmul") else result.scheme

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
            line = f"[{done}/{total}] {_group(result)} {result.rounding} {result.property}: {result.status}"
            self.stream.write("\r" + line[:100].ljust(100))
            self.stream.flush()
            return
        if _group(result) != self.group:
            self._flush_group()
            self.group = _group(result)
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
        seed: int = DEFAULT_SEED, shrink: bool = False, progress=None, reference=None, accumulators=None,
        matmul_max_examples: int = DEFAULT_MATMUL_MAX_EXAMPLES) -> Report:
    """Check a backend (a name, ``"module:Name"``, a Backend class or instance).

    Args:
        schemes: scheme specs to check (default: every scheme the backend claims); matmul
            rows draw A and B from these (by name).
        rounding: rounding modes to check (default: every mode claimed per scheme); matmul
            rows have none and are not affected.
        properties: property names (default: all of :data:`~fp4spec.conformance.properties.PROPERTIES`
            and every matmul row); ``"matmul"`` selects every matmul row, ``"matmul/<family>"``
            one family (:data:`MATMUL_PROPERTIES`).
        max_examples: hypothesis examples per (property, scheme, rounding), after the
            deterministic checks (0: deterministic checks only).
        seed: the run seed (same seed, same inputs).
        shrink: let hypothesis shrink a counterexample (slower; default: report the first).
        progress: ``callable(done, total, PropertyResult)`` or None.
        reference: the reference backend (default: the numpy emulator).
        accumulators: accumulator models to check the GEMM under (default: every model the
            backend claims in ``capabilities().accumulators``).
        matmul_max_examples: hypothesis examples per matmul row (0: skip the matmul rows).

    Raises :class:`~fp4spec.backends.BackendError` on usage errors (unknown or unclaimed
    scheme or accumulator model, unavailable backend).
    """
    if not isinstance(max_examples, int) or max_examples < 0:
        raise BackendError(f"max_examples: {max_examples!r} is not a non-negative integer")
    if not isinstance(matmul_max_examples, int) or isinstance(matmul_max_examples, bool) or matmul_max_examples < 0:
        raise BackendError(f"matmul_max_examples: {matmul_max_examples!r} is not a non-negative integer")
    if isinstance(accumulators, str):
        accumulators = [accumulators]
    quantize_props, families = split_properties(properties)
    be = get_backend(backend)
    avail = as_availability(be.is_available())
    if not avail:
        raise BackendUnavailable(f"backend: {be.name!r} is not available here: {avail.reason or 'no reason given'}")
    caps = be.capabilities()
    ref = get_backend(reference or "numpy")
    sr_bits = 8 if 8 in caps.sr_bits else caps.sr_bits[0]
    items = plan(be, caps, schemes=schemes, rounding=rounding, properties=quantize_props or None, sr_bits=sr_bits)
    if quantize_props == []:  # only matmul rows asked for (plan still checked schemes and rounding)
        items = []
    mm_items = plan_matmul(be, caps, schemes=schemes, accumulators=accumulators, families=families)
    env = Env(be, ref, caps)
    start = time.perf_counter()
    results = []
    total = len(items) + len(mm_items)
    for prop, target in items:
        results.append(run_property(env, prop, target, max_examples=max_examples, seed=seed, shrink=shrink))
        if progress is not None:
            progress(len(results), total, results[-1])
    for item in mm_items:
        results.append(run_matmul_row(be, item, max_examples=matmul_max_examples, seed=seed, shrink=shrink))
        if progress is not None:
            progress(len(results), total, results[-1])
    if progress is not None and hasattr(progress, "close"):
        progress.close()
    notes = "; ".join(filter(None, [avail.reason, caps.notes]))
    return Report(be.name, results, seed=seed, max_examples=max_examples, seconds=time.perf_counter() - start,
                  notes=notes, matmul_max_examples=matmul_max_examples if mm_items else None)


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
    p.add_argument("--property", action="extend", nargs="+", metavar="P", default=None,
                   choices=list(PROPERTIES) + ["matmul"] + list(MATMUL_PROPERTIES),
                   help=f"properties to check, among {', '.join(PROPERTIES)}, matmul (every GEMM row) and "
                        f"{', '.join(MATMUL_PROPERTIES)} (default: all)")
    p.add_argument("--accumulator", action="extend", nargs="+", metavar="ACC", default=None,
                   help="accumulator models to check the backend's matmul under, among those it claims "
                        "(default: all claimed; see fp4spec.accumulators)")
    p.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, metavar="N",
                   help=f"hypothesis examples per property, scheme and rounding, after the deterministic "
                        f"checks (default {DEFAULT_MAX_EXAMPLES})")
    p.add_argument("--matmul-max-examples", type=int, default=DEFAULT_MATMUL_MAX_EXAMPLES, metavar="N",
                   help=f"hypothesis examples (whole GEMMs) per matmul row, family and accumulator model "
                        f"(default {DEFAULT_MATMUL_MAX_EXAMPLES}; 0 skips the matmul rows)")
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
    if args.matmul_max_examples < 0:
        print(f"fp4spec conform: error: matmul-max-examples: {args.matmul_max_examples} is negative",
              file=sys.stderr)
        return 2
    try:
        if args.list:
            be = get_backend(args.backend)
            print(_describe_claims(be, be.capabilities()))
            return 0
        report = run(args.backend, schemes=args.scheme, rounding=args.rounding, properties=args.property,
                     max_examples=args.max_examples, seed=args.seed, shrink=args.shrink,
                     progress=None if args.quiet else StderrProgress(), accumulators=args.accumulator,
                     matmul_max_examples=args.matmul_max_examples)
    except BackendError as exc:
        print(f"fp4spec conform: error: {exc}", file=sys.stderr)
        return 2
    print(render_text(report, skipped=args.all))
    if report.departures:
        mm = "" if report.matmul_max_examples is None else f" --matmul-max-examples {args.matmul_max_examples}"
        print(f"reproduce: fp4spec conform --backend {args.backend} --seed {args.seed} "
              f"--max-examples {args.max_examples}{mm} (add --scheme/--rounding/--property/--accumulator to "
              f"narrow it down)")
    if args.report:
        try:
            write_report(report, args.report)
        except OSError as exc:
            print(f"fp4spec conform: error: report: cannot write {args.report!r}: {exc}", file=sys.stderr)
            return 2
    return report.exit_code()


__all__ = ["BackendUnavailable", "DEFAULT_MATMUL_MAX_EXAMPLES", "DEFAULT_MAX_EXAMPLES", "DEFAULT_SEED",
           "MATMUL_PROPERTIES", "MatmulItem", "StderrProgress", "derive_seed", "main", "plan", "plan_matmul", "run",
           "run_matmul_row", "run_property", "split_properties"]


if __name__ == "__main__":  # python -m fp4spec.conformance.runner --backend ...
    sys.exit(main())
