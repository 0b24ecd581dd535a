"""``fp4spec analyze``: a markdown report with tables and PNG plots, and its docs check mode.

:func:`run_analyze` writes into ``out_dir``:

* ``report.md`` -- the whole report (the fragments below with headings and the figures);
* fragments, each a markdown table the docs include verbatim: ``bias.md`` (exact shrinkage
  bias per grid point), ``grid_points.md`` (measured bias per grid point), ``sqnr.md``
  (SQNR per distribution and scheme, before and after RHT), ``eta.md`` (attenuation of the
  same runs), ``paradox.md`` (Student-t(3), NVFP4 vs UFP4, against the seed's figures),
  ``ufp4_readings.md`` (UFP4 with other block sizes), ``depth.md`` (attenuation vs depth);
* figures: ``bias.png``, ``sqnr.png``, ``depth.png``.

The markdown holds only deterministic numbers (fixed seeds, rounded to 2-4 decimals), so
``python -m fp4spec.analysis.report --check docs/assets/analysis`` can regenerate the
report in a temporary folder and fail when any committed ``.md`` differs. PNG bytes depend
on the matplotlib version and are not compared. ``--out DIR`` regenerates a folder.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Sequence

from ._quantizer import SCHEMES
from .bias import rounding_interval, scheme_bias, shrinkage_bias
from .compounding import attenuation_vs_depth
from .distributions import DISTRIBUTIONS, sample
from .sqnr import compare, rht_label

#: Formats whose exact shrinkage bias the report tabulates (uniform grids equal up to 2^k).
BIAS_FORMATS = ("e2m1", "e1m2", "int4_sym", "e0m3", "s1p2")

#: The seed experiment's figures for the paradox (Student-t(3), RHT16), in dB.
SEED_PARADOX = {("nvfp4", None): 21.90, ("ufp4", None): 19.94, ("nvfp4", 16): 20.00, ("ufp4", 16): 23.19}

#: Run sizes: (tensor shape, RHT sizes, depth, width = batch of the chain).
FULL = {"shape": (256, 1024), "rht_sizes": (None, 16, 32, 128), "depth": 16, "width": 256}
QUICK = {"shape": (32, 256), "rht_sizes": (None, 16), "depth": 3, "width": 64}

FRAGMENTS = ("bias.md", "grid_points.md", "sqnr.md", "eta.md", "paradox.md", "ufp4_readings.md", "depth.md")

#: The distribution of the measured per-grid-point table.
GRID_POINT_DISTRIBUTION = "student_t3"
FIGURES = ("bias.png", "sqnr.png", "depth.png")


class Progress:
    """A text progress bar on stderr: ``[#####.....] 12/40 label``."""

    def __init__(self, total: int, enabled: bool = True, stream=None, width: int = 30):
        self.total, self.enabled, self.width, self.done = max(1, total), enabled, width, 0
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.monotonic()

    def __call__(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        filled = self.width * min(self.done, self.total) // self.total
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} {time.monotonic() - self.t0:5.1f}s {label:<40.40}{end}")
        self.stream.flush()

    def finish(self) -> None:
        """End the line if the bar stopped short of ``total`` (skipped steps)."""
        if self.enabled and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()


# -- tables -------------------------------------------------------------------------------

def _frac(f: Fraction) -> str:
    return str(f) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def bias_table(formats: Sequence[str] = BIAS_FORMATS, rounding: str = "rne") -> str:
    """Markdown: every interior positive grid value, its rounding interval and exact bias."""
    from fp4spec.number_formats import get_format

    lines = ["| format | v | inputs that round to v (RNE) | E[q(x) - x] for uniform inputs |",
             "|---|---:|---|---:|"]
    for name in formats:
        g = [v for v, _ in get_format(name).grid if v >= 0]
        for v, b in shrinkage_bias(name, rounding, exact=True).items():
            i = g.index(v)
            lo, hi = rounding_interval(g[i - 1], v, g[i + 1], rounding)
            lines.append(f"| {name} | {_frac(v)} | [{_frac(lo)}, {_frac(hi)}] | {_frac(b)} |")
    return "\n".join(lines)


def paradox_table(cmp, distribution: str = "student_t3", pair=("nvfp4", "ufp4"), rht: int = 16) -> str:
    """Markdown: the two schemes' SQNR before and after RHT next to the seed's figures."""
    lines = ["| scheme | no RHT (dB) | RHT16 (dB) | change (dB) | seed: no RHT | seed: RHT16 |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in pair:
        if (distribution, s, None) not in cmp.values or (distribution, s, rht) not in cmp.values:
            continue
        a, b = cmp.get(distribution, s, None), cmp.get(distribution, s, rht)
        sa, sb = SEED_PARADOX.get((s, None)), SEED_PARADOX.get((s, rht))
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"| {s} | {a:.2f} | {b:.2f} | {b - a:+.2f} | {fmt(sa)} | {fmt(sb)} |")
    if all((distribution, s, r) in cmp.values for s in pair for r in (None, rht)):
        before = cmp.get(distribution, pair[0], None) - cmp.get(distribution, pair[1], None)
        after = cmp.get(distribution, pair[0], rht) - cmp.get(distribution, pair[1], rht)
        holds = before > 0 > after
        lines.append("")
        lines.append(f"{pair[0]} - {pair[1]}: {before:+.2f} dB without RHT, {after:+.2f} dB with RHT{rht} "
                     f"(seed: +1.96, -3.19). Paradox {'reproduced' if holds else 'NOT reproduced'}.")
    return "\n".join(lines)


def grid_point_rows(schemes, x, rht_sizes=(None, 16), *, seed: int = 0, progress=None) -> list:
    """Measured per-grid-point bias (grid units) of each scheme on ``x``, without and with RHT.

    For each scheme and RHT size ``r``: ``scheme_bias(rht(x, r, seed=seed), scheme)``
    (``x`` itself for ``r=None``) and its ``"grid_point_bias"``; schemes given as callables
    have no codes and are skipped. Returns ``[(label, r, eta, {|g|: (mean, count)})]``.
    """
    from fp4spec.rht import rht as _rht

    rows = []
    for s in schemes:
        if callable(s) and not isinstance(s, str) and not hasattr(s, "element"):
            continue
        for r in rht_sizes:
            y = x if r is None else _rht(x, r, seed=seed)
            b = scheme_bias(y, s)
            if "grid_point_bias" in b:
                rows.append((b["scheme"], r, b["eta"], b["grid_point_bias"]))
            if progress:
                progress(f"grid points {b['scheme']} {rht_label(r)}")
    return rows


def grid_point_table(rows) -> str:
    """Markdown of :func:`grid_point_rows`: one row per (scheme, RHT), ``|g|: mean error`` cells."""
    if not rows:
        return "(no scheme exposes element codes: nothing measured)"
    lines = ["| scheme | RHT | eta | measured E[q(x) - x] per grid point g > 0, in grid units (g: mean) |",
             "|---|---|---:|---|"]
    for lab, r, eta, gp in rows:
        cells = " · ".join(f"{v:g}: {m:+.3f}" for v, (m, _) in gp.items())
        lines.append(f"| {lab} | {rht_label(r)} | {eta:.4f} | {cells} |")
    return "\n".join(lines)


def ufp4_readings_table(shape, seed: int = 0, block_sizes=(8, 16, 32), rht: int = 16) -> str:
    """Markdown: UFP4 under other readings of its unknown block size, on the paradox tensor.

    ``sqnr(x, get_scheme("ufp4", block_size=k), rht=...)`` for each ``k`` on
    ``sample("student_t3", shape, seed)``, without RHT and with ``rht``.
    """
    from fp4spec.block_schemes import get_scheme

    from .sqnr import sqnr

    x = sample("student_t3", shape, seed)
    lines = ["| scheme | block size | no RHT (dB) | RHT16 (dB) |", "|---|---:|---:|---:|"]
    for k in block_sizes:
        sch = get_scheme("ufp4", block_size=k)
        a, b = sqnr(x, sch, rht_seed=seed), sqnr(x, sch, rht=rht, rht_seed=seed)
        lines.append(f"| ufp4 | {k}{' (default)' if k == 16 else ''} | {a:.2f} | {b:.2f} |")
    return "\n".join(lines)


def depth_table(curves_by_rht: dict, depth: int) -> str:
    """Markdown: cumulative prod(eta_k) and end-to-end eta at a few depths, per scheme and RHT."""
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, depth) if k <= depth})
    lines = ["| scheme | RHT | mean eta_k | " + " | ".join(f"prod eta (K={k})" for k in ks)
             + f" | end-to-end eta (K={depth}) |",
             "|---|---|---:|" + "---:|" * len(ks) + "---:|"]
    for rht, curves in curves_by_rht.items():
        for lab, c in curves.items():
            mean = sum(c.eta) / len(c.eta)
            cells = [f"{c.cumulative[k - 1]:.4f}" for k in ks]
            lines.append(f"| {lab} | {rht_label(rht)} | {mean:.4f} | " + " | ".join(cells)
                         + f" | {c.end_to_end[-1]:.4f} |")
    return "\n".join(lines)


# -- figures ------------------------------------------------------------------------------

def _figure(w=7.0, h=4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})


def plot_bias(path: Path, formats: Sequence[str] = ("e2m1", "e1m2"), measured=()) -> None:
    """Exact bias of ``formats`` (lines) and measured per-grid-point bias rows (dotted, no RHT / RHT16)."""
    fig = _figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    for name, marker in zip(formats, "os"):
        b = shrinkage_bias(name)
        ax.plot(list(b), list(b.values()), marker=marker, lw=2, label=f"{name} exact (uniform inputs)")
    for lab, r, _eta, gp in measured:
        if lab not in ("nvfp4", "ufp4"):
            continue
        ax.plot(list(gp), [m for m, _ in gp.values()], ls=":" if r is None else "--", marker=".",
                label=f"{lab} measured, {GRID_POINT_DISTRIBUTION}, {rht_label(r)}")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xlabel("grid value |g| (element units)")
    ax.set_ylabel("E[q(x) - x] (element units)")
    ax.set_title("Shrinkage bias per grid point (RNE)")
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_sqnr(path: Path, cmp) -> None:
    import numpy as np

    n_d = len(cmp.distributions)
    fig = _figure(max(7.0, 2.2 * n_d), 4.2)
    axes = [fig.add_subplot(1, n_d, i + 1) for i in range(n_d)]
    width = 0.8 / max(1, len(cmp.rht_sizes))
    for ax, d in zip(axes, cmp.distributions):
        xs = np.arange(len(cmp.schemes))
        for j, r in enumerate(cmp.rht_sizes):
            ax.bar(xs + j * width, [cmp.get(d, s, r) for s in cmp.schemes], width, label=rht_label(r))
        ax.set_xticks(xs + width * (len(cmp.rht_sizes) - 1) / 2)
        ax.set_xticklabels(cmp.schemes, rotation=60, fontsize=8)
        ax.set_title(d, fontsize=9)
        lo = min(cmp.values.values())
        ax.set_ylim(max(0.0, lo - 3), max(cmp.values.values()) + 1)
    axes[0].set_ylabel("SQNR (dB)")
    axes[-1].legend(fontsize=7)
    _save(fig, path)


def plot_depth(path: Path, curves_by_rht: dict) -> None:
    fig = _figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    colors = {}
    for rht, curves in curves_by_rht.items():
        for lab, c in curves.items():
            color = colors.setdefault(lab, f"C{len(colors) % 10}")
            ks = range(1, len(c.cumulative) + 1)
            ax.plot(ks, c.cumulative, ls="-" if rht is None else "--", marker="." if rht is None else "x",
                    color=color, label=f"{lab} ({rht_label(rht)})")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xlabel("depth K (chained quantized matmuls)")
    ax.set_ylabel("prod eta_k")
    ax.set_title("Signal attenuation vs depth")
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)


# -- the report ---------------------------------------------------------------------------

class MissingExtra(ImportError):
    """An optional dependency of a command is not installed; the message names the extra."""


def require_matplotlib() -> None:
    """MissingExtra at once (not after the computation) if matplotlib, which draws the
    report's figures, cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtra("the analysis report draws its figures with matplotlib, which is not installed; "
                           "install it with: pip install 'fp4spec[analysis]'") from None


def run_analyze(schemes: Sequence = SCHEMES, out_dir="analysis", *, seed: int = 0, quick: bool = False,
                progress: bool = True) -> Path:
    """Run the whole analysis and write the report; returns the path of ``report.md``.

    1. Exact shrinkage bias of :data:`BIAS_FORMATS` (:func:`shrinkage_bias`) -> ``bias.md``;
       measured per-grid-point bias of each scheme on a Student-t(3) tensor, without RHT
       and with RHT16 (:func:`grid_point_rows`) -> ``grid_points.md``; both -> ``bias.png``.
    2. :func:`compare` of ``schemes`` on every distribution, without RHT and with each
       RHT size (full: 16, 32, 128; quick: 16), signs drawn from ``seed`` -> ``sqnr.md``,
       ``eta.md``, ``paradox.md``, ``sqnr.png``; if ``"ufp4"`` is among the schemes, its
       SQNR with blocks of 8, 16 and 32 on the paradox tensor -> ``ufp4_readings.md``.
    3. :func:`attenuation_vs_depth` of ``schemes`` without RHT and with RHT16 (full:
       depth 16, width 256; quick: depth 3, width 64) -> ``depth.md``, ``depth.png``.
    4. ``report.md`` = the fragments with headings and the figures.

    The full run takes well under 2 minutes on 2 CPU cores; ``quick=True`` uses small
    tensors (seconds) and is for tests. ``progress`` draws a text progress bar on stderr.
    """
    require_matplotlib()
    cfg = QUICK if quick else FULL
    schemes = tuple(schemes)
    if not schemes:
        raise ValueError("schemes: give at least one scheme")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rhts = cfg["rht_sizes"]
    depth_rhts = (None, 16)
    # bias, ufp4 readings, report + sqnr cells + (grid points and depth chains) per scheme and RHT
    total = 3 + len(DISTRIBUTIONS) * len(schemes) * len(rhts) + 2 * len(depth_rhts) * len(schemes)
    bar = Progress(total, progress)

    frags = {"bias.md": bias_table()}
    bar("shrinkage bias (exact)")
    gp = grid_point_rows(schemes, sample(GRID_POINT_DISTRIBUTION, cfg["shape"], seed), depth_rhts, seed=seed,
                         progress=bar)
    frags["grid_points.md"] = grid_point_table(gp)
    plot_bias(out / "bias.png", measured=gp)

    cmp = compare(schemes, DISTRIBUTIONS, seed=seed, rht_sizes=rhts, shape=cfg["shape"], progress=bar)
    frags["sqnr.md"] = cmp.to_markdown()
    frags["eta.md"] = cmp.to_markdown(what="eta")
    frags["paradox.md"] = paradox_table(cmp)
    if "ufp4" in schemes:
        frags["ufp4_readings.md"] = ufp4_readings_table(cfg["shape"], seed)
    else:
        frags["ufp4_readings.md"] = "(ufp4 is not among the analysed schemes)"
    bar("ufp4 block-size readings")
    plot_sqnr(out / "sqnr.png", cmp)

    curves = {r: attenuation_vs_depth(schemes, cfg["depth"], width=cfg["width"], batch=cfg["width"], seed=seed,
                                      rht=r, progress=bar) for r in depth_rhts}
    frags["depth.md"] = depth_table(curves, cfg["depth"])
    plot_depth(out / "depth.png", curves)

    for name, text in frags.items():
        (out / name).write_text(text + "\n")
    params = (f"seed {seed}; schemes {', '.join(cmp.schemes)}; tensors {cfg['shape'][0]}x{cfg['shape'][1]} "
              f"(blocks along the last axis); RHT sizes {', '.join(rht_label(r) for r in rhts)} with signs "
              f"drawn from the seed; chain depth {cfg['depth']}, width {cfg['width']}"
              + ("; QUICK run (small tensors)" if quick else ""))
    report = "\n".join([
        "# fp4spec analysis report", "",
        f"Generated by `fp4spec analyze` (fp4spec.analysis.report.run_analyze): {params}.", "",
        "## Shrinkage bias per grid point (exact)", "", frags["bias.md"], "", "![bias](bias.png)", "",
        f"## Measured bias per grid point ({GRID_POINT_DISTRIBUTION}, after block scaling)", "",
        frags["grid_points.md"], "",
        "## SQNR before and after RHT", "", frags["sqnr.md"], "", "![sqnr](sqnr.png)", "",
        "## Attenuation eta = <Q(x), x> / <x, x> of the same runs", "", frags["eta.md"], "",
        "## The RHT paradox (Student-t(3))", "", frags["paradox.md"], "",
        "UFP4 under other readings of its unpublished block size (same tensor):", "",
        frags["ufp4_readings.md"], "",
        "## Attenuation vs depth", "", frags["depth.md"], "", "![depth](depth.png)", "",
    ])
    path = out / "report.md"
    path.write_text(report)
    bar("report written")
    bar.finish()
    return path


def check(directory, *, seed: int = 0, schemes: Sequence = SCHEMES, quick: bool = False,
          progress: bool = True) -> list[str]:
    """Regenerate the report in a temporary folder; return the differences from ``directory``.

    Every ``.md`` file of the fresh report (``report.md`` and :data:`FRAGMENTS`) must exist
    in ``directory`` with identical text; the PNGs of :data:`FIGURES` must exist (their
    bytes are not compared). An empty list means the committed copy is current.
    """
    directory = Path(directory)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        run_analyze(schemes, tmp, seed=seed, quick=quick, progress=progress)
        for fresh in sorted(Path(tmp).glob("*.md")):
            committed = directory / fresh.name
            if not committed.exists():
                problems.append(f"{committed}: missing")
                continue
            a, b = committed.read_text().splitlines(), fresh.read_text().splitlines()
            if a != b:
                diff = difflib.unified_diff(a, b, str(committed), "regenerated", lineterm="", n=0)
                problems.append("\n".join(list(diff)[:40]))
    for fig in FIGURES:
        if not (directory / fig).exists():
            problems.append(f"{directory / fig}: missing")
    return problems


def add_analyze_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``analyze`` subcommand to an ``argparse`` subparsers object (for fp4spec.cli)."""
    from fp4spec.cli_options import add_deprecated  # the shared option spellings

    p = subparsers.add_parser("analyze", help="shrinkage bias, SQNR before/after RHT and attenuation vs depth: "
                                              "a markdown report with PNG plots",
                              description="Measure shrinkage bias, SQNR before and after the RHT and attenuation "
                                          "versus depth for several schemes; write a Markdown report with PNG "
                                          "plots (needs matplotlib).")
    p.add_argument("--scheme", action="extend", nargs="+", default=None, metavar="SCHEME",
                   help=f"schemes to compare (default: {' '.join(SCHEMES)})")
    add_deprecated(p, "--schemes", "--scheme", "scheme", "extend", metavar="SCHEME")
    p.add_argument("--out", default="analysis", metavar="DIR", help="output folder (default: ./analysis)")
    p.add_argument("--seed", type=int, default=0, help="seed of every tensor, weight and RHT sign (default 0)")
    p.add_argument("--quick", action="store_true", help="small tensors, seconds instead of about a minute")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_cmd_analyze)
    return p


def _cmd_analyze(args) -> int:
    try:
        require_matplotlib()
    except MissingExtra as exc:
        print(f"fp4spec analyze: error: {exc}", file=sys.stderr)
        return 2
    path = run_analyze(args.scheme or list(SCHEMES), args.out, seed=args.seed, quick=args.quick, progress=not args.no_progress)
    print(path)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fp4spec.analysis.report",
                                     description="Regenerate or check the committed analysis report of the docs.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", metavar="DIR", help="fail (exit 1) if DIR's markdown differs from a fresh run")
    mode.add_argument("--out", metavar="DIR", help="regenerate the report into DIR")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.out:
        print(run_analyze(SCHEMES, args.out, seed=args.seed, progress=not args.no_progress))
        return 0
    problems = check(args.check, seed=args.seed, progress=not args.no_progress)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{args.check}: out of date; regenerate with: python -m fp4spec.analysis.report --out {args.check}",
              file=sys.stderr)
        return 1
    print(f"{args.check}: up to date")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
