"""``fp4spec conform --jobs N``: the same rows as :func:`.runner.run`, split over N processes.

A backend that compiles kernels (Triton: one compile per constexpr variant and shape) spends
most of a conformance run compiling, one compile at a time. Here the rows run as tasks -- per
scheme, one per rounding mode and property and one for the scheme-wide rows; the backend-wide
rows; the GEMM rows -- on a pool of N fresh processes (spawned: no inherited CUDA state); the compilers then run side by side, and Triton's on-disk cache is
shared between them. Every row is seeded from the run seed and the row itself
(:func:`.runner.row_seed`), so the rows are the same, with the same verdicts, as one process
gives; only their order in the report (grouped by task), the timings and the shape counts
(distinct input shapes per scheme, summed over the tasks: each process compiles its own) differ.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
import time

from fp4spec.backends.base import BackendError

from .loading import open_backend
from .properties import PROPERTIES
from .report import PASS, Report
from .runner import plan, run, split_properties


def _task(backend: str, kw: dict) -> Report:
    return run(backend, **kw)


def _quantize_tasks(backend: str, schemes, rounding, props: list) -> list:
    """(label, scheme spec, rounding list or None, properties) per task: a scheme's
    rounding-scope rows one task per rounding mode and property, its scheme-scope rows one
    more (with the rounding modes as asked, so that they run at the same mode as in one
    process). Stochastic-rounding tasks first: on the Triton backend their kernels take the
    longest to compile, and a pool runs the longest tasks best when they start first."""
    be, _avail, caps = open_backend(backend)
    sr_bits = 8 if 8 in caps.sr_bits else caps.sr_bits[0]
    items = plan(be, caps, schemes=schemes, rounding=rounding, properties=props, sr_bits=sr_bits)
    tasks = []
    for prop, target in items:
        if prop.scope == "rounding":
            task = (f"{target.spec} {target.rounding} {prop.name}", target.spec, [target.rounding], [prop.name])
        elif prop.scope == "scheme":
            task = (f"{target.spec} (scheme rows)", target.spec, rounding,
                    [p for p in props if PROPERTIES[p].scope == "scheme"])
        else:
            continue
        if task[0] not in [t[0] for t in tasks]:
            tasks.append(task)
    return sorted(tasks, key=lambda t: t[2] != ["sr"])  # stable: the plan's order otherwise


def run_parallel(backend: str, jobs: int, *, schemes=None, rounding=None, properties=None, max_examples: int,
                 seed: int, shrink: bool = False, accumulators=None, matmul_max_examples: int,
                 progress=sys.stderr) -> Report:
    """:func:`.runner.run` over ``jobs`` processes (``backend`` a name, ``"module:Name"`` or
    ``"path/file.py:Name"``: each process loads it). ``progress``: a stream for one line per
    finished task, or None."""
    if not isinstance(backend, str):
        raise BackendError("jobs: a backend given by name, 'module:Name' or 'path/file.py:Name' (each process loads it)")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BackendError(f"jobs: {jobs!r} is not a positive integer")
    quantize_props, families = split_properties(properties)
    common = dict(rounding=rounding, max_examples=max_examples, seed=seed, shrink=shrink)  # a task may narrow rounding
    tasks = []
    if quantize_props != []:
        qprops = quantize_props or list(PROPERTIES)
        per_scheme = [p for p in qprops if PROPERTIES[p].scope != "backend"]
        backend_wide = [p for p in qprops if PROPERTIES[p].scope == "backend"]  # planned once, not per scheme
        if per_scheme:
            for label, spec, modes, props in _quantize_tasks(backend, schemes, rounding, per_scheme):
                tasks.append((label, dict(common, schemes=[spec], rounding=modes, properties=props,
                                          matmul_max_examples=0)))
        if backend_wide:
            tasks.append(("backend", dict(common, schemes=schemes, properties=backend_wide, matmul_max_examples=0)))
    if families:  # with 0 examples the rows are listed as skipped, as one process lists them
        mm = [f"matmul/{f}" for f in families]
        tasks.append(("matmul", dict(common, schemes=schemes, properties=mm, accumulators=accumulators,
                                     matmul_max_examples=matmul_max_examples)))
    start = time.perf_counter()
    reports = {}
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, max(1, len(tasks))), mp_context=ctx) as pool:
        futures = {pool.submit(_task, backend, kw): label for label, kw in tasks}
        for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            label = futures[fut]
            rep = fut.result()
            reports[label] = rep
            if progress is not None:
                print(f"[{n}/{len(tasks)}] {label}: {rep.count(PASS)} passed, {len(rep.departures)} departed "
                      f"({rep.seconds:.1f} s, {time.perf_counter() - start:.0f} s in)", file=progress, flush=True)
    ordered = [reports[label] for label, _ in tasks]
    results = [r for rep in ordered for r in rep.results]
    notes = []
    for rep in ordered:
        for part in rep.notes.split("; ") if rep.notes else ():
            if part not in notes:
                notes.append(part)
    shapes = {}  # distinct shapes per scheme, summed over the tasks: each process compiles its own
    for rep in ordered:
        for spec, count in rep.shapes.items():
            shapes[spec] = shapes.get(spec, 0) + count
    name = ordered[0].backend if ordered else open_backend(backend)[0].name
    return Report(name, results, seed=seed, max_examples=max_examples, seconds=time.perf_counter() - start,
                  notes="; ".join(notes), matmul_max_examples=matmul_max_examples if families else None,
                  shapes=shapes)


__all__ = ["run_parallel"]
