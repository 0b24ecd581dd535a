"""Where the time of a public ``fp4spec.matmul`` call goes on the GPU: the kernels it
launches, their device times (torch.profiler) and the call's wall time, per scheme and model.

    python benchmarks/profile_gpu_matmul.py [--n 8192] [--models sm100-mxf4nvf4,sm90-bf16]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from gpu_timing import event_time, log

import fp4spec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--models", default="sm100-mxf4nvf4,sm90-bf16")
    args = ap.parse_args()
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    log(f"bf16 {n}^3: {event_time(lambda: a @ b.T, 10) * 1e3:.3f} ms")
    for scheme in ("nvfp4", "mxfp4"):
        qa, qb = fp4spec.quantize(a, scheme), fp4spec.quantize(b, scheme)
        for model in args.models.split(","):
            call = lambda: fp4spec.matmul(qa, qb, accumulator=model)  # noqa: E731
            call()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / 5
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                call()
                torch.cuda.synchronize()
            log(f"{scheme} {model}: {wall * 1e3:.3f} ms per call (wall, 5 calls)")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main()
