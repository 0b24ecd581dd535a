"""Conformance results and how they are shown: a terminal table, Markdown, JSON.

One :class:`PropertyResult` per (property, scheme, rounding) that was run or skipped; a
failing one carries the first :class:`Counterexample` found -- the input values of the
block where the backend departs, the expected and actual codes in hex, and what the spec
says about that spot (the scaled value, whether it is a tie). JSON reports also hold the
whole input tensor as float32 bit patterns, so a departure can be replayed exactly.

GEMM rows (``matmul/<family>``) put the accumulator model in the rounding column
(``acc=sm100-mxf4nvf4``) and the schemes A and B were drawn from in the scheme column
(comma-separated; the terminal table abbreviates a long list, Markdown and JSON keep it);
their counterexample names the first differing output and holds the case's operand codes,
scale codes and c bits as notes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

PASS, FAIL, SKIP, ERROR = "PASS", "FAIL", "SKIP", "ERROR"
STATUSES = (PASS, FAIL, SKIP, ERROR)


def f32_text(v) -> str:
    """Shortest decimal that reads back as the same float32 (``nan``, ``inf``, ``-0.0`` kept)."""
    v = np.float32(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "-inf" if v < 0 else "inf"
    return np.format_float_scientific(v, unique=True, trim="-") if (v != 0 and (abs(v) < 1e-4 or abs(v) >= 1e6)) \
        else np.format_float_positional(v, unique=True, trim="-") if v != 0 else ("-0.0" if np.signbit(v) else "0.0")


def f32_hex(v) -> str:
    """The float32 bit pattern, ``0x3F800000``."""
    return f"0x{int(np.array(v, np.float32).view(np.uint32)):08X}"


def code_hex(c, bits: int = 8) -> str:
    width = max(1, (bits + 3) // 4)
    return f"0x{int(c):0{width}X}"


@dataclasses.dataclass
class Counterexample:
    """The first place where a backend departs from the spec.

    Fields:
        what: one line saying where and how (``codes[0, 5]: expected 0x4, got 0x5``).
        field: ``codes``, ``scales``, ``global_scale``, ``e1_8``, ``e1_16``, ``metadata``,
            ``exception``, ``packed``, ``blocked``, ``dequantized``, ``invariant``, ``statistics``
            or ``matmul`` (a GEMM output's bits).
        inputs: the input values of the block concerned (float32, as shortest decimals).
        expected, actual: the block's codes (or bytes, scale codes...) as hex strings.
        where: indices (row, column, block).
        notes: what the spec says there (the scaled value, a tie, the rule's formula...).
        context: rounding mode, tensor amax, tensor scales, random bits of the block...
        tensor: the whole input as float32 hex bit patterns with its shape (JSON only).
        matches: the known mistake the backend's answer equals, in words
            (``ceil scale rule (floor expected)``; :mod:`~fp4spec.conformance.diagnose`), or "".
    """

    what: str
    field: str = "codes"
    inputs: list = dataclasses.field(default_factory=list)
    expected: list = dataclasses.field(default_factory=list)
    actual: list = dataclasses.field(default_factory=list)
    where: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)
    context: dict = dataclasses.field(default_factory=dict)
    tensor: dict | None = None
    matches: str = ""

    def short(self, width: int = 110) -> str:
        text = self.what
        return text if len(text) <= width else text[:width - 1] + "…"

    def lines(self) -> list[str]:
        out = [self.what]
        if self.matches:
            out.append("matches:  " + self.matches)
        if self.inputs:
            out.append("inputs:   " + " ".join(map(str, self.inputs)))
        if self.expected:
            out.append("expected: " + " ".join(map(str, self.expected)))
        if self.actual:
            out.append("actual:   " + " ".join(map(str, self.actual)))
        for note in self.notes:
            out.append("note:     " + note)
        if self.context:
            out.append("context:  " + ", ".join(f"{k}={v}" for k, v in self.context.items()))
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PropertyResult:
    """One row of the report."""

    property: str
    scheme: str
    rounding: str
    status: str
    examples: int = 0
    seconds: float = 0.0
    reason: str = ""
    counterexample: Counterexample | None = None
    dont_care: int = 0  # element codes the profile leaves open (not compared), over every check

    @property
    def cause(self) -> str:
        """What a departure is grouped under: the matched mistake, else what differs where."""
        cx = self.counterexample
        if self.status == ERROR:
            return f"error of the suite (please report it): {self.reason.split(' (')[0]}"
        if cx is not None and cx.matches:
            return f"matches: {cx.matches}"
        field = cx.field if cx is not None else "error"
        return f"no known mistake matches: {self.property} departs on {field}"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["counterexample"] = None if self.counterexample is None else self.counterexample.to_dict()
        return d


@dataclasses.dataclass
class Report:
    """A whole conformance run."""

    backend: str
    results: list[PropertyResult]
    seed: int = 0
    max_examples: int = 0
    seconds: float = 0.0
    notes: str = ""
    source: str = "conform"
    matmul_max_examples: int | None = None  # None: no matmul rows were planned
    stopped: str = ""  # why the run stopped early (--fail-fast), or ""
    #: scheme spec -> distinct input shapes the backend's quantize was called with (its compile
    #: pressure, for a backend that compiles a kernel per shape)
    shapes: dict = dataclasses.field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def departures(self) -> list[PropertyResult]:
        return [r for r in self.results if r.status in (FAIL, ERROR)]

    @property
    def ok(self) -> bool:
        return not self.departures

    def exit_code(self) -> int:
        """0 when every claimed property conforms, 1 when anything departs."""
        return 0 if self.ok else 1

    def failed(self, prop: str | None = None, scheme: str | None = None) -> list[PropertyResult]:
        return [r for r in self.departures if (prop is None or r.property == prop)
                and (scheme is None or r.scheme == scheme)]

    def findings(self) -> list[tuple[str, list[PropertyResult]]]:
        """The departures grouped by cause (:attr:`PropertyResult.cause`), in order of first appearance:
        one mistake that fails four properties is one finding."""
        groups: dict[str, list[PropertyResult]] = {}
        for r in self.departures:
            groups.setdefault(r.cause, []).append(r)
        return list(groups.items())

    def summary(self) -> str:
        n = len(self.results)
        parts = [f"{self.count(PASS)} passed", f"{self.count(FAIL)} failed"]
        if self.count(ERROR):
            parts.append(plural(self.count(ERROR), "error"))
        parts.append(f"{self.count(SKIP)} skipped")
        verdict = "CONFORMS" if self.ok else "DEPARTS"
        head = (f"{self.backend}: {verdict} -- {plural(n, self.unit)}: {', '.join(parts)} in {self.seconds:.1f} s "
                f"(seed {self.seed})")
        if not self.ok:
            props = sorted({r.property for r in self.departures})
            head += f"\n  departing {'property' if len(props) == 1 else 'properties'}: " + ", ".join(props)
            head += f"; {plural(len(self.findings()), 'finding')}"
        if self.stopped:
            head += f"\n  {self.stopped}"
        return head

    @property
    def unit(self) -> str:
        """What a result is: a row of a conformance run, a case kind of a vector check."""
        return "row" if self.source == "conform" else "check"

    def to_dict(self) -> dict:
        return {"backend": self.backend, "source": self.source, "seed": self.seed,
                "max_examples": self.max_examples, "matmul_max_examples": self.matmul_max_examples,
                "seconds": round(self.seconds, 3), "notes": self.notes, "stopped": self.stopped,
                "quantize_shapes": dict(self.shapes),
                "conforms": self.ok, "counts": {s.lower(): self.count(s) for s in STATUSES},
                "findings": [{"cause": cause, "rows": [f"{r.property} / {r.scheme} / {r.rounding}" for r in rows]}
                             for cause, rows in self.findings()],
                "results": [r.to_dict() for r in self.results]}


def plural(n: int, word: str) -> str:
    """``1 row``, ``2 rows``, ``0 rows``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- rendering --------------------------------------------------------------------------------------

def short_schemes(text: str, width: int = 24) -> str:
    """A comma-separated scheme list cut to its first two and a count: ``mxfp4,nvfp4,+6``."""
    parts = text.split(",")
    if len(text) <= width or len(parts) <= 2:
        return text
    return f"{parts[0]},{parts[1]},+{len(parts) - 2}"


def is_gemm_row(r: PropertyResult) -> bool:
    """A GEMM row (``matmul/<family>``, ``vectors/<family>`` of GEMM vectors, ``acc=`` rounding)."""
    return r.rounding.startswith("acc=") or r.property.split("/")[0] == "matmul"


def _rows(report: Report, *, statuses=STATUSES, compact: bool = False, gemm: bool | None = None) -> list[list[str]]:
    """Table rows of the results with one of ``statuses``; ``gemm`` True/False: only GEMM rows
    (accumulator column without ``acc=``) / only the others."""
    rows = []
    for r in report.results:
        if r.status not in statuses:
            continue
        if gemm is not None and is_gemm_row(r) != gemm:
            continue
        detail = r.counterexample.short() if r.counterexample else r.reason
        if not detail and r.dont_care:
            detail = f"{plural(r.dont_care, 'code')} don't-care (the profile's element_nan is 'unspecified')"
        scheme = short_schemes(r.scheme) if compact else r.scheme
        rounding = r.rounding[4:] if gemm and r.rounding.startswith("acc=") else r.rounding
        rows.append([r.property, scheme, rounding, r.status, str(r.examples), detail])
    return rows


HEADER = ["property", "scheme", "rounding", "result", "examples", "first counterexample / note"]
#: The header of the GEMM table: the schemes A and B are drawn from, the accumulator model.
GEMM_HEADER = ["property", "schemes", "accumulator", "result", "examples", "first counterexample / note"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header[:-1])]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header[:-1], widths)) + "  " + header[-1]]
    lines.append("  ".join("-" * w for w in widths) + "  " + "-" * len(header[-1]))
    for row in rows:
        lines.append(("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1]).rstrip())
    return lines


def group_of(r: PropertyResult) -> str:
    """The summary group of a row: its scheme, ``matmul <model>`` for a GEMM row, ``backend`` for
    the backend-wide properties."""
    if is_gemm_row(r):
        return f"matmul {r.rounding[4:]}" if r.rounding.startswith("acc=") else "matmul"
    return "backend" if r.scheme == "*" else r.scheme


def group_summary(report: Report) -> list[str]:
    """One line per scheme (and per accumulator model): rows passed, failed, skipped, time."""
    groups: dict[str, list[PropertyResult]] = {}
    for r in report.results:
        groups.setdefault(group_of(r), []).append(r)
    dont_care = any(r.dont_care for r in report.results)
    header = ["scheme", "rows", "passed", "failed", "skipped"] + (["don't-care codes"] if dont_care else []) + ["s"]
    rows = []
    for name, rs in groups.items():
        bad = sum(r.status in (FAIL, ERROR) for r in rs)
        row = [name, str(len(rs)), str(sum(r.status == PASS for r in rs)), str(bad) if bad else "0",
               str(sum(r.status == SKIP for r in rs))]
        if dont_care:
            row.append(str(sum(r.dont_care for r in rs)))
        rows.append(row + [f"{sum(r.seconds for r in rs):.1f}"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(row) for row in rows]


def render_text(report: Report, *, all_rows: bool = False, details: bool = True, groups: bool = True,
                skipped: bool | None = None) -> str:
    """What ``fp4spec conform`` prints: a summary line per scheme (``groups``), the failing rows
    (every row with ``all_rows``), the details of every departure, the departures grouped by
    cause, and the verdict. (``skipped`` is the old name of ``all_rows``.)"""
    if skipped is not None:
        all_rows = skipped
    statuses = STATUSES if all_rows else (FAIL, ERROR)
    rows = _rows(report, statuses=statuses, compact=True, gemm=False)
    gemm_rows = _rows(report, statuses=statuses, compact=True, gemm=True)
    lines = group_summary(report) if groups and report.results else []
    if rows or gemm_rows:
        lines += [""] if lines else []
        lines += _table(HEADER, rows) if rows else []
        if gemm_rows:
            lines += ([""] if rows else []) + _table(GEMM_HEADER, gemm_rows)
    hidden = [r for r in report.results if r.status not in statuses]
    if hidden:
        passed, skip = sum(r.status == PASS for r in hidden), sum(r.status == SKIP for r in hidden)
        lines.append(f"({passed} passing and {skip} skipped {'row' if passed + skip == 1 else 'rows'} not shown; "
                     f"--all shows every row)")
    if details and report.departures:
        lines.append("")
        lines.append("Departures (first counterexample of each):")
        for r in report.departures:
            lines.append(f"* {r.property} / {r.scheme} / {r.rounding}:")
            cx = r.counterexample
            for line in (cx.lines() if cx else [r.reason]):
                lines.append("    " + line)
        lines += [""] + render_findings(report)
    lines.append("")
    lines.append(report.summary())
    return "\n".join(lines)


def render_findings(report: Report) -> list[str]:
    """The departures grouped by cause: one line per finding, then its rows."""
    found = report.findings()
    lines = [f"Findings ({plural(len(found), 'cause')} for {plural(len(report.departures), 'departing row')}):"]
    for i, (cause, rows) in enumerate(found, 1):
        lines.append(f"{i}. {cause}")
        lines.append("   " + ", ".join(f"{r.property} / {r.scheme} / {r.rounding}" for r in rows))
    return lines


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    lines = [f"# fp4spec conformance: `{report.backend}`", ""]
    lines.append(f"- verdict: **{'conforms' if report.ok else 'departs'}**")
    mm = "" if report.matmul_max_examples is None else f", matmul max examples {report.matmul_max_examples}"
    lines.append(f"- seed {report.seed}, max examples {report.max_examples}{mm}, {report.seconds:.1f} s")
    if report.notes:
        lines.append(f"- backend notes: {report.notes}")
    if len({group_of(r) for r in report.results}) > 1:
        lines += ["", "```text"] + group_summary(report) + ["```"]
    rows, gemm_rows = _rows(report, gemm=False), _rows(report, gemm=True)
    for header, part in ((HEADER, rows), (GEMM_HEADER, gemm_rows)):
        if part or (header is HEADER and not gemm_rows):
            lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in part]
    if report.departures:
        lines += ["", "## Departures", ""]
        for r in report.departures:
            lines.append(f"### {r.property} / {r.scheme} / {r.rounding}")
            lines.append("")
            lines.append("```")
            lines += (r.counterexample.lines() if r.counterexample else [r.reason])
            lines.append("```")
            lines.append("")
        lines += ["## Findings", ""]
        for i, (cause, rows) in enumerate(report.findings(), 1):
            lines.append(f"{i}. {_md_cell(cause)} -- " + ", ".join(f"`{r.property} / {r.scheme} / {r.rounding}`"
                                                                   for r in rows))
    lines += ["", report.summary().replace("\n", "  \n"), ""]
    return "\n".join(lines)


def _jsonable(obj: Any):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)
    return obj


def render_json(report: Report) -> str:
    return json.dumps(_jsonable(report.to_dict()), indent=1)


def report_path_problem(path: str) -> str | None:
    """Why a report cannot be written to ``path`` (None if it can): checked before a run, so an
    unwritable path fails in a second, not after the whole run. Tries to open the file for
    appending, and removes it again if it did not exist."""
    if not path.endswith((".json", ".md")):
        return f"{path!r} must end in .json or .md"
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot write {path!r}: {exc.strerror or exc}"
    if not existed:
        os.remove(path)
    return None


def write_report(report: Report, path: str) -> None:
    """Write ``path`` as JSON (``.json``) or Markdown (``.md``)."""
    if path.endswith(".json"):
        text = render_json(report)
    elif path.endswith(".md"):
        text = render_markdown(report)
    else:
        raise ValueError(f"report: {path!r} must end in .json or .md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


__all__ = ["Counterexample", "ERROR", "FAIL", "GEMM_HEADER", "PASS", "PropertyResult", "Report", "SKIP", "STATUSES",
           "code_hex", "f32_hex", "f32_text", "group_of", "group_summary", "is_gemm_row", "plural", "render_findings",
           "render_json", "render_markdown", "render_text", "report_path_problem", "short_schemes", "write_report"]
