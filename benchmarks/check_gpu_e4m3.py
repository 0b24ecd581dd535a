"""Exhaustive GPU check of the hardware UE4M3 conversion used for two-level block scales
(``triton_rows_fast._ue4m3_cvt``: cvt.rn.satfinite.e4m3x2.f32) against the integer rounding
(``_ue4m3_sat``: the clamp at 448, NaN passing, then ``_ue4m3_rne``): every non-negative
float32 bit pattern 0x00000000 .. 0x7FFFFFFF (+0, subnormals, normals, +Inf, every NaN).
Exit status 1 on any difference. Needs a GPU of compute capability 8.9 or later.

    python benchmarks/check_gpu_e4m3.py [--stride 1]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import triton
import triton.language as tl

from fp4spec.backends.triton_rows_fast import _ue4m3_cvt, _ue4m3_sat

BLOCK = 4096


@triton.jit
def _check_kernel(out_ptr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    i = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)) * STRIDE
    bits = i.to(tl.int32)
    s = bits.to(tl.float32, bitcast=True)
    hw = _ue4m3_cvt(s)
    sw = _ue4m3_sat(s)
    bad = hw != sw
    n = tl.sum(bad.to(tl.int32), axis=0)
    tl.atomic_add(out_ptr, n)
    first = tl.min(tl.where(bad, bits, 0x7FFFFFFF), axis=0)
    tl.atomic_min(out_ptr + 1, first)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=int, default=1, help="check every STRIDE-th pattern (1: all 2^31)")
    args = ap.parse_args()
    n = (1 << 31) // args.stride
    out = torch.tensor([0, 0x7FFFFFFF], dtype=torch.int32, device="cuda")
    t = time.time()
    _check_kernel[(triton.cdiv(n, BLOCK),)](out, STRIDE=args.stride, BLOCK=BLOCK)
    torch.cuda.synchronize()
    bad, first = (int(v) for v in out.cpu())
    print(f"{torch.cuda.get_device_name()}: {n} non-negative float32 patterns, hardware UE4M3 vs integer "
          f"rounding: {bad} differ" + (f" (first 0x{first:08X})" if bad else "") + f" [{time.time() - t:.1f} s]")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
