"""GPU timing of the rowwise bf16 -> E2M1 quantize kernels: the shipped ``rows_bf16`` at a tile
sweep, the other rowwise variants, and the experiments of benchmarks/experimental/rows_variants.py
(``pair``, ``tbp``). Exactness: tests/backends/test_triton_gpu.py and test_triton_rowwise.py.

CUDA-graph replay of 10 calls, median of --iters replays, against an elementwise bf16 copy
kernel in the same run (the denominator of "% copy"). "kernel" rows launch the kernel alone on
prepared buffers (no host-side torch ops); "call" rows time the whole quantize_packed. Bytes
per element: 2 read + 0.5 written + scale bytes (1/16 nvfp4, 1/32 mxfp4). Instruction counts:
benchmarks/sass_count.py (offline).

    python benchmarks/bench_gpu_rows.py [--size 16384] [--iters 20] [--quick]

With $OUT set, the table goes to $OUT/bench_gpu_rows.txt and $OUT/bench_gpu_rows.json too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from experimental import rows_variants as ex  # noqa: E402
from gpu_timing import cuda_time  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.backends import torch_backend as tb  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG  # noqa: E402
from fp4spec.backends.triton.launch import global_amax, rows_bf16_launcher  # noqa: E402
from fp4spec.backends.triton.quantize import mx_consts, quantize_packed, two_level_consts  # noqa: E402

#: (variant, BR, warps, programs per SM or None): rows_bf16 is the shipped kernel
CONFIGS = [("rows_bf16", 128, 4, None), ("rows_bf16", 256, 4, None), ("rows_bf16", 256, 8, None),
           ("rows_bf16", 512, 8, None), ("pair", 256, 8, None), ("pair", 512, 8, None), ("tbp", 256, 4, 8),
           ("tbp", 512, 8, 4)]


def launcher(x, spec, sed, variant, br, w, pps):
    """The kernel alone on prepared buffers."""
    sch = fp4spec.get_scheme(spec)
    n, K = x.shape[0], sch.block_size
    ts = two_level_consts(sch, x.device, s_enc_dec=sed) if sch.structure == "two_level" else mx_consts(sch, x.device)
    pk = torch.empty((n, n // 2), dtype=torch.uint8, device=x.device)
    sc = torch.empty((n, n // K), dtype=torch.uint8, device=x.device)
    if variant == "rows_bf16":
        return rows_bf16_launcher(x, pk, sc, ts, sch, BR=br, num_warps=w)
    return ex.launcher(x, pk, sc, ts, sch, variant=variant, BR=br, num_warps=w, programs_per_sm=pps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="first config of each variant only")
    args = ap.parse_args()
    import triton

    t0 = time.time()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    configs = CONFIGS
    if args.quick:
        seen = set()
        configs = [c for c in CONFIGS if not (c[0] in seen or seen.add(c[0]))]
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    y = torch.empty_like(x)
    t_copy = cuda_time(lambda: torch.mul(x, 1, out=y), args.iters)
    bw_copy = 4 * ne / t_copy
    rows = [("copy bf16: elementwise kernel (graph) -- baseline", t_copy, 4 * ne)]
    q = {"nvfp4": 2 * ne + ne // 2 + ne // 16, "mxfp4": 2 * ne + ne // 2 + ne // 32}
    T = lambda f: cuda_time(f, args.iters)  # noqa: E731
    for spec, kw in (("nvfp4", {"s_enc_dec": sed}), ("mxfp4", {})):
        v, br, w = DEFAULT_CONFIG.rows_two_level if spec == "nvfp4" else DEFAULT_CONFIG.rows_mx
        rows.append((f"{spec} quantize_packed {v} {br}/{w} call", T(lambda: quantize_packed(x, spec, variant=v, **kw)),
                     q[spec]))
        rows.append((f"{spec} quantize_packed default (rows_bf16 {DEFAULT_CONFIG.rows_bf16_blocks}/"
                     f"{DEFAULT_CONFIG.rows_bf16_warps}) call", T(lambda: quantize_packed(x, spec, **kw)), q[spec]))
        rows.append((f"{spec} rows_bf16, integer UE4M3 and sign bits (no GPU-only instructions) call",
                     T(lambda: quantize_packed(x, spec, config=replace(DEFAULT_CONFIG, hw_instructions=False), **kw)),
                     q[spec]))
        for v, br, w, pps in configs:
            tag = f"{spec} {v} BR={br} w={w}" + (f" p/SM={pps}" if pps else "") + " kernel"
            rows.append((tag, T(launcher(x, spec, sed, v, br, w, pps)), q[spec]))
        torch.cuda.empty_cache()
    lines = [f"{'kernel (quantize bytes 2 + 0.5 + scales)':<74} {'ms':>7} {'TB/s':>6} {'% copy':>7}"]
    table = []
    for name, t, nbytes in rows:
        bw = nbytes / t
        lines.append(f"{name:<74} {t * 1e3:7.3f} {bw / 1e12:6.2f} {100 * bw / bw_copy:6.1f}%")
        table.append({"name": name, "ms": t * 1e3, "TBps": bw / 1e12, "pct_copy": 100 * bw / bw_copy})
    target = 0.85 * bw_copy
    lines.append(f"85 % of copy = {target / 1e12:.2f} TB/s: nvfp4 <= {q['nvfp4'] / target * 1e3:.3f} ms, "
                 f"mxfp4 <= {q['mxfp4'] / target * 1e3:.3f} ms")
    text = "\n".join(lines)
    print("\n" + text)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_rows.txt"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "bench_gpu_rows.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "size": n,
                       "rows": table}, f, indent=1)
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
