"""Where the host time of a warm public call goes (CUDA): floors and a cProfile of each call.

    python benchmarks/profile_gpu_host.py [--calls 2000] [--top 25]

Floors: the host time of an empty Triton kernel launch, of ``torch.empty``, of a one-element
torch op, of ``torch.compile``'d nothing. Then, for quantize nvfp4 / mxfp4 and dequantize of a
16 x 64 bf16 CUDA tensor, the host microseconds per call and cProfile's top functions by own
time and by cumulative time (what to cut to reach the 50 us target of a warm call).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch
import triton
import triton.language as tl

import fp4spec


@triton.jit
def _empty_kernel(p, n, BLOCK: tl.constexpr):
    pass


def host_us(fn, n=2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return t * 1e6


def profile(label, fn, calls, top):
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(top)
        text = s.getvalue()
        start = text.find("   ncalls")
        print(f"--- {label}: by {key} ({calls} calls)\n{text[start:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    buf = torch.empty(16, device="cuda")
    print(f"floor: empty triton launch {host_us(lambda: _empty_kernel[(1,)](buf, 16, BLOCK=16)):.1f} us")
    print(f"floor: torch.empty(16x32 uint8) {host_us(lambda: torch.empty((16, 32), dtype=torch.uint8, device='cuda')):.1f} us")
    print(f"floor: x.abs() {host_us(lambda: x.abs()):.1f} us")
    print(f"floor: torch.zeros(1) {host_us(lambda: torch.zeros(1, device='cuda')):.1f} us")
    q = {s: fp4spec.quantize(x, s) for s in ("nvfp4", "mxfp4")}
    calls = {
        "quantize nvfp4": lambda: fp4spec.quantize(x, "nvfp4"),
        "quantize mxfp4": lambda: fp4spec.quantize(x, "mxfp4"),
        "dequantize nvfp4": lambda: fp4spec.dequantize(q["nvfp4"]),
        "dequantize mxfp4": lambda: fp4spec.dequantize(q["mxfp4"]),
    }
    for label, fn in calls.items():
        print(f"host {label}: {host_us(fn):.1f} us per call")
    for label, fn in calls.items():
        profile(label, fn, a.calls, a.top)


if __name__ == "__main__":
    main()
