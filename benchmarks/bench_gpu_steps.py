"""The certified GEMM's step kernel (sm100-mxf4nvf4) on the H200: variants of tile, warps and
the RZ addition, each checked against the emulator on sampled outputs, against bf16.

    python benchmarks/bench_gpu_steps.py [--n 8192] [--iters 5]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from gpu_timing import event_time, log

import fp4spec
from fp4spec.backends.triton import certify
from fp4spec.backends.triton import gemm as G

#: (tile: BM or (BM, BN), warps, add.rz instruction, steps per loop iteration)
VARIANTS = [((128, 64), 4, True, 1), ((128, 64), 4, True, 2), ((64, 128), 4, True, 1), ((64, 128), 4, True, 2),
            ((64, 64), 4, True, 2), ((128, 128), 8, True, 2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t_bf16 = event_time(lambda: a @ b.T, 10)
    log(f"bf16 {n}^3: {t_bf16 * 1e3:.3f} ms")
    model = fp4spec.get_accumulator("sm100-mxf4nvf4")
    for scheme in ("mxfp4", "nvfp4"):
        qa, qb = fp4spec.quantize(a, scheme), fp4spec.quantize(b, scheme)
        pa, sa, _ = G.pack_operand(qa)
        pb, sb, _ = G.pack_operand(qb)
        xa, xb = G.dequantize_bf16(pa, sa, scheme), G.dequantize_bf16(pb, sb, scheme)
        t_dq = event_time(lambda: (G.dequantize_bf16(pa, sa, scheme), G.dequantize_bf16(pb, sb, scheme)), 5)
        t_st = event_time(lambda: (certify.operand_stats(xa, sa, qa.scheme, model.k_step, "group"),
                                   certify.operand_stats(xb, sb, qb.scheme, model.k_step, "group")), 5)
        log(f"{scheme}: dequantize both {t_dq * 1e3:.3f} ms, statistics both {t_st * 1e3:.3f} ms")
        rows = np.sort(np.random.default_rng(0).choice(n, 64, replace=False))
        from fp4spec.emulator.gemm import matmul_block
        from fp4spec.matmul_operands import check_operands

        na, nb = qa.to_numpy(), qb.to_numpy()
        want = matmul_block(na, nb, model, check_operands(model, na, nb), rows, rows)
        g = None if qa.global_scale is None else G._g_tensor(check_operands(model, na, nb).g, "cuda")
        for tile, warps, asm, unroll in VARIANTS:
            def run():
                return certify.matmul_steps(xa, sa, xb, sb, (qa.scheme, qb.scheme), model, g=g, tile=tile,
                                            num_warps=warps, rz_asm=asm, unroll=unroll)
            out, cert, _ = run()
            bad = int((cert.bad != 0).sum())
            got = out[torch.as_tensor(rows, device="cuda")][:, torch.as_tensor(rows, device="cuda")].cpu().numpy()
            ok = np.array_equal(got.view(np.uint32), want.view(np.uint32))
            t = event_time(run, args.iters)
            log(f"{scheme} tile {tile} warps {warps} asm {asm} unroll {unroll}: {t * 1e3:.2f} ms ({t_bf16 / t:.0%} of bf16), "
                f"{bad} tiles unproved, sampled == emulator: {ok}")


if __name__ == "__main__":
    main()
