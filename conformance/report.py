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

    def short(self, width: int = 110) -> str:
        text = self.what
        return text if len(text) <= width else text[:width - 1] + "…"

    def lines(self) -> list[str]:
        out = [self.what]
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

    def summary(self) -> str:
        n = len(self.results)
        parts = [f"{self.count(PASS)} passed", f"{self.count(FAIL)} failed"]
        if self.count(ERROR):
            parts.append(f"{self.count(ERROR)} errors")
        parts.append(f"{self.count(SKIP)} skipped")
        verdict = "CONFORMS" if self.ok else "DEPARTS"
        head = f"{self.backend}: {verdict} -- {n} checks: {', '.join(parts)} in {self.seconds:.1f} s (seed {self.seed})"
        if not self.ok:
            props = sorted({r.property for r in self.departures})
            head += "\n  departing properties: " + ", ".join(props)
        return head

    def to_dict(self) -> dict:
        return {"backend": self.backend, "source": self.source, "seed": self.seed,
                "max_examples": self.max_examples, "matmul_max_examples": self.matmul_max_examples,
                "seconds": round(self.seconds, 3), "notes": self.notes,
                "conforms": self.ok, "counts": {s.lower(): self.count(s) for s in STATUSES},
                "results": [r.to_dict() for r in self.results]}


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


def _rows(report: Report, *, skipped: bool, compact: bool = False, gemm: bool | None = None) -> list[list[str]]:
    """Table rows; ``gemm`` True/False: only GEMM rows (accumulator column without ``acc=``) / only the others."""
    rows = []
    for r in report.results:
        if r.status == SKIP and not skipped:
            continue
        if gemm is not None and is_gemm_row(r) != gemm:
            continue
        detail = r.counterexample.short() if r.counterexample else r.reason
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
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1])
    return lines


def render_text(report: Report, *, skipped: bool = False, details: bool = True) -> str:
    """The terminal tables (quantization rows, then GEMM rows when there are any), the
    details of every departure, and the summary."""
    rows = _rows(report, skipped=skipped, compact=True, gemm=False)
    gemm_rows = _rows(report, skipped=skipped, compact=True, gemm=True)
    lines = _table(HEADER, rows) if rows or not gemm_rows else []
    if gemm_rows:
        lines += ([""] if lines else []) + _table(GEMM_HEADER, gemm_rows)
    if not skipped and report.count(SKIP):
        lines.append(f"({report.count(SKIP)} skipped: not claimed or not applicable; --report shows them)")
    if details and report.departures:
        lines.append("")
        lines.append("Departures (first counterexample of each):")
        for r in report.departures:
            lines.append(f"* {r.property} / {r.scheme} / {r.rounding}:")
            cx = r.counterexample
            for line in (cx.lines() if cx else [r.reason]):
                lines.append("    " + line)
    lines.append("")
    lines.append(report.summary())
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    lines = [f"# fp4spec conformance: `{report.backend}`", ""]
    lines.append(f"- verdict: **{'conforms' if report.ok else 'departs'}**")
    mm = "" if report.matmul_max_examples is None else f", matmul max examples {report.matmul_max_examples}"
    lines.append(f"- seed {report.seed}, max examples {report.max_examples}{mm}, {report.seconds:.1f} s")
    if report.notes:
        lines.append(f"- backend notes: {report.notes}")
    rows, gemm_rows = _rows(report, skipped=True, gemm=False), _rows(report, skipped=True, gemm=True)
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
           "code_hex", "f32_hex", "f32_text", "is_gemm_row", "render_json", "render_markdown", "render_text",
           "short_schemes", "write_report"]
