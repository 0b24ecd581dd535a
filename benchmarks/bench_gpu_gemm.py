"""GPU check and benchmark of the triton block-scaled GEMM (backends/triton_gemm.py, run on a CUDA device).

1. Bit-exactness first, against the numpy emulator's ``sm90-bf16`` model
   (``fp4spec.matmul(..., accumulator="sm90-bf16")``): every scheme (mxfp4, nvfp4, ufp4,
   nvint4) on every conformance case family (wide scale ranges, cancellation, truncation,
   alignment, subnormal results, NaN scales and NaN/Inf c, random) at a tile-sized shape and
   a tiny one (mma.sync instead of wgmma), random operands at 256 x 256 x 1024 and a
   non-square 192 x 320 x 768 (c given), a mixed mxfp4 x nvfp4 case, bf16 output; every
   configuration that is timed is first checked on the 256 x 256 x 1024 case.
2. Timing at SIZE^3 (default 8192) with ``triton.testing.do_bench`` (median, L2 flushed
   between runs): bf16 ``torch.matmul`` on the same shape in the same run (the baseline), a
   sweep of ``triton_gemm.CONFIGS`` for nvfp4 and mxfp4, the best one for ufp4 and nvint4,
   the dequantize prepass alone, and (experiment, not claimed) ``tl.dot_scaled`` for mxfp4
   with its bit differences from the model. TFLOP/s = 2 SIZE^3 / time; % of bf16.
3. Exit status 1 on any bit difference of the claimed kernel (dot_scaled's are reported only).

Every check goes through ``G.matmul`` twice where the shape allows: without a configuration
(what ``Backend.matmul`` and the conformance rows run: the any-shape ``SMALL_CONFIG`` for
small GEMMs) and with the tuned configurations.

    python benchmarks/bench_gpu_gemm.py [--quick] [--few-configs] [--no-check] [--size 8192] [--configs a,b,...]

``--quick``: the bit-exactness checks only (fewer configurations, no timing, no experiment;
under a minute on an H200 including about 25 JIT compiles). ``--few-configs``: time four
configurations instead of every one. Progress lines carry the seconds since the start and are
flushed, so a run stopped by a time limit shows where it was.

``--cpu-smoke`` runs the script's logic on the CPU under TRITON_INTERPRET=1 (tiny size; the
interpreter's dot replaced by the model's step chain, ``G.interpreter_model_dot``, so the checks
are exact there too; the timings mean nothing).

Writes bench_gpu_gemm.json and a markdown table (bench_gpu_gemm.md) to $OUT when it is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

if "--cpu-smoke" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.backends import triton_gemm as G  # noqa: E402
from fp4spec.conformance.matmul_properties import FAMILIES, GENERATORS  # noqa: E402

SCHEMES = ["mxfp4", "nvfp4", "ufp4", "nvint4"]
MODEL = fp4spec.get_accumulator("sm90-bf16")
#: Configurations checked on every case family (the sweep's are checked on random data too).
FAMILY_CONFIGS = ["prepass-128x256", "hybrid-64x256"]   # operands from shared memory / A from registers
QUICK_SWEEP = ["prepass-128x256", "hybrid-128x256", "fused-128x128", "fused-128x256"]
T0 = time.time()
DEV = "cpu" if "--cpu-smoke" in sys.argv else "cuda"


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def diff_count(got: np.ndarray, want: np.ndarray) -> int:
    if got.shape != want.shape:
        return want.size
    if got.dtype == np.uint16:
        return int(np.count_nonzero(got != G.bf16_rne_bits(want)))
    return int(np.count_nonzero(np.asarray(got, np.float32).view(np.uint32) != want.view(np.uint32)))


class Checker:
    def __init__(self):
        self.compared = 0
        self.diffs = 0
        self.failures = []
        self.rows = []

    def compare(self, label, got, want):
        d = diff_count(got, want)
        self.compared += want.size
        self.diffs += d
        if d:
            bad = np.argwhere((got.view(np.uint16) != G.bf16_rne_bits(want)) if got.dtype == np.uint16
                              else (got.view(np.uint32) != want.view(np.uint32)))[0]
            i, j = map(int, bad)
            g = int(got[i, j]) if got.dtype == np.uint16 else int(got.view(np.uint32)[i, j])
            self.failures.append(f"{label}: {d} of {want.size} differ; first ({i}, {j}): got 0x{g:X}, "
                                 f"want 0x{int(want.view(np.uint32)[i, j]):08X} ({float(want[i, j])!r})")
        return d


def case_data(name, family, seed, m, n, k):
    return GENERATORS[family](np.random.default_rng(seed), MODEL, fp4spec.get_scheme(name), m, n, k)


def run_checks(chk: Checker, quick: bool) -> dict:
    """Section 1; returns the emulator results of the random 256 x 256 x 1024 cases (c = None)
    per scheme, for checking the sweep's configurations (not made with ``quick``)."""
    shapes = [(128, 192, 256 if quick else 512), (3, 5, 64)]     # quick: half the emulator's time
    for name in SCHEMES:
        for fi, family in enumerate(FAMILIES):
            for si, (m, n, k) in enumerate(shapes):
                case = case_data(name, family, 100 * fi + si, m, n, k)
                want = fp4spec.matmul(case.qa, case.qb, accumulator=MODEL, c=case.c)
                chk.compare(f"{name} {family} {m}x{n}x{k} default", G.matmul(case.qa, case.qb, c=case.c), want)
                if quick and m <= 8:
                    continue        # the tuned tiny tile (mma.sync): full mode only
                for cfg in (FAMILY_CONFIGS[:1] if quick or m <= 8 else FAMILY_CONFIGS):
                    got = G.matmul(case.qa, case.qb, c=case.c, config=cfg)
                    chk.compare(f"{name} {family} {m}x{n}x{k} {cfg}", got, want)
            log(f"  {name} {family}: compared {chk.compared}, differences {chk.diffs}")
        log(f"families {name}: compared {chk.compared}, differences {chk.diffs}")
    timed_refs = {}
    for name in SCHEMES:
        if not quick:
            case = case_data(name, "random", 7, 256, 256, 1024)
            want = fp4spec.matmul(case.qa, case.qb, accumulator=MODEL)
            timed_refs[name] = (case, want)
        case2 = case_data(name, "random", 8, 192, 320, 768)
        c2 = np.random.default_rng(9).standard_normal((192, 320)).astype(np.float32)
        want2 = fp4spec.matmul(case2.qa, case2.qb, accumulator=MODEL, c=c2)
        for cfg in FAMILY_CONFIGS[:1] if quick else FAMILY_CONFIGS + [G.SMALL_CONFIG]:
            chk.compare(f"{name} random 192x320x768 c {cfg}", G.matmul(case2.qa, case2.qb, c=c2, config=cfg), want2)
        chk.compare(f"{name} random 192x320x768 c bf16-out",
                    G.matmul(case2.qa, case2.qb, c=c2, out_dtype=torch.bfloat16), want2)
        log(f"random {name}: compared {chk.compared}, differences {chk.diffs}")
    ca = case_data("mxfp4", "wide_scales", 3, 64, 64, 256)
    cb = case_data("nvfp4", "wide_scales", 4, 64, 64, 256)
    want = fp4spec.matmul(ca.qa, cb.qb, accumulator=MODEL, c=ca.c)
    chk.compare("mixed mxfp4 x nvfp4 default", G.matmul(ca.qa, cb.qb, c=ca.c), want)
    chk.compare("mixed mxfp4 x nvfp4 prepass-128x256", G.matmul(ca.qa, cb.qb, c=ca.c, config="prepass-128x256"),
                want)
    log(f"mixed: compared {chk.compared}, differences {chk.diffs}")
    return timed_refs


def compiled_kernels():
    """How many variants of the GEMM kernels Triton has compiled in this process (None where
    its JIT cache layout is unknown)."""
    try:
        return sum(len(c[0]) for k in (G.gemm_kernel, G.gemm_kernel_any, G.dequant_bf16_kernel,
                                       G.dequant_bf16_kernel_any) for c in k.device_caches.values())
    except Exception:  # noqa: BLE001 -- Triton internals; informative only
        return None


def dot_scaled_diffs(timed_refs) -> dict:
    """Experiment: tl.dot_scaled (mxfp4) against the model on the mxfp4 families and random case."""
    out = {"compared": 0, "diffs": 0, "by_case": {}, "error": None}
    cases = [(f, case_data("mxfp4", f, 100 * i, 128, 192, 512)) for i, f in enumerate(FAMILIES)]
    cases.append(("random-256", timed_refs["mxfp4"][0]))
    try:
        for label, case in cases:
            want = fp4spec.matmul(case.qa, case.qb, accumulator=MODEL, c=case.c)
            pa, sa, _ = G.pack_operand(case.qa, DEV)
            pb, sb, _ = G.pack_operand(case.qb, DEV)
            c = None if case.c is None else torch.from_numpy(case.c).to(DEV)
            got = G.matmul_dot_scaled(pa, sa, pb, sb, c=c).cpu().numpy()
            d = diff_count(got, want)
            out["compared"] += want.size
            out["diffs"] += d
            out["by_case"][label] = d
    except Exception as exc:  # an experiment: report, do not fail
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def operands(name, size, seed=0):
    """Random packed codes and scale codes near 1 (size x size), on the GPU."""
    sch = fp4spec.get_scheme(name)
    gen = torch.Generator(device=DEV).manual_seed(seed)
    vals = sch.scale.values
    ok = torch.tensor([c for c in range(1 << sch.scale.bits) if 0.25 <= vals[c] <= 4.0], dtype=torch.uint8,
                      device=DEV)

    def one():
        p = torch.randint(0, 256, (size, size // 2), dtype=torch.uint8, device=DEV, generator=gen)
        idx = torch.randint(0, len(ok), (size, size // sch.block_size), device=DEV, generator=gen)
        return p, ok[idx].contiguous()

    (pa, sa), (pb, sb) = one(), one()
    g = torch.tensor([0.3], dtype=torch.float32, device=DEV) if sch.global_scale else None   # on the device once
    return pa, sa, pb, sb, g


def ptx_audit() -> dict:
    """What the compiled GEMM kernels are made of (from Triton's cache): how many use wgmma or
    mma.sync, whether any float arithmetic flushes subnormals (.ftz), and whether every wgmma's
    scale-d operand is the constant-true predicate (the accumulator is always used)."""
    import glob
    import re

    root = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    out = {"dir": root, "kernels": 0, "wgmma": 0, "mma_sync": 0, "ftz": 0, "scale_d_not_const": 0}
    for path in glob.glob(os.path.join(root, "**", "gemm_kernel.ptx"), recursive=True):
        ptx = open(path).read()
        out["kernels"] += 1
        out["wgmma"] += "wgmma.mma_async" in ptx
        out["mma_sync"] += "mma.sync" in ptx
        out["ftz"] += len(re.findall(r"\.ftz", ptx))
        # operands: {d}, an A descriptor or {A registers}, the B descriptor, the scale-d predicate, ...
        for pred in set(re.findall(r"wgmma\.mma_async[^;]*\}, (?:%rd\d+, )?%rd\d+, (%p\d+)", ptx)):
            if not re.search(rf"mov\.pred\s+{re.escape(pred)}, -1;", ptx):
                out["scale_d_not_const"] += 1
    return out


def bench(fn):
    import triton

    if DEV == "cpu":
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return float(np.median(ts))
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the bit-exactness checks only (fewer), no timing")
    ap.add_argument("--few-configs", action="store_true", help="time four configurations, not every one")
    ap.add_argument("--no-check", action="store_true", help="skip the bit-exactness section")
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--configs", default=None, help="comma-separated names of triton_gemm.CONFIGS to sweep")
    ap.add_argument("--cpu-smoke", action="store_true", help="check the script's logic on the CPU (interpreter)")
    args = ap.parse_args()
    if args.cpu_smoke:
        args.size = min(args.size, 256)
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 1
    import triton

    name = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"
    print(f"device {name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"numpy {np.__version__}", flush=True)
    sweep = args.configs.split(",") if args.configs else (QUICK_SWEEP if args.few_configs else list(G.CONFIGS))
    for c in sweep:
        G.get_config(c)
    chk = Checker()
    report = {"device": name, "torch": torch.__version__, "triton": triton.__version__,
              "size": args.size}
    timed_refs = {}
    if not args.no_check:
        timed_refs = run_checks(chk, args.quick)
        log(f"bit-exactness (families, random, mixed): compared {chk.compared} outputs, {chk.diffs} differences; "
            f"kernels compiled: {compiled_kernels()}")
    if args.quick:
        report.update(compared=chk.compared, diffs=chk.diffs, failures=chk.failures[:50],
                      kernels_compiled=compiled_kernels(), seconds=time.time() - T0)
        out = os.environ.get("OUT")
        if out:
            with open(os.path.join(out, "bench_gpu_gemm_quick.json"), "w") as f:
                json.dump(report, f, indent=1)
        print(f"quick check: compared {chk.compared} outputs, {chk.diffs} differences, {len(chk.failures)} failing "
              f"checks, {time.time() - T0:.1f} s", flush=True)
        for f in chk.failures[:20]:
            print("  FAIL", f, flush=True)
        return 1 if chk.failures else 0
        report["dot_scaled_check"] = dot_scaled_diffs(timed_refs)
        log(f"dot_scaled (experiment, mxfp4): {report['dot_scaled_check']}")

    S = args.size
    flop = 2.0 * S ** 3
    a16 = torch.randn(S, S, device=DEV, dtype=torch.bfloat16)
    b16 = torch.randn(S, S, device=DEV, dtype=torch.bfloat16)
    t_bf16 = bench(lambda: torch.matmul(a16, b16.t()))
    del a16, b16
    base = flop / t_bf16 / 1e9
    log(f"bf16 torch.matmul {S}^3: {t_bf16:.3f} ms, {base:.1f} TFLOP/s")
    rows = [("bf16 torch.matmul (baseline)", "-", t_bf16)]

    def timed(name, cfg, label=None):
        pa, sa, pb, sb, g = operands(name, S)
        if timed_refs:
            case, want = timed_refs[name]
            chk.compare(f"{name} random 256x256x1024 {cfg}", G.matmul(case.qa, case.qb, config=cfg), want)
        t = bench(lambda: G.matmul_packed(pa, sa, pb, sb, name, g=g, config=cfg))
        rows.append((label or name, cfg, t))
        log(f"{name:6} {cfg:22} {t:7.3f} ms {flop / t / 1e9:7.1f} TFLOP/s {100 * t_bf16 / t:5.1f} % of bf16")
        return t

    best = {}
    for name in ("nvfp4", "mxfp4"):
        for cfg in sweep:
            try:
                t = timed(name, cfg)
            except Exception as exc:
                chk.failures.append(f"{name} {cfg}: raised {type(exc).__name__}: {str(exc)[:300]}")
                log(f"{name} {cfg}: raised {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if name not in best or t < best[name][1]:
                best[name] = (cfg, t)
    top = best.get("nvfp4", best.get("mxfp4", (G.DEFAULT_CONFIG, 0)))[0]
    for name in ("ufp4", "nvint4"):
        best[name] = (top, timed(name, top))
    # the prepass alone, and the experiment
    pa, sa, pb, sb, _ = operands("nvfp4", S)
    t_dq = bench(lambda: (G.dequantize_bf16(pa, sa, "nvfp4"), G.dequantize_bf16(pb, sb, "nvfp4")))
    log(f"dequantize prepass alone (A and B, nvfp4 -> bf16): {t_dq:.3f} ms")
    pa, sa, pb, sb, _ = operands("mxfp4", S)
    try:
        t_ds = bench(lambda: G.matmul_dot_scaled(pa, sa, pb, sb))
        log(f"tl.dot_scaled mxfp4 (experiment): {t_ds:.3f} ms, {flop / t_ds / 1e9:.1f} TFLOP/s")
    except Exception as exc:
        t_ds = None
        log(f"tl.dot_scaled mxfp4 (experiment) raised {type(exc).__name__}: {str(exc)[:300]}")

    if DEV == "cuda":
        report["ptx_audit"] = ptx_audit()
        log(f"PTX of the compiled gemm kernels: {report['ptx_audit']}")
    md = [f"| kernel ({S}^3) | config | ms | TFLOP/s | % of bf16 |", "|---|---|---:|---:|---:|"]
    for label, cfg, t in rows:
        md.append(f"| {label} | {cfg} | {t:.3f} | {flop / t / 1e9:.1f} | {100 * t_bf16 / t:.1f} |")
    md.append(f"| dequantize prepass alone (nvfp4 A and B) | - | {t_dq:.3f} | - | - |")
    if t_ds is not None:
        md.append(f"| tl.dot_scaled mxfp4 (experiment) | 128x128x128 | {t_ds:.3f} | {flop / t_ds / 1e9:.1f} | "
                  f"{100 * t_bf16 / t_ds:.1f} |")
    print("\n".join(md), flush=True)
    print("best:", {k: (v[0], round(v[1], 3), f"{100 * t_bf16 / v[1]:.1f} %") for k, v in best.items()})
    report.update(rows=[{"kernel": l, "config": c, "ms": t, "tflops": flop / t / 1e9, "pct_bf16": 100 * t_bf16 / t}
                        for l, c, t in rows],
                  dequant_ms=t_dq, dot_scaled_ms=t_ds, best={k: v[0] for k, v in best.items()},
                  compared=chk.compared, diffs=chk.diffs, failures=chk.failures[:50])
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_gemm.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(out, "bench_gpu_gemm.md"), "w") as f:
            f.write("\n".join(md) + "\n")
    print(f"bit-exactness: compared {chk.compared} outputs, {chk.diffs} differences, {len(chk.failures)} failing "
          f"checks", flush=True)
    for f in chk.failures[:20]:
        print("  FAIL", f, flush=True)
    return 1 if chk.failures else 0


if __name__ == "__main__":
    if DEV == "cpu":
        with G.interpreter_model_dot():
            sys.exit(main())
    sys.exit(main())
