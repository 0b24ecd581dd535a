"""Check ``backend="auto"`` on CUDA tensors (run on a GPU machine; exit 1 on any failure).

For each request: which backend ``auto`` picks, that the results are torch tensors on the
input's device, and that they are bit-equal to the numpy emulator on the same values.

    python benchmarks/check_gpu_auto.py
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import fp4spec

from fp4spec.rht import RHT

MMA = RHT.te(arith="mma:sm90-bf16")

# (scheme, rounding, backend auto must pick on CUDA[, rht]); the mma RHT: triton on Hopper
CASES = [
    ("nvfp4", "rne", "triton"),
    ("nvfp4", "sr", "triton"),
    ("mxfp4", "rne", "triton"),
    ("mxfp4:scale_rule=rceil", "rne", "triton"),
    ("nvfp4_2d", "rne", "triton"),
    ("ufp4", "rne", "triton"),
    ("nvint4", "rne", "triton"),
    ("nvfp4", "rna", "torch"),  # the triton kernels round rne and sr; torch every mode
    ("hif4", "rne", "torch"),
    ("mxfp6_e2m3", "rne", "torch"),
    ("mxfp8_e4m3", "rto", "torch"),
    ("nvfp4", "rne", "triton", "te"),  # fwht-fp32: triton (fused) before torch
    ("mxfp4", "rne", "triton", MMA),  # mma:sm90-bf16: triton on Hopper, else numpy
    ("nvfp4", "sr", "triton", MMA),
]


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(256, 512, generator=g) * torch.exp2(torch.randint(-20, 20, (256, 1), generator=g).float()))
    x = x.to(torch.bfloat16).cuda()
    xf = x.float().cpu().numpy()
    rb = torch.randint(0, 256, x.shape, generator=g, dtype=torch.int32)
    fails = 0
    for spec, rounding, want, *rest in CASES:
        name, _, rule = spec.partition(":scale_rule=")
        over = {"scale_rule": rule} if rule else {}
        if rest:
            over["rht"] = rest[0]
        kw = {"rbits": rb.cuda(), "sr_bits": 8} if rounding == "sr" else {}
        if rest and rest[0] is MMA and torch.cuda.get_device_capability()[0] != 9:
            want = "numpy"  # the sm90-bf16 model is Hopper's MMA only
        picked = fp4spec.select_backend(x, name, rounding=rounding, **over)
        q = fp4spec.quantize(x, name, rounding=rounding, **kw, **over)
        ref = fp4spec.quantize(xf, name, rounding=rounding, backend="numpy",
                               **({"rbits": rb.numpy().astype(np.uint32), "sr_bits": 8} if rounding == "sr" else {}),
                               **over)
        on_dev = q.codes.device.type == "cuda" and q.scales.device.type == "cuda"
        same = (np.array_equal(q.codes.cpu().numpy(), ref.codes) and np.array_equal(q.scales.cpu().numpy(), ref.scales)
                and (ref.global_scale is None or np.float32(q.global_scale.cpu()).tobytes()
                     == np.float32(ref.global_scale).tobytes()))
        ok = picked == want and q.backend == want and on_dev and same
        fails += not ok
        tag = "" if not rest else f" rht={'te' if isinstance(rest[0], str) else 'mma'}"
        print(f"{spec + tag:24s} {rounding:3s} auto->{picked:7s} (want {want:7s}) ran={q.backend:7s} "
              f"cuda={on_dev} equal={same} {'ok' if ok else 'FAIL'}")
    print(f"{len(CASES)} requests, {fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
