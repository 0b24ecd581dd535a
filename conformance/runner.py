"""``fp4spec conform``: run every property for every scheme and rounding a backend claims.

A run has two phases. First every row's deterministic checks (exhaustive element tables,
dense amax sweeps, one input of every adversarial kind), grouped by scheme; then, for the
rows that passed them, ``max_examples`` random examples per row (drawn with numpy from the
row's seed; with ``shrink``, by hypothesis, which then shrinks a counterexample), and the
GEMM rows. ``fail_fast`` stops at the first departure. A failed row's counterexample is
replayed against the known mistakes (:mod:`~fp4spec.conformance.diagnose`), which name the
one the backend matches.

Compile cost: every call a row makes for one scheme happens in that scheme's group, and
every input of a scheme is a whole number of blocks (or tiles) with few distinct shapes
(rows and columns of 1 to 4 blocks, the sweeps and RHT inputs aside), so a backend that
compiles a kernel per scheme and shape pays it once per scheme and shape, not per row;
:attr:`~fp4spec.conformance.report.Report.shapes` counts the distinct shapes each scheme
was called with.

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
the random examples (matmul rows: the names of the row, ``matmul/<family>``, its schemes and
``acc=<model>``). The same seed, backend and fp4spec versions give the same inputs (with
``shrink``, the hypothesis version too), and selecting a subset (``--scheme``, ``--rounding``, ``--property``,
``--accumulator``) does not change the inputs of what remains (``--scheme`` changes the
schemes, hence the inputs, of a matmul row).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
import warnings
import zlib

import numpy as np

from fp4spec.backends.base import BackendError, HostFallbackWarning, as_numpy, resolve_scheme, scheme_spec
from fp4spec.backends.registry import get_backend
from fp4spec.rounding import ROUNDING_MODES

from . import diagnose
from .compare import Departure
from .loading import BackendUnavailable, SetupError, open_backend
from .matmul_properties import FAMILIES, check_matmul, family_schemes, no_schemes_reason, schemes_for, to_report_rows
from .env import Env, Target
from .properties import PROPERTIES, Property
from .report import ERROR, FAIL, PASS, SKIP, Counterexample, PropertyResult, Report

#: Random examples per (property, scheme, rounding) after the deterministic checks, by default
#: (every planted defect of the suite's tests is caught by the deterministic checks alone).
DEFAULT_MAX_EXAMPLES = 3
#: ``--thorough``: the depth of earlier releases.
THOROUGH_MAX_EXAMPLES = 20
#: Examples (whole GEMMs) per matmul row (family x accumulator model) by default: GEMM rows have
#: no deterministic checks; the families are aimed at where the models differ (the
#: ``truncation`` family catches a one-bit change of F in 2).
DEFAULT_MATMUL_MAX_EXAMPLES = 2
THOROUGH_MATMUL_MAX_EXAMPLES = 10
DEFAULT_SEED = 0

#: ``--property`` names of the GEMM rows: ``matmul`` (all of them) or ``matmul/<family>``.
MATMUL_PROPERTIES = tuple(f"matmul/{f}" for f in FAMILIES)


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
    for), A and B drawn from the claimed (or asked) schemes, by name, that the backend's GEMM
    claims (``Capabilities.matmul_schemes``) and the model takes.

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
    takes_all = {resolve_scheme(s).name for s in (caps.matmul_schemes or caps.schemes)}
    names = []
    for spec in (schemes or caps.schemes):
        name = resolve_scheme(spec).name
        if name not in names and name in takes_all:  # the operands the backend's GEMM claims
            names.append(name)
    items = []
    for acc in (list(dict.fromkeys(accumulators)) if accumulators else claimed):
        takes = schemes_for(acc)
        picked = tuple(s for s in takes if s in names)
        if not picked:
            items.append(MatmulItem("", acc, reason=f"accumulator {acc!r} takes none of the schemes checked "
                                                    f"({', '.join(names)}); it takes {', '.join(takes)}"))
            continue
        for f in families:
            fs = family_schemes(f, picked)
            items.append(MatmulItem(f, acc, fs) if fs else MatmulItem(f, acc, reason=no_schemes_reason(f, picked)))
    return items


# -- running one property ------------------------------------------------------------------------------

class _Counter:
    n = 0


def _hypothesis_examples(strategy, fn, max_examples: int, seed: int, count: _Counter) -> None:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    failures: list[Departure] = []

    def body(example):
        count.n += 1
        try:
            fn(example)
        except Departure as d:
            failures.append(d)
            raise

    test = settings(max_examples=max_examples, database=None, deadline=None, derandomize=False,
                    phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                    verbosity=Verbosity.quiet, report_multiple_bugs=False,
                    print_blob=False)(hseed(seed)(given(strategy)(body)))
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


def _guarded(env: Env, result: PropertyResult, target: Target, body) -> None:
    """Run ``body(count)``; a departure or an error of the suite goes into ``result``."""
    start = time.perf_counter()
    count = _Counter()
    env.tally = {}
    try:
        body(count)
    except Departure as d:
        result.status, result.counterexample = FAIL, d.counterexample
        count.n = max(count.n, 1)
        if not d.counterexample.matches:
            d.counterexample.matches = diagnose.explain(env, target, d.counterexample)
    except Exception as exc:  # noqa: BLE001 -- reported, never hidden
        result.status = ERROR
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        result.reason = f"{type(exc).__name__}: {exc} ({tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})"
        result.counterexample = Counterexample(f"internal error while checking: {result.reason}", field="exception")
    result.examples += count.n
    result.dont_care += env.tally.get("dont_care", 0)
    result.seconds += time.perf_counter() - start


#: The properties an ``sr`` row of a backend with ``sr_source="own"`` runs (they replay no random bits).
OWN_SR_PROPERTIES = ("sr_statistics",)


def new_row(env: Env, prop: Property, target: Target) -> PropertyResult:
    """The row's result before anything ran: PASS, or SKIP with the reason it does not apply."""
    result = PropertyResult(prop.name, target.spec, target.rounding, PASS)
    reason = prop.applies(target, env.caps) if target.scheme is not None or prop.scope == "backend" else None
    if not reason and target.rounding == "sr" and env.caps.sr_source == "own" and prop.name not in OWN_SR_PROPERTIES:
        reason = ("the backend's SR draws its own random numbers (sr_source='own'): rows that replay rbits cannot "
                  "apply; sr_statistics checks it")
    if reason:
        result.status, result.reason = SKIP, reason
    return result


def row_seed(seed: int, target: Target, prop: Property) -> int:
    return derive_seed(seed, prop.name, target.spec, target.rounding)


def checks_seed(seed: int, target: Target, prop: Property) -> int:
    """The seed of a row's deterministic checks: its property and scheme, not its rounding mode
    (every rounding mode's row checks the same adversarial tensors, built once)."""
    return derive_seed(seed, prop.name, target.spec, "checks")


def run_checks(env: Env, prop: Property, target: Target, result: PropertyResult, *, seed: int = DEFAULT_SEED):
    """Phase 1 of a row: its deterministic checks (the first departure stops them)."""
    rng = np.random.default_rng(checks_seed(seed, target, prop))

    def body(count):
        checks = list(prop.explicit(env, target, rng))
        env.prefetch(target, checks)
        try:
            for check in checks:
                count.n += 1
                _check_alone_on_departure(env, check)
        finally:
            env.forget_batches()

    _guarded(env, result, target, body)


def _check_alone_on_departure(env: Env, check) -> None:
    """Run a check; if it departs on batched results, run it again on its own input alone."""
    try:
        check()
    except Departure as d:
        if not env._batched:
            raise
        env.forget_batches()
        check()  # departs again: that (clean) counterexample propagates
        d.counterexample.notes.append("this departure appears only when the input is quantized stacked with the "
                                      "row's other inputs (one tall tensor); quantized alone it conforms")
        raise d


def run_examples(env: Env, prop: Property, target: Target, result: PropertyResult, *,
                 max_examples: int = DEFAULT_MAX_EXAMPLES, seed: int = DEFAULT_SEED, shrink: bool = False):
    """Phase 2 of a row: ``max_examples`` random examples, drawn with numpy from the row's seed
    (``shrink``: by hypothesis, which shrinks a counterexample); the first departure stops them."""
    gen = prop.strategy(env, target) if max_examples > 0 else None
    if gen is None:
        return
    s = derive_seed(row_seed(seed, target, prop), "examples")

    def check(example):
        prop.check(env, target, example)

    def body(count):
        if shrink:
            _hypothesis_examples(gen.strategy(), check, max_examples, s, count)
            return
        rng = np.random.default_rng(s)
        for _ in range(max_examples):
            example = gen.draw(rng)
            count.n += 1
            check(example)

    _guarded(env, result, target, body)


def run_property(env: Env, prop: Property, target: Target, *, max_examples: int = DEFAULT_MAX_EXAMPLES,
                 seed: int = DEFAULT_SEED, shrink: bool = False) -> PropertyResult:
    """Check one property for one target: the deterministic checks, then ``max_examples``
    random examples; the first departure stops it."""
    result = new_row(env, prop, target)
    if result.status == SKIP:
        return result
    run_checks(env, prop, target, result, seed=seed)
    if result.status == PASS:
        run_examples(env, prop, target, result, max_examples=max_examples, seed=seed, shrink=shrink)
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
        with warnings.catch_warnings():  # where the backend computes is not what conform judges
            warnings.simplefilter("ignore", HostFallbackWarning)
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
    """Progress on stderr: one updating line on a terminal, one line per scheme and phase otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.group = None
        self.counts = {PASS: 0, FAIL: 0, ERROR: 0, SKIP: 0}
        self.group_start = time.perf_counter()

    def __call__(self, done: int, total: int, result: PropertyResult, phase: str = "") -> None:
        if self.tty:
            line = f"[{done}/{total}] {phase} {_group(result)} {result.rounding} {result.property}: {result.status}"
            self.stream.write("\r" + line[:100].ljust(100))
            self.stream.flush()
            return
        key = (phase, _group(result))
        if key != self.group:
            self._flush_group()
            self.group = key
            self.group_start = time.perf_counter()
        self.counts[result.status] += 1
        self.done, self.total = done, total

    def _flush_group(self) -> None:
        if self.group is None:
            return
        c = self.counts
        bad = f", {c[FAIL]} failed" if c[FAIL] else ""
        bad += f", {c[ERROR]} errors" if c[ERROR] else ""
        phase, group = self.group
        self.stream.write(f"[{self.done}/{self.total}] {phase + ': ' if phase else ''}{group}: {c[PASS]} passed{bad}, "
                          f"{c[SKIP]} skipped ({time.perf_counter() - self.group_start:.1f} s)\n")
        self.stream.flush()
        self.counts = {k: 0 for k in self.counts}

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
        else:
            self._flush_group()
        self.stream.flush()


def _count_nonnegative(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BackendError(f"{name}: {value!r} is not a non-negative integer")


def run(backend, *, schemes=None, rounding=None, properties=None, max_examples: int = DEFAULT_MAX_EXAMPLES,
        seed: int = DEFAULT_SEED, shrink: bool = False, progress=None, reference=None, accumulators=None,
        matmul_max_examples: int = DEFAULT_MATMUL_MAX_EXAMPLES, fail_fast: bool = False) -> Report:
    """Check a backend (a name, ``"module:Name"``, ``"path/file.py:Name"``, a Backend class or instance).

    Args:
        schemes: scheme specs to check (default: every scheme the backend claims); matmul
            rows draw A and B from these (by name).
        rounding: rounding modes to check (default: every mode claimed per scheme); matmul
            rows have none and are not affected.
        properties: property names (default: all of :data:`~fp4spec.conformance.properties.PROPERTIES`
            and every matmul row); ``"matmul"`` selects every matmul row, ``"matmul/<family>"``
            one family (:data:`MATMUL_PROPERTIES`).
        max_examples: random examples per (property, scheme, rounding), after the
            deterministic checks (0: deterministic checks only; :data:`THOROUGH_MAX_EXAMPLES`
            is the ``--thorough`` depth).
        seed: the run seed (same seed, same inputs).
        shrink: draw the random examples with hypothesis and shrink a counterexample (slower;
            needs hypothesis); default: numpy draws, the first counterexample as drawn.
        progress: ``callable(done, total, PropertyResult, phase)`` or None.
        reference: the reference backend (default: the numpy emulator).
        accumulators: accumulator models to check the GEMM under (default: every model the
            backend claims in ``capabilities().accumulators``).
        matmul_max_examples: examples per matmul row (0: skip the matmul rows).
        fail_fast: stop at the first departing row (the rows not run are left out).

    Raises :class:`~fp4spec.backends.BackendError` on usage errors (unknown or unclaimed
    scheme or accumulator model, unavailable backend) and :class:`~.loading.SetupError`
    (also a BackendError) when the backend cannot be loaded or asked what it claims.
    """
    _count_nonnegative("max_examples", max_examples)
    _count_nonnegative("matmul_max_examples", matmul_max_examples)
    if shrink:
        _needs_hypothesis()
    if isinstance(accumulators, str):
        accumulators = [accumulators]
    quantize_props, families = split_properties(properties)
    be, avail, caps = open_backend(backend)
    ref = get_backend(reference or "numpy")
    sr_bits = 8 if 8 in caps.sr_bits else caps.sr_bits[0]
    items = plan(be, caps, schemes=schemes, rounding=rounding, properties=quantize_props or None, sr_bits=sr_bits)
    if quantize_props == []:  # only matmul rows asked for (plan still checked schemes and rounding)
        items = []
    mm_items = plan_matmul(be, caps, schemes=schemes, accumulators=accumulators, families=families)
    env = Env(be, ref, caps)
    start = time.perf_counter()
    rows = [(prop, target, new_row(env, prop, target)) for prop, target in items]
    total = 2 * len(rows) + len(mm_items)
    done, stopped = 0, ""

    def tick(result, phase):
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, result, phase)

    def stop(result) -> bool:
        nonlocal stopped
        if fail_fast and result.status in (FAIL, ERROR):
            stopped = (f"stopped at the first departure (--fail-fast): {result.property} / {result.scheme} / "
                       f"{result.rounding}; the rows after it were not run")
            return True
        return False

    ran = []
    for prop, target, result in rows:  # phase 1: every row's deterministic checks
        if result.status != SKIP:
            run_checks(env, prop, target, result, seed=seed)
        ran.append(result)
        tick(result, "checks")
        if stop(result):
            break
    if not stopped:
        for prop, target, result in rows:  # phase 2: random examples of the rows that passed
            if result.status == PASS:
                run_examples(env, prop, target, result, max_examples=max_examples, seed=seed, shrink=shrink)
            tick(result, "examples")
            if stop(result):
                break
    if not stopped:
        for item in mm_items:
            ran.append(run_matmul_row(be, item, max_examples=matmul_max_examples, seed=seed, shrink=shrink))
            tick(ran[-1], "examples")
            if stop(ran[-1]):
                break
    if progress is not None and hasattr(progress, "close"):
        progress.close()
    forms = f"quantize returned 4-bit codes {' and '.join(sorted(env.code_forms))}" if env.code_forms else ""
    notes = "; ".join(filter(None, [avail.reason, caps.notes, forms]))
    return Report(be.name, ran, seed=seed, max_examples=max_examples, seconds=time.perf_counter() - start,
                  notes=notes, matmul_max_examples=matmul_max_examples if mm_items else None, stopped=stopped,
                  shapes=env.shapes_by_scheme())


def _needs_hypothesis() -> None:
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError:
        raise SetupError("shrink: shrinking needs hypothesis (pip install 'fp4spec[conform]'); without --shrink "
                         "the run draws its examples with numpy") from None


__all__ = ["BackendUnavailable", "DEFAULT_MATMUL_MAX_EXAMPLES", "DEFAULT_MAX_EXAMPLES", "DEFAULT_SEED",
           "MATMUL_PROPERTIES", "MatmulItem", "StderrProgress", "THOROUGH_MATMUL_MAX_EXAMPLES",
           "THOROUGH_MAX_EXAMPLES", "derive_seed", "new_row", "plan", "plan_matmul", "run", "run_checks",
           "run_examples", "run_matmul_row", "run_property", "split_properties"]
