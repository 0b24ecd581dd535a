"""GPU check and benchmark of the RHT on the tensor cores (``arith="mma:sm90-bf16"``,
``backends/triton_rht_mma.py``). Run on a Hopper GPU.

1. Bit-exactness against the CPU reference (the spec's ``fp4spec.rht.rht`` with this
   arithmetic, steps M1-M5, then the numpy quantizer), on adversarial bf16 tensors
   (normal, wide exponent spans, subnormals, +-0 rows, Inf/NaN, huge values), for the fused
   rowwise kernel (nvfp4 given scale and with the RHT + amax pass, mxfp4 floor / rceil),
   the unfused path (columnwise, SR with given bits, float32 output) and the RHT + amax
   pass; then fused == unfused on the full benchmark tensor. Any difference: exit status 1.
2. Timing on a 16384 x 16384 bf16 tensor (CUDA-graph replay, median of --iters): the
   elementwise copy kernel (baseline, same run), plain rowwise quantize (``tb``), fused mma
   RHT + quantize over a tile sweep, the butterfly (fwht-fp32) fused kernel, and the ratios.

    python benchmarks/bench_gpu_rht_mma.py [--size 16384] [--iters 50] [--only check,time] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import ml_dtypes
import numpy as np
import torch

import fp4spec
from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb
from fp4spec.backends import triton_rht_mma as rm
from fp4spec.backends import triton_rows_fast as rf
from fp4spec.backends.base import resolve_scheme
from fp4spec.rht import RHT, TE_SIGNS, rht, rht_signs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu_quantize import cuda_time  # noqa: E402

T0 = time.time()
ARITH = "mma:sm90-bf16"
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: TRITON_INTERPRET=1 (small checks only)


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def rht_obj(signs, out_dtype="bfloat16"):
    """The transform (fp4spec.rht.RHT, the mma arithmetic) with these signs."""
    return RHT(16, tuple(int(s) for s in signs), ARITH, out_dtype)


def ref_rht(x32, signs, axis=-1, out_bf16=True):
    """The spec's RHT (steps M1-M5, on the CPU) of a float32 array of bf16 values along axis,
    as float32."""
    y = rht(x32, 16, signs=signs, axis=axis, arith=ARITH, out_dtype="bfloat16" if out_bf16 else "float32")
    return np.asarray(y, np.float32)


def tensors(rng):
    """(name, float32 array of bf16 values)."""
    out = []
    x = rng.standard_normal((256, 512)).astype(np.float32)
    out.append(("normal 256x512", x))
    w = x * np.exp2(rng.integers(-60, 60, x.shape)).astype(np.float32)
    out.append(("wide 256x512", w))
    s = rng.standard_normal((128, 256)).astype(np.float32) * np.float32(2.0 ** -128)
    out.append(("subnormal 128x256", s))
    h = rng.standard_normal((128, 256)).astype(np.float32) * np.float32(2.0 ** 125)
    out.append(("huge 128x256", h))
    sp = rng.standard_normal((64, 256)).astype(np.float32)
    sp[1, 3] = np.inf
    sp[5, 40] = -np.inf
    sp[9, 17] = np.nan
    sp[12, :] = -0.0
    sp[13, :16] = 0.0
    sp[20, 0], sp[20, 1] = np.inf, -np.inf
    sp[30, :] = np.float32(3.3895314e38)
    out.append(("specials 64x256", sp))
    out.append(("ragged 40x48", rng.standard_normal((40, 48)).astype(np.float32)))
    out.append(("ragged 7x96", rng.standard_normal((7, 96)).astype(np.float32)))
    return [(n, a.astype(ml_dtypes.bfloat16).astype(np.float32)) for n, a in out]


def codes_of(out, shape):
    pk = out["packed"].cpu().numpy()
    return np.stack((pk & 15, pk >> 4), -1).reshape(shape)


def compare(tag, out, ref, shape, failures):
    m = ref.moved()
    want_c = np.asarray(m["codes"]).reshape(shape)
    got_c = codes_of(out, shape)
    want_s = np.asarray(m["scales"]).reshape(-1)
    got_s = out["scales"].cpu().numpy().reshape(-1)
    ok = np.array_equal(got_c, want_c) and np.array_equal(got_s, want_s)
    g = out["global_scale"]
    if ref.global_scale is not None:
        ok = ok and np.float32(g.cpu()).view(np.uint32) == np.float32(ref.global_scale).view(np.uint32)
    if not ok:
        nd = int((got_c != want_c).sum())
        failures.append(tag)
        log(f"  FAIL {tag}: {nd} codes, {int((got_s != want_s).sum())} scales differ")
    return ok


def check(failures):
    rng = np.random.default_rng(7)
    seeded = rht_signs(16, seed=11)
    n = 0
    for name, x in tensors(rng):
        xt = torch.from_numpy(x).to(torch.bfloat16).to(DEV)
        for signs, stag in ((TE_SIGNS, "te"), (seeded, "seed11")):
            r = rht_obj(signs)
            y = ref_rht(x, signs)
            for spec in ("nvfp4", "mxfp4", "mxfp4:scale_rule=rceil"):
                sch = resolve_scheme(spec)
                if x.shape[1] % sch.block_size:
                    continue
                ref = fp4spec.quantize(y, sch, backend="numpy")
                for variant in ("rows", "unfused"):
                    out = trb.quantize_packed(xt, sch, rht=r, variant=variant)
                    n += compare(f"{name} {stag} {spec} {variant}", out, ref, x.shape, failures)
                if spec == "nvfp4":  # given tensor scale (from the RHT + amax pass): the fused kernel alone
                    sed = tb.tensor_scale(rm.rht_amax(xt.contiguous(), r), sch)
                    out = trb.quantize_packed(xt, sch, rht=r, s_enc_dec=sed)
                    n += compare(f"{name} {stag} nvfp4 given", out, ref, x.shape, failures)
            # RHT + amax pass
            a = float(rm.rht_amax(xt.contiguous(), r).cpu())
            wa = np.float32(np.max(np.abs(y))) if not np.isnan(y).any() else np.float32(np.nan)
            same = (np.isnan(a) and np.isnan(wa)) or np.float32(a) == wa
            n += bool(same)
            if not same:
                failures.append(f"{name} {stag} amax")
                log(f"  FAIL {name} {stag} amax {a} vs {wa}")
        # columnwise (unfused) and SR with given bits, float32 output
        if x.shape[0] % 16 == 0:
            r = rht_obj(TE_SIGNS)
            yc = ref_rht(x, TE_SIGNS, axis=0)
            for spec in ("nvfp4", "mxfp4"):
                sch = resolve_scheme(spec)
                if x.shape[0] % sch.block_size:
                    continue
                ref = fp4spec.quantize(yc.T.copy(), sch, backend="numpy")
                out = trb.quantize_packed(xt, sch, rht=r, axis=0)
                n += compare(f"{name} te {spec} columnwise", out, ref, (x.shape[1], x.shape[0]), failures)
        rb = rng.integers(0, 256, x.shape).astype(np.uint8)
        y = ref_rht(x, TE_SIGNS)
        ref = fp4spec.quantize(y, "nvfp4", rounding="sr", rbits=rb, backend="numpy")
        out = trb.quantize_packed(xt, "nvfp4", rht=rht_obj(TE_SIGNS), rounding="sr",
                                  rbits=torch.from_numpy(rb.astype(np.int32)).to(DEV))
        n += compare(f"{name} te nvfp4 sr", out, ref, x.shape, failures)
        if x.shape[1] % 32 == 0:
            y32 = ref_rht(x, TE_SIGNS, out_bf16=False)
            ref = fp4spec.quantize(y32, "mxfp4", backend="numpy")
            out = trb.quantize_packed(xt, "mxfp4", rht=rht_obj(TE_SIGNS, "float32"))
            n += compare(f"{name} te mxfp4 fp32-out", out, ref, x.shape, failures)
    log(f"check: {n} cases equal, {len(failures)} failures")


def check_full(x, failures):
    r = rht_obj(TE_SIGNS)
    for spec in ("nvfp4", "mxfp4"):
        a = trb.quantize_packed(x, spec, rht=r)
        b = trb.quantize_packed(x, spec, rht=r, variant="unfused")
        ok = torch.equal(a["packed"], b["packed"]) and torch.equal(a["scales"], b["scales"])
        log(f"full {spec}: fused == unfused: {ok}")
        if not ok:
            failures.append(f"full {spec}")


#: fused_launcher arguments of the fused kernel's sweep (operand rows, programs per SM, TMA
#: stages, register cap; MX by the float32 encoder (bf16x2=False); without GPU-only
#: instructions (hw_cvt=False, bf16x2=False: integer UE4M3, sign bits by shifts, float32
#: encoder); the [g, h, l, t, k] box; the last one: the per-tile check, row stores).
SWEEP = ([dict(tma=True, pair=pair, R=64, num_warps=4, programs_per_sm=p, stages=st, maxnreg=mr)
          for pair in (False, True) for p, st, mr in ((5, 3, 96), (6, 3, 80), (5, 4, 96), (7, 3, 72), (8, 3, 64))]
         + [dict(tma=True, pair=pair, R=64, num_warps=4, programs_per_sm=5, stages=3, maxnreg=96, bf16x2=False)
            for pair in (False, True)]
         + [dict(tma=True, pair=pair, R=64, num_warps=4, programs_per_sm=5, stages=3, maxnreg=96, hw_cvt=False,
                 bf16x2=False) for pair in (False, True)]
         + [dict(tma=True, pair=True, R=64, num_warps=4, programs_per_sm=5, stages=3, maxnreg=96, pair_t=False)]
         + [dict(tma=True, pair=False, R=64, num_warps=4, programs_per_sm=5, stages=3, maxnreg=96, defer=False,
                 block_stores=False, hw_cvt=False)])


def time_all(x, iters, failures, repeat=1):
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
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    sed_r = tb.tensor_scale(rm.rht_amax(x, r), nv)
    rows = []

    def row(name, fn, nbytes):
        t = T(fn)
        rows.append((name, t, nbytes))
        log(f"  {name:<50} {t * 1e3:8.3f} ms {nbytes / t / 1e12:6.2f} TB/s {100 * nbytes / t / bw:6.1f} %")
        return t

    q_nv, q_mx = ne * (2 + 0.5 + 1 / 16), ne * (2 + 0.5 + 1 / 32)
    out = {}
    out["nv plain"] = row("nvfp4 rowwise plain tb (given)", lambda: trb.quantize_packed(x, nv, s_enc_dec=sed), q_nv)
    out["mx plain"] = row("mxfp4 rowwise plain tb", lambda: trb.quantize_packed(x, "mxfp4"), q_mx)
    pk0 = torch.empty((n, n // 2), dtype=torch.uint8, device=x.device)
    sc0 = torch.empty((n, n // 16), dtype=torch.uint8, device=x.device)
    ts0 = trb.two_level_consts(nv, x.device, s_enc_dec=sed)
    row("nvfp4 rowwise plain tb, integer UE4M3 rounding (given)",
        rf.launcher(x, pk0, sc0, ts0, nv, BR=trb.TB_BR, num_warps=trb.TB_WARPS, hw_cvt=False), q_nv)
    out["nv mma"] = row("nvfp4 rowwise RHT mma fused (given)",
                        lambda: trb.quantize_packed(x, nv, rht=r, s_enc_dec=sed_r), q_nv)
    out["mx mma"] = row("mxfp4 rowwise RHT mma fused", lambda: trb.quantize_packed(x, "mxfp4", rht=r), q_mx)
    ts_nv = trb.two_level_consts(nv, x.device, s_enc_dec=sed_r)
    ts_mx = trb.mx_consts(resolve_scheme("mxfp4"), x.device)
    pk = torch.empty((n, n // 2), dtype=torch.uint8, device=x.device)
    for spec, ts, nb, bytes_ in (("nvfp4", ts_nv, n // 16, q_nv), ("mxfp4", ts_mx, n // 32, q_mx)):
        sc = torch.empty((n, nb), dtype=torch.uint8, device=x.device)
        sch = resolve_scheme(spec)
        want = trb.quantize_packed(x, sch, rht=r, variant="unfused", **({"s_enc_dec": sed_r} if spec == "nvfp4" else {}))
        for kw in SWEEP:
            launch = rm.fused_launcher(x, pk, sc, ts, sch, r, **kw)
            tag = " ".join(f"{k}={v}" for k, v in kw.items())
            try:
                pk.zero_()
                sc.zero_()
                k = launch()
                regs = getattr(k, "n_regs", "?")
                pk2, sc2 = pk.clone(), sc.clone()
                if not (torch.equal(pk2, want["packed"]) and torch.equal(sc2, want["scales"])):
                    failures.append(f"sweep {spec} {tag}")
                    log(f"  FAIL sweep {spec} {tag}: differs from the unfused path")
                row(f"{spec} mma {tag} regs={regs}", launch, bytes_)
            except Exception as exc:  # a configuration that does not compile or launch
                log(f"  {spec} {tag}: {type(exc).__name__}: {str(exc)[:200]}")
    out["nv fwht"] = row("nvfp4 rowwise RHT fwht-fp32 fused (given)",
                         lambda: trb.quantize_packed(x, nv, rht=te, s_enc_dec=sed_r), q_nv)
    out["mx fwht"] = row("mxfp4 rowwise RHT fwht-fp32 fused", lambda: trb.quantize_packed(x, "mxfp4", rht=te), q_mx)
    if trb.RHT_ROWS_BF16X2:
        want = trb.quantize_packed(x, "mxfp4", rht=te)
        trb.RHT_ROWS_BF16X2 = False
        try:
            got = trb.quantize_packed(x, "mxfp4", rht=te)
            if not (torch.equal(got["packed"], want["packed"]) and torch.equal(got["scales"], want["scales"])):
                failures.append("mxfp4 fwht-fp32 bf16x2 vs float32 encoder")
                log("  FAIL mxfp4 fwht-fp32: the bf16x2 and float32 encoders differ")
            row("mxfp4 rowwise RHT fwht-fp32 fused, float32 encoder", lambda: trb.quantize_packed(x, "mxfp4", rht=te),
                q_mx)
        finally:
            trb.RHT_ROWS_BF16X2 = True
    out["nv plain amax"] = row("nvfp4 rowwise plain incl. amax pass", lambda: trb.quantize_packed(x, nv), q_nv)
    out["nv mma amax"] = row("nvfp4 rowwise RHT mma incl. RHT+amax pass", lambda: trb.quantize_packed(x, nv, rht=r),
                             q_nv)
    row("RHT mma + amax pass", lambda: rm.rht_amax(x, r), 2 * ne)
    row("amax pass", lambda: trb.global_amax(x, n, n, n, 1), 2 * ne)
    row("nvfp4 RHT mma unfused (given)",
        lambda: trb.quantize_packed(x, nv, rht=r, s_enc_dec=sed_r, variant="unfused"), q_nv)
    row("mxfp4 columnwise RHT mma (unfused)", lambda: trb.quantize_packed(x, "mxfp4", rht=r, axis=0), q_mx)
    log("ratios (fused RHT + quantize / plain quantize; target <= 1.05):")
    for a, b in (("nv mma", "nv plain"), ("mx mma", "mx plain"), ("nv fwht", "nv plain"), ("mx fwht", "mx plain"),
                 ("nv mma amax", "nv plain amax")):
        log(f"  {a:<12} / {b:<14} {out[a] / out[b]:.3f}")
    if repeat > 1:  # the headline ratios again, each round timing plain and fused back to back
        log(f"headline ratios over {repeat} rounds (plain, fused, fused / plain; median, min, max):")
        pairs = {"nvfp4": (lambda: trb.quantize_packed(x, nv, s_enc_dec=sed),
                           lambda: trb.quantize_packed(x, nv, rht=r, s_enc_dec=sed_r)),
                 "mxfp4": (lambda: trb.quantize_packed(x, "mxfp4"), lambda: trb.quantize_packed(x, "mxfp4", rht=r)),
                 "mxfp4 fwht-fp32": (lambda: trb.quantize_packed(x, "mxfp4"),
                                     lambda: trb.quantize_packed(x, "mxfp4", rht=te))}
        for spec, (plain, fused) in pairs.items():
            ts = np.array([(T(plain), T(fused)) for _ in range(repeat)])
            q = ts[:, 1] / ts[:, 0]
            log(f"  {spec}: plain {np.median(ts[:, 0]) * 1e3:.3f} ms, fused {np.median(ts[:, 1]) * 1e3:.3f} ms, "
                f"ratio {np.median(q):.3f} (min {q.min():.3f}, max {q.max():.3f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--only", default="check,full,time")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the headline plain / fused timings")
    ap.add_argument("--rows", choices=("default", "plain", "pair"), default="default",
                    help="the fused kernel's operand rows for both block sizes (triton_rht_mma.FUSED_PAIR)")
    args = ap.parse_args()
    if args.rows != "default":
        rm.FUSED_PAIR = {16: args.rows == "pair", 32: args.rows == "pair"}
    only = set(args.only.split(","))
    log(f"{torch.cuda.get_device_name() if DEV == 'cuda' else 'cpu (interpreter)'}, torch {torch.__version__}, mma arith here: {rm.mma_arith()}")
    failures = []
    if "check" in only:
        check(failures)
    x = None
    if only & {"full", "time"}:
        g = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn((args.size, args.size), device=DEV, generator=g).to(torch.bfloat16)
    if "full" in only:
        check_full(x, failures)
    if "time" in only:
        time_all(x, args.iters, failures, args.repeat)
    if failures:
        log(f"FAILURES: {len(failures)}: {failures[:20]}")
        sys.exit(1)
    log("all checks equal")


if __name__ == "__main__":
    main()
