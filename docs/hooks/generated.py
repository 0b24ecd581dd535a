"""Documentation renderers that run the code: conform's options, row counts and output; the
rounding-interval figures of the 4-bit grids. Like :mod:`tables`, every function returns
Markdown (or an SVG figure) computed at build time, so no number on the page is typed."""

from __future__ import annotations

import argparse
import html

import fp4spec

from tables import fmt_value, get_format, rne_intervals


# -- fp4spec conform ---------------------------------------------------------------------------------

def _cell(text: str) -> str:
    """A Markdown table cell holding text that may contain ``|`` (as an HTML entity, inside <code>)."""
    return html.escape(text).replace("|", "&#124;")


def conform_options() -> str:
    """Every option of ``fp4spec conform`` with its help text, from the parser itself."""
    from fp4spec.conformance.command import build_parser

    rows = []
    for action in build_parser()._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        flags = ", ".join(action.option_strings)
        if action.nargs != 0:
            meta = action.metavar or action.dest.upper()
            flags += f" {meta}" + (" ..." if action.nargs in ("+", "*") else "")
        rows.append(f"| <code>{_cell(flags)}</code> | {_cell(action.help % vars(action) if '%' in action.help else action.help)} |")
    return "\n".join(["| option | meaning |", "|---|---|"] + rows)


def conform_rows(backend: str = "numpy") -> str:
    """How many rows a default run of ``backend`` has: quantization rows, GEMM rows, per scheme."""
    from fp4spec.conformance.loading import open_backend
    from fp4spec.conformance.matmul_properties import FAMILIES
    from fp4spec.conformance.runner import plan, plan_matmul

    be, _, caps = open_backend(backend)
    items = plan(be, caps)
    applicable = [(p, t) for p, t in items if not p.applies(t, caps)]
    planned = plan_matmul(be, caps)
    mm = [m for m in planned if not m.reason]
    models = sorted({m.accumulator for m in planned if m.family})
    skipped = [m for m in planned if m.reason and m.family]
    less = f", less {len(skipped)} skipped where a family has no scheme to draw" if skipped else ""
    return (f"{len(items)} quantization rows ({len(applicable)} that apply, over {len(caps.schemes)} schemes and "
            f"their rounding modes) and {len(mm)} GEMM rows ({len(FAMILIES)} case families for each of the "
            f"{len(models)} accumulator models{less})")


def conform_example() -> str:
    """The text ``fp4spec conform`` prints for a kernel that rounds ties away from zero (run at build time)."""
    from fp4spec.backends import Backend, Capabilities
    from fp4spec.conformance import run
    from fp4spec.conformance.report import render_text

    class TiesAway(Backend):
        name = "my-kernel"

        def capabilities(self):
            return Capabilities(schemes=["nvfp4"], rounding=["rne"])

        def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
            return fp4spec.quantize(x, scheme, rounding="rna")

    report = run(TiesAway)
    text = render_text(report)
    return "```text\n$ fp4spec conform --backend mymodule:TiesAway\n" + text + "\n```"


def vector_case_counts() -> str:
    """How many cases ``fp4spec vectors generate`` writes at each level (for nvfp4)."""
    from fp4spec.conformance.vectors import generate

    counts = [len(generate("nvfp4", level, 0)["x"]) for level in (1, 2)]
    return f"level 1 writes {counts[0]} cases for nvfp4, level 2 {counts[1]}"


# -- the rounding figure -------------------------------------------------------------------------

def rounding_figure(name: str) -> str:
    """SVG: the non-negative grid of a 4-bit format on a number line, each value's RNE rounding
    interval (closed end: a bar; open end: a gap), and below it the shrinkage bias of each point --
    the mean rounding error of inputs spread uniformly over its interval (:func:`tables.rne_intervals`)."""
    fmt = get_format(name)
    cells = rne_intervals(fmt)
    top = float(cells[-1]["hi"])
    w, left, right = 760, 40, 30
    scale = (w - left - right) / top

    def px(v) -> float:
        return left + float(v) * scale

    colours = ["#5c6bc0", "#26a69a"]
    y_bar, y_axis, y_bias = 40, 80, 170
    bias_scale = 60 / max(max(abs(float(c["bias"])) for c in cells), 1e-9)
    parts = []
    for i, c in enumerate(cells):
        x0, x1 = px(c["lo"]), px(c["hi"])
        gap0 = 0 if c["lo_closed"] else 2
        gap1 = 0 if c["hi_closed"] else 2
        parts.append(f'<rect x="{x0 + gap0:.1f}" y="{y_bar}" width="{max(x1 - x0 - gap0 - gap1, 1):.1f}" '
                     f'height="14" fill="{colours[i % 2]}" fill-opacity="0.7"/>')
        for x, closed in ((x0, c["lo_closed"]), (x1, c["hi_closed"])):
            if closed:
                parts.append(f'<rect x="{x - 1:.1f}" y="{y_bar - 3}" width="2" height="20" fill="currentColor"/>')
        v = px(c["value"])
        parts.append(f'<circle cx="{v:.1f}" cy="{y_axis}" r="3.5" fill="{colours[i % 2]}"/>')
        parts.append(f'<line x1="{v:.1f}" y1="{y_bar + 14}" x2="{v:.1f}" y2="{y_axis}" stroke="{colours[i % 2]}" '
                     f'stroke-dasharray="2,2"/>')
        parts.append(f'<text x="{v:.1f}" y="{y_axis + 18}" text-anchor="middle">{fmt_value(c["value"])}</text>')
        parts.append(f'<text x="{v:.1f}" y="{y_axis + 32}" text-anchor="middle" font-size="9">'
                     f'0x{c["code"]:X}</text>')
        b = float(c["bias"])
        h = b * bias_scale
        parts.append(f'<rect x="{v - 5:.1f}" y="{y_bias - max(h, 0):.1f}" width="10" height="{max(abs(h), 0.5):.1f}" '
                     f'fill="{"#ef5350" if b < 0 else "#ffa726"}"/>')
        if b:
            y_label = y_bias - h - 4 if h > 0 else y_bias - h + 12
            parts.append(f'<text x="{v:.1f}" y="{y_label:.1f}" text-anchor="middle" font-size="9">'
                         f'{fmt_value(c["bias"])}</text>')
    parts.append(f'<line x1="{left}" y1="{y_axis}" x2="{w - right}" y2="{y_axis}" stroke="currentColor"/>')
    parts.append(f'<line x1="{left}" y1="{y_bias}" x2="{w - right}" y2="{y_bias}" stroke="currentColor" '
                 f'stroke-opacity="0.5"/>')
    parts.append(f'<text x="{left}" y="{y_bar - 10}">inputs that round to each value (RNE)</text>')
    parts.append(f'<text x="{left}" y="{y_bias + 40}">mean rounding error of inputs uniform over the interval '
                 f'(value − interval midpoint): the shrinkage bias of each point</text>')
    h_total = y_bias + 50
    svg = (f'<svg class="fp4spec-diagram" viewBox="0 0 {w} {h_total}" width="{w}" role="img" '
           f'aria-label="{fmt.name} rounding intervals and bias" xmlns="http://www.w3.org/2000/svg" '
           f'font-family="sans-serif" font-size="11" fill="currentColor">' + "".join(parts) + "</svg>")
    mirror = "negative codes mirror it" + (f", down to {fmt_value(fmt.min)}" if fmt.min != -fmt.max else "")
    caption = (f"The non-negative `{fmt.name}` grid (codes below the values; {mirror}). Bars: the "
               f"inputs that round to each value under RNE, a solid end where the tie is included. Below: each "
               f"value's mean error over its interval, drawn from `fp4spec` at build time.")
    return f'<figure markdown>\n{svg}\n<figcaption markdown>{caption}</figcaption>\n</figure>'


PLACEHOLDERS = {
    "conform_options": conform_options,
    "conform_rows": conform_rows,
    "conform_example": conform_example,
    "vector_case_counts": vector_case_counts,
    "rounding_figure": rounding_figure,
}
