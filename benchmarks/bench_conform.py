"""How long ``fp4spec conform`` takes, as a kernel author runs it (the installed command).

Each configuration is the command line a user types; every round runs every configuration
once, in turn (interleaved, so load changes on a shared machine hit all of them alike), and
the table gives the median over rounds of the wall time and of the CPU time (user + sys of
the child process, which load on other cores does not inflate), next to the baseline of the
same round: ``python -c "import fp4spec.conformance.runner"`` (the import, paid by every run).

    python benchmarks/bench_conform.py                       # 5 rounds: all schemes, each scheme
    python benchmarks/bench_conform.py --rounds 3 --quick    # all schemes, mxfp4, nvfp4
    python benchmarks/bench_conform.py --thorough            # also the --thorough depth
    python benchmarks/bench_conform.py --before /path/to/venv/bin/python   # also an earlier release's default

A run that does not exit 0 (the numpy backend conforms) stops the benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

SCHEMES = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "nvfp4", "nvfp4_2d", "ufp4", "nvint4",
           "hif4")


def _command() -> list[str]:
    exe = shutil.which("fp4spec", path=os.path.dirname(sys.executable)) or shutil.which("fp4spec")
    return [exe] if exe else [sys.executable, "-m", "fp4spec"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s = user + sys of the child, exit status) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=os.path.expanduser("~"))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0,):
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return wall, cpu, proc.returncode


def configurations(args) -> dict[str, list[str]]:
    base = _command() + ["conform", "--backend", "numpy", "--no-progress"]
    out = {"import fp4spec.conformance.runner (baseline)": [sys.executable, "-c", "import fp4spec.conformance.runner"],
           "conform, every scheme (default)": base}
    for s in (("mxfp4", "nvfp4") if args.quick else SCHEMES):
        out[f"conform --scheme {s}"] = base + ["--scheme", s]
    if args.thorough:
        out["conform, every scheme, --thorough"] = base + ["--thorough"]
    if args.before:
        out["earlier release (--before), every scheme, its default"] = [args.before, "-m", "fp4spec", "conform",
                                                                        "--backend", "numpy", "--quiet"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="only mxfp4 and nvfp4 alone")
    p.add_argument("--thorough", action="store_true", help="also time --thorough (the earlier default depth)")
    p.add_argument("--before", metavar="PYTHON", help="a python with an earlier fp4spec installed: also time its "
                                                       "default conform run (run from a folder outside this tree)")
    args = p.parse_args(argv)
    confs = configurations(args)
    walls = {k: [] for k in confs}
    cpus = {k: [] for k in confs}
    for r in range(args.rounds):
        for name, cmd in confs.items():
            w, c, _ = timed(cmd)
            walls[name].append(w)
            cpus[name].append(c)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load:.1f} at the end (shared machine)")
    print(f"- Date: {time.strftime('%Y-%m-%d')}")
    print(f"- Command: `python benchmarks/bench_conform.py {' '.join(argv or sys.argv[1:])}` "
          f"({args.rounds} interleaved rounds, medians)")
    print()
    print("| run | wall s | CPU s (user + sys) | CPU - import baseline |")
    print("|---|---:|---:|---:|")
    base = statistics.median(cpus[next(iter(confs))])
    for name in confs:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"| {name} | {w:.2f} | {c:.2f} | {c - base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
