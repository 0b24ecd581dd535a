"""The GEMM emulator on the CPU: every accumulator model against numpy's float32 matmul.

    python benchmarks/bench_gemm_cpu.py                         # 256 x 1024 @ 1024 x 256, 7 rounds
    python benchmarks/bench_gemm_cpu.py --m 1024 --k 4096 --n 1024 --rounds 3
    python benchmarks/bench_gemm_cpu.py --before aa6a406        # also the emulator of that commit
    python benchmarks/bench_gemm_cpu.py --conform --before aa6a406   # the conform matmul rows too

Operands: standard-normal float32 A (M x K) and B (N x K) quantized with each scheme the
model takes among ``--schemes`` (default nvfp4, mxfp4); ``fp4spec.matmul(qa, qb,
accumulator=model)``. Baseline: numpy's float32 ``x @ y.T`` on the same shapes, timed right
before each emulator call (interleaved rounds: a busy machine slows both alike). Reported
per case: the median over rounds of the wall time and its GFLOP/s (2 M N K / time), and the
median over rounds of the per-round ratio emulator / float32 matmul.

Before timing, sampled outputs (3 x 3) are checked equal, bit for bit, to the scalar
reference (``fp4spec.gemm_reference.matmul_reference``); with ``--before REV`` the whole
result is also checked equal to that commit's emulator (``git show REV:emulator/gemm.py``,
loaded as a module), which is timed in the same rounds (``--before-rounds``, it is slow).
The script exits non-zero on any difference.

``--conform`` also times ``fp4spec conform --backend numpy --property matmul`` as the library
runs it (:func:`fp4spec.conformance.runner.run`, every model, ``--conform-examples`` per
row) in a fresh process, and given ``--before`` the same with that commit's whole tree
(``git archive``) imported instead, interleaved.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from fp4spec.conformance.matmul_properties import make_operand, schemes_for

import fp4spec
from fp4spec import gemm_reference
from fp4spec.accumulator_models import accumulators, get_accumulator
from fp4spec.matmul_operands import check_operands


def load_before(rev: str):
    """The emulator module of commit ``rev`` (emulator/gemm.py at that commit)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = subprocess.run(["git", "show", f"{rev}:emulator/gemm.py"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "gemm_before.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("gemm_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gemm_before"] = mod
    spec.loader.exec_module(mod)
    return mod


def cases(models, schemes):
    for m in models:
        for s in schemes:
            if s in schemes_for(m):
                yield m, s


def check_sampled(qa, qb, model: str, got: np.ndarray) -> bool:
    """Sampled outputs (3 rows x 3 columns) equal the scalar reference bit for bit."""
    m, n = got.shape
    rows = sorted({0, m // 2, m - 1})
    cols = sorted({0, n // 2, n - 1})

    def sub(q, idx):
        return make_operand(np.asarray(q.codes)[idx], np.asarray(q.scales)[idx], q.scheme, q.global_scale)

    want = gemm_reference.matmul_reference(sub(qa, rows), sub(qb, cols), accumulator=model)
    return np.array_equal(got[np.ix_(rows, cols)].view(np.uint32), want.view(np.uint32))


def bench_gemm(args, before) -> list[str]:
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.m, args.k)).astype(np.float32)
    y = rng.standard_normal((args.n, args.k)).astype(np.float32)
    flop = 2.0 * args.m * args.n * args.k
    q = {s: (fp4spec.quantize(x, s), fp4spec.quantize(y, s)) for s in args.schemes}
    todo = list(cases(args.models, args.schemes))
    for model, s in todo:
        qa, qb = q[s]
        got = fp4spec.matmul(qa, qb, accumulator=model)
        if not check_sampled(qa, qb, model, got):
            sys.exit(f"{model} {s}: sampled outputs differ from the scalar reference")
        if before is not None:
            old = before.matmul_emulated(qa, qb, get_accumulator(model), check_operands(get_accumulator(model), qa,
                                                                                        qb, None))
            if not np.array_equal(old.view(np.uint32), got.view(np.uint32)):
                sys.exit(f"{model} {s}: the result differs from the --before emulator's")
    times = {c: [] for c in todo}
    ratios = {c: [] for c in todo}
    base = []
    old_times = {c: [] for c in todo}
    old_ratios = {c: [] for c in todo}
    for r in range(args.rounds):
        for c in todo:
            qa, qb = q[c[1]]
            t0 = time.perf_counter()
            x @ y.T
            t1 = time.perf_counter()
            fp4spec.matmul(qa, qb, accumulator=c[0])
            t2 = time.perf_counter()
            base.append(t1 - t0)
            times[c].append(t2 - t1)
            ratios[c].append((t2 - t1) / (t1 - t0))
            if before is not None and r < args.before_rounds:
                model = get_accumulator(c[0])
                ops = check_operands(model, qa, qb, None)
                t3 = time.perf_counter()
                before.matmul_emulated(qa, qb, model, ops)
                old_times[c].append(time.perf_counter() - t3)
                old_ratios[c].append(old_times[c][-1] / times[c][-1])
    baseline = (f"float32 matmul (baseline): median {statistics.median(base) * 1e3:.2f} ms, "
                f"{flop / statistics.median(base) / 1e9:.1f} GFLOP/s over {len(base)} calls")
    lines = [baseline, ""]
    head = "| model | scheme | median ms | GFLOP/s | ratio to float32 matmul |"
    sep = "|---|---|---:|---:|---:|"
    if before is not None:
        head += " before: median ms | speed-up (median of per-round ratios) |"
        sep += "---:|---:|"
    lines += [head, sep]
    for c in todo:
        med = statistics.median(times[c])
        row = f"| {c[0]} | {c[1]} | {med * 1e3:.1f} | {flop / med / 1e9:.2f} | {statistics.median(ratios[c]):.1f} |"
        if before is not None:
            row += f" {statistics.median(old_times[c]) * 1e3:.0f} | {statistics.median(old_ratios[c]):.0f}x |"
        lines.append(row)
    return lines


_CHILD = """
import sys, time
{bootstrap}
from fp4spec.conformance.runner import run
run("numpy", properties=["matmul"], matmul_max_examples=1)
t, c = time.perf_counter(), time.process_time()
report = run("numpy", properties=["matmul"], matmul_max_examples={examples}, seed={seed})
print(time.perf_counter() - t, time.process_time() - c, len(report.results),
      all(r.status in ("PASS", "SKIP") for r in report.results))
"""

_BOOTSTRAP = """
import importlib.abc, importlib.machinery, importlib.util, os
ROOT = {root!r}
MAP = {{"fp4spec": os.path.join(ROOT, "fp4spec")}}
for d in sorted(os.listdir(ROOT)):
    if d != "fp4spec" and os.path.isfile(os.path.join(ROOT, d, "__init__.py")):
        MAP["fp4spec." + d] = os.path.join(ROOT, d)

class Tree(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in MAP:
            return importlib.util.spec_from_file_location(name, os.path.join(MAP[name], "__init__.py"),
                                                          submodule_search_locations=[MAP[name]])
        parent = name.rpartition(".")[0]
        if parent in MAP:
            return importlib.machinery.PathFinder.find_spec(name, [MAP[parent]])
        return None

sys.meta_path.insert(0, Tree())
"""


def export_tree(rev: str) -> str:
    """The whole source tree of commit ``rev``, unpacked into a temporary folder."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tempfile.mkdtemp()
    archive = subprocess.run(["git", "archive", rev], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return out


def bench_conform(args) -> list[str]:
    """The conform matmul rows in a fresh process: this tree, and the --before commit's whole
    tree (its emulator and its operand checks) imported in place of the installed one."""
    trees = {"now": ""}
    if args.before:
        trees[f"before ({args.before})"] = _BOOTSTRAP.format(root=export_tree(args.before))
    runs = {k: [] for k in trees}
    for _ in range(args.conform_rounds):
        for name, boot in trees.items():
            code = _CHILD.format(bootstrap=boot, examples=args.conform_examples, seed=args.seed)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir(),
                                 check=False)
            if out.returncode:
                sys.exit(f"conform matmul rows ({name}) failed:\n{out.stderr[-2000:]}")
            wall, cpu, rows, ok = out.stdout.split()
            if ok != "True":
                sys.exit(f"conform matmul rows ({name}) did not all pass")
            runs[name].append((float(wall), float(cpu)))
    title = (f"`fp4spec conform --backend numpy --property matmul --matmul-max-examples {args.conform_examples}` "
             f"({rows} rows, timed in a fresh process after a warm-up run), median of {args.conform_rounds} rounds:")
    lines = ["", title, "", "| tree | wall s | CPU s |", "|---|---:|---:|"]
    for name, r in runs.items():
        lines.append(f"| {name} | {statistics.median(w for w, _ in r):.2f} | {statistics.median(c for _, c in r):.2f} |")
    if args.before:
        now, old = runs["now"], runs[f"before ({args.before})"]
        lines.append("")
        lines.append(f"Factor before / now (median of per-round ratios): wall "
                     f"{statistics.median(o[0] / n[0] for n, o in zip(now, old)):.2f}x, CPU "
                     f"{statistics.median(o[1] / n[1] for n, o in zip(now, old)):.2f}x")
    return lines


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"
    return (f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, numpy {np.__version__}, "
            f"BLAS threads: {threads}, load average {os.getloadavg()[0]:.1f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--models", nargs="+", default=list(accumulators), choices=list(accumulators))
    p.add_argument("--schemes", nargs="+", default=["nvfp4", "mxfp4"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--before", metavar="REV", help="also time emulator/gemm.py of this git revision")
    p.add_argument("--before-rounds", type=int, default=3)
    p.add_argument("--conform", action="store_true", help="also time the conform matmul rows")
    p.add_argument("--conform-examples", type=int, default=10)
    p.add_argument("--conform-rounds", type=int, default=3)
    args = p.parse_args(argv)
    before = load_before(args.before) if args.before else None
    print(f"# GEMM emulator on the CPU, {datetime.date.today().isoformat()}")
    print(f"Machine: {machine()}")
    print(f"Command: python benchmarks/bench_gemm_cpu.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"Shape: {args.m} x {args.k} @ {args.k} x {args.n}, {args.rounds} rounds\n")
    for line in bench_gemm(args, before):
        print(line, flush=True)
    if args.conform:
        for line in bench_conform(args):
            print(line, flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
