"""GPU timing of the triton block-scaled GEMM (backends/triton/gemm.py; run on a Hopper GPU).
Exactness: the ``gpu`` tests of tests/backends/test_triton_gemm.py (every conformance case
family, random operands, every named configuration, mixed schemes, bf16 output).

At SIZE^3 (default 8192) with ``triton.testing.do_bench`` (median, L2 flushed between runs):
bf16 ``torch.matmul`` on the same shape in the same run (the baseline), a sweep of
``gemm.CONFIGS`` for nvfp4 and mxfp4, the best one for ufp4 and nvint4, the dequantize prepass
alone, and the ``tl.dot_scaled`` experiment (benchmarks/experimental/dot_scaled.py) for mxfp4.
TFLOP/s = 2 SIZE^3 / time; % of bf16. Then an audit of the compiled kernels' PTX (wgmma /
mma.sync, no .ftz, constant scale-d).

    python benchmarks/bench_gpu_gemm.py [--few-configs] [--size 8192] [--configs a,b,...]

Exit status 1 if a configuration raised.

Writes bench_gpu_gemm.json and a markdown table (bench_gpu_gemm.md) to $OUT when it is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from experimental.dot_scaled import matmul_dot_scaled  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG  # noqa: E402
from fp4spec.backends.triton import gemm as G  # noqa: E402

QUICK_SWEEP = ["prepass-128x256", "hybrid-128x256", "fused-128x128", "fused-128x256"]
T0 = time.time()
DEV = "cuda"


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


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

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--few-configs", action="store_true", help="time four configurations, not every one")
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--configs", default=None, help="comma-separated names of gemm.CONFIGS to sweep")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 1
    import triton

    name = torch.cuda.get_device_name()
    print(f"device {name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"numpy {np.__version__}", flush=True)
    sweep = args.configs.split(",") if args.configs else (QUICK_SWEEP if args.few_configs else list(G.CONFIGS))
    for c in sweep:
        G.get_config(c)
    report = {"device": name, "torch": torch.__version__, "triton": triton.__version__, "size": args.size}
    failures = []

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
                failures.append(f"{name} {cfg}: raised {type(exc).__name__}: {str(exc)[:300]}")
                log(f"{name} {cfg}: raised {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if name not in best or t < best[name][1]:
                best[name] = (cfg, t)
    top = best.get("nvfp4", best.get("mxfp4", (DEFAULT_CONFIG.gemm, 0)))[0]
    for name in ("ufp4", "nvint4"):
        best[name] = (top, timed(name, top))
    # the prepass alone, and the experiment
    pa, sa, pb, sb, _ = operands("nvfp4", S)
    t_dq = bench(lambda: (G.dequantize_bf16(pa, sa, "nvfp4"), G.dequantize_bf16(pb, sb, "nvfp4")))
    log(f"dequantize prepass alone (A and B, nvfp4 -> bf16): {t_dq:.3f} ms")
    pa, sa, pb, sb, _ = operands("mxfp4", S)
    try:
        t_ds = bench(lambda: matmul_dot_scaled(pa, sa, pb, sb))
        log(f"tl.dot_scaled mxfp4 (experiment): {t_ds:.3f} ms, {flop / t_ds / 1e9:.1f} TFLOP/s")
    except Exception as exc:
        t_ds = None
        log(f"tl.dot_scaled mxfp4 (experiment) raised {type(exc).__name__}: {str(exc)[:300]}")

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
                  failures=failures[:50])
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_gemm.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(out, "bench_gpu_gemm.md"), "w") as f:
            f.write("\n".join(md) + "\n")
    for f in failures[:20]:
        print("  RAISED", f, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
