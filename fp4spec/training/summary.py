"""``fp4spec train-summary``: tabulate ``fp4spec train`` runs and plot them.

For every recipe: the final validation loss over its seeds, and the gap to the baseline
(``bf16``), paired by seed -- runs with the same seed share initial weights and batches, so
``gap(seed) = loss(recipe, seed) - loss(bf16, seed)`` cancels most seed-to-seed noise; the
table gives the mean paired gap and its range (min..max over seeds), the seed spread of the
losses themselves, the relative gap and the tokens/s. It warns when compared runs differ in
corpus, tokens or schedule. Plots (matplotlib): validation loss against tokens, the gaps with
their ranges, and from ``probes.jsonl`` the mechanism -- eta and SQNR per layer for E2M1 and
E1M2, with and without the RHT, and the cumulative product of the forward etas over depth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

SAME = ("tokens", "config")


def find_runs(paths) -> list[dict]:
    """results.json of every run under the given directories (a run directory or a parent of some)."""
    runs = []
    for p in map(Path, paths):
        for f in sorted([p / "results.json"] if (p / "results.json").exists() else p.glob("*/results.json")):
            r = json.loads(f.read_text())
            r["dir"] = str(f.parent)
            runs.append(r)
    return runs


def _fmt(v, digits=4):
    return "-" if v is None else f"{v:.{digits}f}"


def gap_rows(runs: list[dict], baseline: str = "bf16") -> list[dict]:
    """One row per recipe (completed runs only), baseline first."""
    by = defaultdict(dict)
    for r in runs:
        if r.get("completed"):
            by[r["recipe"]][r["seed"]] = r
    base = by.get(baseline, {})
    base_speed = statistics.median([r["tokens_per_s"] for r in base.values() if r.get("tokens_per_s")] or [0]) or None
    rows = []
    for recipe in sorted(by, key=lambda n: (n != baseline, n)):
        seeds = by[recipe]
        losses = [r["final_val_loss"] for r in seeds.values()]
        paired = [seeds[s]["final_val_loss"] - base[s]["final_val_loss"] for s in seeds if s in base]
        speed = [r["tokens_per_s"] for r in seeds.values() if r.get("tokens_per_s")]
        mean_base = statistics.mean(r["final_val_loss"] for r in base.values()) if base else None
        rows.append({
            "recipe": recipe, "seeds": sorted(seeds), "loss": statistics.mean(losses),
            "loss_range": (min(losses), max(losses)), "gap": statistics.mean(paired) if paired else None,
            "gap_range": (min(paired), max(paired)) if paired else None,
            "rel_gap_pct": (100 * statistics.mean(paired) / mean_base) if paired and mean_base else None,
            "tokens": statistics.median(r["tokens"] for r in seeds.values()),
            "tokens_per_s": statistics.median(speed) if speed else None,
            "speed_vs_base": (base_speed / statistics.median(speed)) if speed and base_speed else None,
        })
    return rows


def gap_table(rows) -> str:
    lines = ["| recipe | seeds | final val loss | seed range | gap to bf16 (paired) | gap range | rel. gap | "
             "tokens | tokens/s | step time / bf16 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lo, hi = r["loss_range"]
        gap_rng = "-" if r["gap_range"] is None else f"{r['gap_range'][0]:+.4f} .. {r['gap_range'][1]:+.4f}"
        gap = "-" if r["gap"] is None else f"{r['gap']:+.4f}"
        rel = "-" if r["rel_gap_pct"] is None else f"{r['rel_gap_pct']:+.2f} %"
        tps = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s'] / 1e6:.3f}M"
        lines.append(f"| {r['recipe']} | {','.join(map(str, r['seeds']))} | {r['loss']:.4f} | {hi - lo:.4f} | {gap} | "
                     f"{gap_rng} | {rel} | {r['tokens'] / 1e6:.1f}M | {tps} | {_fmt(r['speed_vs_base'], 2)} |")
    return "\n".join(lines)


def consistency_warnings(runs) -> list[str]:
    out = []
    done = [r for r in runs if r.get("completed")]
    for key in SAME:
        vals = {json.dumps(r.get(key), sort_keys=True) for r in done}
        if len(vals) > 1:
            out.append(f"runs differ in {key}: {sorted(vals)}")
    hashes = {r["corpus"]["manifest_sha256"] for r in done}
    if len(hashes) > 1:
        out.append(f"runs used {len(hashes)} different corpora (manifest hashes {sorted(hashes)})")
    for r in runs:
        if not r.get("completed"):
            out.append(f"{r['dir']}: not completed ({r['steps']}/{r['total_steps']} steps); run it again to resume")
    return out


def load_probes(run_dir) -> list[dict]:
    f = Path(run_dir) / "probes.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def mechanism_table(recs: list[dict]) -> str:
    """Mean over layers of eta and the operands' SQNR, per GEMM, grid and RHT (the last probed step)."""
    if not recs:
        return ""
    last = max(r["step"] for r in recs)
    cells = defaultdict(list)
    for r in recs:
        if r["step"] == last and not r["layer"].startswith("lm_head"):
            cells[(r["gemm"], r["grid"], r["rht"])].append(r)
    lines = [f"Step {last}, mean over layers:", "",
             "| GEMM | grid | RHT | eta | 1 - eta | SQNR A (dB) | SQNR B (dB) |", "|---|---|---|---:|---:|---:|---:|"]
    for (g, grid, rht), rs in sorted(cells.items()):
        eta = statistics.mean(x["eta"] for x in rs)
        lines.append(f"| {g} | {grid} | {rht or '-'} | {eta:.5f} | {1 - eta:+.5f} | "
                     f"{statistics.mean(x['sqnr_a'] for x in rs):.2f} | {statistics.mean(x['sqnr_b'] for x in rs):.2f} |")
    return "\n".join(lines)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_losses(runs, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in sorted(runs, key=lambda r: (r["recipe"], r["seed"])):
        v = [p for p in r["val_curve"]]
        if v:
            ax.plot([p["tokens"] / 1e6 for p in v], [p["val_loss"] for p in v], label=f"{r['recipe']} s{r['seed']}")
    ax.set_xlabel("tokens (M)")
    ax.set_ylabel("validation loss (nats / byte)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_gaps(rows, path: Path) -> None:
    plt = _plt()
    rows = [r for r in rows if r["gap"] is not None and r["recipe"] != "bf16"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(rows))
    gaps = [r["gap"] for r in rows]
    err = [[r["gap"] - r["gap_range"][0] for r in rows], [r["gap_range"][1] - r["gap"] for r in rows]]
    ax.bar(xs, gaps, yerr=err, capsize=4, color="#4477aa")
    ax.set_xticks(list(xs), [r["recipe"] for r in rows], rotation=20)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("final loss - bf16 (paired by seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_mechanism(recs, path: Path, title: str) -> None:
    """eta (top row) and SQNR of A (bottom row) per layer, one column per GEMM, 4 variants each;
    plus the running product of the fprop etas (the compounding over depth)."""
    plt = _plt()
    last = max(r["step"] for r in recs)
    recs = [r for r in recs if r["step"] == last and not r["layer"].startswith("lm_head")]
    fig, axes = plt.subplots(2, 4, figsize=(15, 6))
    for col, gemm in enumerate(("fprop", "dgrad", "wgrad")):
        for grid in ("e2m1", "e1m2"):
            for rht in (0, 16):
                rs = sorted((r for r in recs if (r["gemm"], r["grid"], r["rht"]) == (gemm, grid, rht)),
                            key=lambda r: r["index"])
                style = dict(ls="-" if rht else "--", color="#cc3311" if grid == "e2m1" else "#0077bb")
                label = f"{grid} {'RHT16' if rht else 'no RHT'}"
                axes[0, col].plot([r["index"] for r in rs], [r["eta"] for r in rs], label=label, **style)
                axes[1, col].plot([r["index"] for r in rs], [r["sqnr_a"] for r in rs], label=label, **style)
                if gemm == "fprop":
                    prod, acc = [], 1.0
                    for r in rs:
                        acc *= r["eta"]
                        prod.append(acc)
                    axes[0, 3].plot([r["index"] for r in rs], prod, label=label, **style)
        axes[0, col].set_title(f"{gemm}: eta")
        axes[1, col].set_title(f"{gemm}: SQNR of A (dB)")
    axes[0, 3].set_title("fprop: running product of eta")
    axes[1, 3].axis("off")
    for ax in axes.flat:
        ax.set_xlabel("linear layer (model order)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{title}, step {last}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(paths, out: Path, baseline: str = "bf16", plots: bool = True) -> str:
    runs = find_runs(paths)
    if not runs:
        raise ValueError(f"paths: no results.json under {', '.join(map(str, paths))}")
    rows = gap_rows(runs, baseline)
    parts = ["# Pretraining comparison", "", gap_table(rows), ""]
    warn = consistency_warnings(runs)
    if warn:
        parts += ["Warnings:", ""] + [f"- {w}" for w in warn] + [""]
    out.mkdir(parents=True, exist_ok=True)
    for r in sorted(runs, key=lambda r: (r["recipe"], r["seed"])):
        recs = load_probes(r["dir"])
        if recs and r["seed"] == min(x["seed"] for x in runs if x["recipe"] == r["recipe"]):
            parts += [f"## Mechanism on the tensors of the {r['recipe']} run (seed {r['seed']})", "",
                      mechanism_table(recs), ""]
            if plots:
                name = f"mechanism_{r['recipe']}.png"
                plot_mechanism(recs, out / name, f"{r['recipe']} seed {r['seed']}")
                parts += [f"![mechanism {r['recipe']}]({name})", ""]
    if plots:
        plot_losses([r for r in runs if r.get("completed")], out / "loss_curves.png")
        plot_gaps(rows, out / "gaps.png")
        parts += ["![validation loss](loss_curves.png)", "", "![gaps](gaps.png)", ""]
    text = "\n".join(parts)
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fp4spec train-summary", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="run directories, or directories holding them")
    p.add_argument("--out", default="train-summary", help="where summary.md, summary.json and the plots go")
    p.add_argument("--baseline", default="bf16")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    print(summarize(args.paths, Path(args.out), args.baseline, plots=not args.no_plots))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
