"""GPU timing of the RHT on the tensor cores (``arith="mma:sm90-bf16"``, backends/triton/mma.py).
Run on a Hopper GPU. Exactness: tests/backends/test_triton_rht_mma.py and the mma tests of
test_triton_gpu.py (which also check every configuration timed here).

On a 16384 x 16384 bf16 tensor (CUDA-graph replay, median of --iters): the elementwise copy
kernel (baseline, same run), plain rowwise quantize (``rows_bf16``), the fused mma RHT +
quantize over a configuration sweep, the butterfly (fwht-fp32) fused kernel, and the ratios.

    python benchmarks/bench_gpu_rht_mma.py [--size 16384] [--iters 50] [--repeat 5] [--rows plain|pair]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import cuda_time, log  # noqa: E402

from fp4spec.backends import torch_backend as tb  # noqa: E402
from fp4spec.backends.base import resolve_scheme  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG, capability  # noqa: E402
from fp4spec.backends.triton import mma as rm  # noqa: E402
from fp4spec.backends.triton.launch import global_amax, rows_bf16_launcher  # noqa: E402
from fp4spec.backends.triton.quantize import mx_consts, quantize_packed, two_level_consts  # noqa: E402
from fp4spec.rht import RHT, TE_SIGNS  # noqa: E402

ARITH = "mma:sm90-bf16"


def rht_obj(signs, out_dtype="bfloat16"):
    """The transform (fp4spec.rht.RHT, the mma arithmetic) with these signs."""
    return RHT(16, tuple(int(s) for s in signs), ARITH, out_dtype)


def pair(p):
    return {16: p, 32: p}


#: Configurations of the fused kernel's sweep (TritonConfig fields: operand rows, programs per
#: SM, TMA stages, register cap; MX by the float32 encoder; without GPU-only instructions; the
#: [g, h, l, t, k] box; the last one: the per-tile check, row stores, integer UE4M3).
SWEEP = ([dict(mma_pair_rows=pair(p), mma_tma_per_sm=s, mma_tma_stages=pair(st), mma_tma_maxnreg=mr)
          for p in (False, True) for s, st, mr in ((5, 3, 96), (6, 3, 80), (5, 4, 96), (7, 3, 72), (8, 3, 64))]
         + [dict(mma_pair_rows=pair(p), mma_tma_stages=pair(3), mma_bf16x2=False) for p in (False, True)]
         + [dict(mma_pair_rows=pair(p), mma_tma_stages=pair(3), hw_instructions=False) for p in (False, True)]
         + [dict(mma_pair_rows=pair(True), mma_tma_stages=pair(3), mma_pair_tmajor=False)]
         + [dict(mma_tma_stages=pair(3), mma_defer=False, mma_block_stores=False, hw_instructions=False)])


def time_all(x, iters, repeat=1, base=DEFAULT_CONFIG):
    n = x.shape[0]
    ne = x.numel()
    T = lambda fn: cuda_time(fn, iters)  # noqa: E731
    y = torch.empty_like(x)
    t_copy = T(lambda: torch.mul(x, 1, out=y))
    bw = 4 * ne / t_copy
    log(f"copy kernel {t_copy * 1e3:.3f} ms = {bw / 1e12:.2f} TB/s")
    nv = resolve_scheme("nvfp4")
    r = rht_obj(TE_SIGNS)
    te = RHT.te()
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), nv)
    sed_r = tb.tensor_scale(rm.rht_amax(x, r), nv)
    qp = lambda *a, **k: quantize_packed(*a, config=base, **k)  # noqa: E731
    rows = []

    def row(name, fn, nbytes):
        t = T(fn)
        rows.append((name, t, nbytes))
        log(f"  {name:<50} {t * 1e3:8.3f} ms {nbytes / t / 1e12:6.2f} TB/s {100 * nbytes / t / bw:6.1f} %")
        return t

    q_nv, q_mx = ne * (2 + 0.5 + 1 / 16), ne * (2 + 0.5 + 1 / 32)
    out = {}
    out["nv plain"] = row("nvfp4 rowwise plain rows_bf16 (given)", lambda: qp(x, nv, s_enc_dec=sed), q_nv)
    out["mx plain"] = row("mxfp4 rowwise plain rows_bf16", lambda: qp(x, "mxfp4"), q_mx)
    pk0 = torch.empty((n, n // 2), dtype=torch.uint8, device=x.device)
    sc0 = torch.empty((n, n // 16), dtype=torch.uint8, device=x.device)
    ts0 = two_level_consts(nv, x.device, s_enc_dec=sed)
    row("nvfp4 rowwise plain rows_bf16, integer UE4M3 rounding (given)",
        rows_bf16_launcher(x, pk0, sc0, ts0, nv, replace(base, hw_instructions=False)), q_nv)
    out["nv mma"] = row("nvfp4 rowwise RHT mma fused (given)",
                        lambda: qp(x, nv, rht=r, s_enc_dec=sed_r), q_nv)
    out["mx mma"] = row("mxfp4 rowwise RHT mma fused", lambda: qp(x, "mxfp4", rht=r), q_mx)
    ts_nv = two_level_consts(nv, x.device, s_enc_dec=sed_r)
    ts_mx = mx_consts(resolve_scheme("mxfp4"), x.device)
    pk = torch.empty((n, n // 2), dtype=torch.uint8, device=x.device)
    for spec, ts, nb, bytes_ in (("nvfp4", ts_nv, n // 16, q_nv), ("mxfp4", ts_mx, n // 32, q_mx)):
        sc = torch.empty((n, nb), dtype=torch.uint8, device=x.device)
        sch = resolve_scheme(spec)
        for kw in SWEEP:
            launch = rm.mma_launcher(x, pk, sc, ts, sch, r, replace(base, **kw))
            tag = " ".join(f"{k.removeprefix('mma_')}={dict(v) if isinstance(v, dict) else v}" for k, v in kw.items())
            try:
                k = launch()
                row(f"{spec} mma {tag} regs={getattr(k, 'n_regs', '?')}", launch, bytes_)
            except Exception as exc:  # a configuration that does not compile or launch
                log(f"  {spec} {tag}: {type(exc).__name__}: {str(exc)[:200]}")
    out["nv fwht"] = row("nvfp4 rowwise RHT fwht-fp32 fused (given)",
                         lambda: qp(x, nv, rht=te, s_enc_dec=sed_r), q_nv)
    out["mx fwht"] = row("mxfp4 rowwise RHT fwht-fp32 fused", lambda: qp(x, "mxfp4", rht=te), q_mx)
    f32enc = replace(base, rht_rows_bf16x2=False)
    row("mxfp4 rowwise RHT fwht-fp32 fused, float32 encoder",
        lambda: quantize_packed(x, "mxfp4", rht=te, config=f32enc), q_mx)
    out["nv plain amax"] = row("nvfp4 rowwise plain incl. amax pass", lambda: qp(x, nv), q_nv)
    out["nv mma amax"] = row("nvfp4 rowwise RHT mma incl. RHT+amax pass", lambda: qp(x, nv, rht=r),
                             q_nv)
    row("RHT mma + amax pass", lambda: rm.rht_amax(x, r), 2 * ne)
    row("amax pass", lambda: global_amax(x, n, n, n, 1), 2 * ne)
    row("nvfp4 RHT mma unfused (given)",
        lambda: qp(x, nv, rht=r, s_enc_dec=sed_r, variant="unfused"), q_nv)
    row("mxfp4 columnwise RHT mma (unfused)", lambda: qp(x, "mxfp4", rht=r, axis=0), q_mx)
    log("ratios (fused RHT + quantize / plain quantize; target <= 1.05):")
    for a, b in (("nv mma", "nv plain"), ("mx mma", "mx plain"), ("nv fwht", "nv plain"), ("mx fwht", "mx plain"),
                 ("nv mma amax", "nv plain amax")):
        log(f"  {a:<12} / {b:<14} {out[a] / out[b]:.3f}")
    if repeat > 1:  # the headline ratios again, each round timing plain and fused back to back
        log(f"headline ratios over {repeat} rounds (plain, fused, fused / plain; median, min, max):")
        pairs = {"nvfp4": (lambda: qp(x, nv, s_enc_dec=sed), lambda: qp(x, nv, rht=r, s_enc_dec=sed_r)),
                 "mxfp4": (lambda: qp(x, "mxfp4"), lambda: qp(x, "mxfp4", rht=r)),
                 "mxfp4 fwht-fp32": (lambda: qp(x, "mxfp4"), lambda: qp(x, "mxfp4", rht=te))}
        for spec, (plain, fused) in pairs.items():
            ts = np.array([(T(plain), T(fused)) for _ in range(repeat)])
            q = ts[:, 1] / ts[:, 0]
            log(f"  {spec}: plain {np.median(ts[:, 0]) * 1e3:.3f} ms, fused {np.median(ts[:, 1]) * 1e3:.3f} ms, "
                f"ratio {np.median(q):.3f} (min {q.min():.3f}, max {q.max():.3f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the headline plain / fused timings")
    ap.add_argument("--rows", choices=("default", "plain", "pair"), default="default",
                    help="the fused kernel's operand rows for both block sizes (config mma_pair_rows)")
    args = ap.parse_args()
    base = DEFAULT_CONFIG if args.rows == "default" else replace(DEFAULT_CONFIG, mma_pair_rows=pair(args.rows == "pair"))
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, mma arith here: "
        f"{capability.gpu_features().mma_arith}")
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((args.size, args.size), device="cuda", generator=g).to(torch.bfloat16)
    time_all(x, args.iters, args.repeat, base)
    log("done")


if __name__ == "__main__":
    main()
