"""GPU check and benchmark of the triton and torch backends (run on a CUDA device).

1. Bit-exactness: triton and torch backends against the numpy emulator on an adversarial
   bf16 tensor (every catalogued scheme the backends claim, RNE and SR with given bits,
   rowwise and columnwise), and triton against the torch backend on the full benchmark
   tensor. Any difference: exit status 1.
2. Timing (CUDA events, median of --iters runs, after warm-up) on a 16384 x 16384 bf16
   tensor: device-to-device copy (the baseline, same run), quantize NVFP4 (with and without
   the global-amax pass), MXFP4, NVFP4 columnwise, dequantize, torchao when importable.
   Bytes per element: quantize 2 read + 0.5 written + scale bytes; dequantize 0.5 read +
   scale bytes + 4 written (float32 out); the amax pass adds 2 read.

    python benchmarks/bench_gpu_quantize.py [--size 16384] [--iters 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch

import fp4spec
from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb


def adversarial_bf16(rows, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    e = torch.randint(-135, 120, (rows, cols // 16), generator=g).float()
    x = x * torch.exp2(e).repeat_interleave(16, dim=1)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.5, 3.0, 6.0, 7.0, 6.5, 5.5, 4.5, 3.25])
    x[::4, :16] = mids * 2.0 ** 3
    x[5, 32:48] = 0.0
    x[6, 32:48] = -0.0
    x[10, 3] = float("nan")
    x[11, 40] = float("inf")
    return x.to(torch.bfloat16)


SCHEMES = ["nvfp4", "nvfp4_2d", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"]


def check(failures):
    from fp4spec.backends.base import resolve_scheme

    xt = adversarial_bf16(512, 1024).cuda()
    xf = xt.float().cpu().numpy()
    rb = torch.randint(0, 256, xt.shape, dtype=torch.int32).cuda()
    tbk, trk = tb.TorchBackend("cuda"), trb.TritonBackend("cuda")
    n = 0
    for spec in SCHEMES:
        sch = resolve_scheme(spec)
        for rounding in ("rne", "sr"):
            for axis in (-1, 0):
                kw = {"rbits": rb.cpu().numpy().astype(np.uint32), "sr_bits": 8} if rounding == "sr" else {}
                ref = fp4spec.quantize(xf, sch, axis=axis, rounding=rounding, **kw)
                for b in (tbk, trk):
                    q = b.quantize(xf, sch, axis=axis, rounding=rounding, **kw)
                    n += 1
                    if not q.equals(ref):
                        failures.append(f"{b.name} {spec} {rounding} axis={axis}")
                want = fp4spec.dequantize(ref)
                if not same_f32(trk.dequantize(ref), want):
                    failures.append(f"triton dequantize {spec} {rounding} axis={axis}")
                if not same_f32(tbk.dequantize(ref), want):
                    failures.append(f"torch dequantize {spec} {rounding} axis={axis}")
        # packed bf16 path on the device
        out = trb.quantize_packed(xt, sch)
        ref = fp4spec.quantize(xf, sch)
        if not (np.array_equal(out["packed"].cpu().numpy(), ref.pack())
                and np.array_equal(out["scales"].cpu().numpy(), ref.scales)):
            failures.append(f"triton packed bf16 {spec}")
    print(f"emulator checks: {n} quantize comparisons + dequantize, {len(failures)} failures")


def same_f32(a, b) -> bool:
    """Equal bit patterns, NaN matching NaN (a NaN's sign and payload are not specified: x86
    gives 0xFFC00000 for 0 * Inf, CUDA the canonical 0x7FFFFFFF)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a.view(np.uint32)[~na], b.view(np.uint32)[~nb]))


def cuda_time(fn, iters):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    failures = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {trb.triton.__version__}")
    if not args.no_check:
        check(failures)
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    # full-tensor cross-check: triton == torch backend (itself equal to the emulator above)
    for spec in ("nvfp4", "mxfp4"):
        o = trb.quantize_packed(x, spec)
        r = tb.quantize_tensors(x, spec)
        rp = r["codes"].reshape(n, n // 2, 2)
        rp = rp[..., 0] | (rp[..., 1] << 4)
        same = torch.equal(o["packed"], rp) and torch.equal(o["scales"], r["scales"].reshape(n, -1))
        if r["global_scale"] is not None:
            same = same and torch.equal(o["global_scale"].view(torch.int32), r["global_scale"].view(torch.int32))
        if not same:
            failures.append(f"full {n}x{n} triton != torch {spec}")
        del o, r, rp
    torch.cuda.empty_cache()
    y = torch.empty_like(x)
    rows = []
    t_copy = cuda_time(lambda: y.copy_(x), args.iters)
    bw_copy = 4 * ne / t_copy
    rows.append(("copy bf16 (baseline)", t_copy, 4 * ne))

    if args.tune:
        best = None
        for BM, BN, w in [(16, 128, 4), (32, 128, 4), (32, 256, 8), (64, 128, 8), (16, 256, 4), (64, 64, 4), (8, 256, 4)]:
            sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
            t = cuda_time(lambda: trb.quantize_packed(x, "nvfp4", s_enc_dec=sed, BM=BM, BN=BN, num_warps=w), 20)
            print(f"  tune nvfp4 BM={BM} BN={BN} warps={w}: {2.5625 * ne / t / 1e12:.2f} TB/s")
            if best is None or t < best[0]:
                best = (t, BM, BN, w)
        _, trb.DEFAULT_BM, trb.DEFAULT_BN, trb.DEFAULT_WARPS = best
        print(f"  chosen BM={best[1]} BN={best[2]} warps={best[3]}")

    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    q_nv = 2 * ne + ne // 2 + ne // 16
    q_mx = 2 * ne + ne // 2 + ne // 32
    rows.append(("quantize nvfp4 (tensor scale given)", cuda_time(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed), args.iters), q_nv))
    rows.append(("quantize nvfp4 (incl. amax pass)", cuda_time(lambda: trb.quantize_packed(x, nv), args.iters), q_nv))
    rows.append(("amax pass alone", cuda_time(lambda: trb.global_amax(x, n, n, n, 1), args.iters), 2 * ne))
    rows.append(("quantize nvfp4_2d (tensor scale given)", cuda_time(lambda: trb.quantize_packed(x, "nvfp4_2d", s_enc_dec=sed), args.iters), q_nv))
    rows.append(("quantize nvfp4 columnwise (given)", cuda_time(lambda: trb.quantize_packed(x, nv, axis=0, s_enc_dec=sed), args.iters), q_nv))
    rows.append(("quantize mxfp4", cuda_time(lambda: trb.quantize_packed(x, "mxfp4"), args.iters), q_mx))
    rows.append(("quantize mxfp4 columnwise", cuda_time(lambda: trb.quantize_packed(x, "mxfp4", axis=0), args.iters), q_mx))
    o = trb.quantize_packed(x, nv)
    rows.append(("dequantize nvfp4 -> fp32", cuda_time(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv), args.iters), ne // 2 + ne // 16 + 4 * ne))
    del o
    rows.append(("torch backend quantize nvfp4", cuda_time(lambda: tb.quantize_tensors(x, nv), 3), q_nv))
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

        f = torch.compile(lambda t: NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max())))
        rows.append(("torchao NVFP4Tensor.to_nvfp4 (compiled)", cuda_time(lambda: f(x), 10), q_nv))
    except Exception as exc:  # noqa: BLE001
        print(f"torchao: not benchmarked ({type(exc).__name__}: {str(exc)[:100]})")

    print(f"\n{'kernel':<42} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
    for name, t, nbytes in rows:
        bw = nbytes / t
        print(f"{name:<42} {t * 1e3:8.3f} {bw / 1e12:7.2f} {100 * bw / bw_copy:6.1f}%")
    if failures:
        print(f"\nBIT-EXACTNESS FAILURES ({len(failures)}):\n  " + "\n  ".join(failures[:20]))
        sys.exit(1)
    print("\nall outputs bit-exact with the emulator")


if __name__ == "__main__":
    main()
