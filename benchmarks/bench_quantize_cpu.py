"""MXFP4 and NVFP4 quantize of float32 through the emulator vs torchao's CPU eager path, one run.

    python benchmarks/bench_quantize_cpu.py [--rows 4096] [--cols 4096] [--rounds 7]

Baselines (torchao 0.18, CPU eager, torch's default thread count):

* MXFP4: ``torchao.prototype.mx_formats.mx_tensor.to_mx(t, float4_e2m1fn_x2, 32, FLOOR)``
* NVFP4: ``nvfp4_quantize(t, 16, per_tensor_amax_to_scale(t.abs().max()))`` (two-level,
  the per-tensor amax included, as fp4spec's quantize computes it too)

fp4spec: ``fp4spec.quantize(x, "mxfp4")`` (OCP profile), ``fp4spec.quantize(x, "nvfp4")``
(TE profile) and both with ``profile="torchao"``. Before timing, the torchao-profile results
are checked bit-equal to torchao's (scales and codes); the script exits non-zero otherwise.

Timings are interleaved (one call of each function per round, best of ``--rounds``) so that
a busy machine slows all of them alike; the ratio is fp4spec's rate over torchao's.
"""

import argparse
import datetime
import os
import platform
import time

import numpy as np

import fp4spec


def _torchao():
    import torch
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    def ao_mxfp4(t):
        return to_mx(t, torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)

    def ao_nvfp4(t):
        return nvfp4_quantize(t, 16, per_tensor_amax_to_scale(t.abs().max()))

    return torch, unpack_uint4, ao_mxfp4, ao_nvfp4


def check_bit_exact(x, t, torch, unpack_uint4, ao_mxfp4, ao_nvfp4):
    s, d = ao_mxfp4(t)
    q = fp4spec.quantize(x, "mxfp4", profile="torchao")
    ok_mx = (np.array_equal(q.scales, s.view(torch.uint8).numpy())
             and np.array_equal(q.codes, unpack_uint4(d.view(torch.uint8)).numpy().reshape(x.shape)))
    s, d = ao_nvfp4(t)
    q = fp4spec.quantize(x, "nvfp4", profile="torchao")
    ok_nv = (np.array_equal(q.scales, s.view(torch.uint8).numpy())
             and np.array_equal(q.codes, unpack_uint4(d).numpy().reshape(x.shape)))
    return ok_mx, ok_nv


def interleaved_best(fns: dict, rounds: int) -> dict:
    for fn in fns.values():
        fn()  # warm up
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch, unpack_uint4, ao_mxfp4, ao_nvfp4 = _torchao()
    import torchao

    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    t = torch.from_numpy(x)
    ok_mx, ok_nv = check_bit_exact(x, t, torch, unpack_uint4, ao_mxfp4, ao_nvfp4)
    fns = {
        "torchao to_mx FLOOR (MXFP4)": lambda: ao_mxfp4(t),
        "fp4spec mxfp4 (ocp)": lambda: fp4spec.quantize(x, "mxfp4"),
        "fp4spec mxfp4 (torchao)": lambda: fp4spec.quantize(x, "mxfp4", profile="torchao"),
        "torchao nvfp4_quantize": lambda: ao_nvfp4(t),
        "fp4spec nvfp4 (te)": lambda: fp4spec.quantize(x, "nvfp4"),
        "fp4spec nvfp4 (torchao)": lambda: fp4spec.quantize(x, "nvfp4", profile="torchao"),
    }
    best = interleaved_best(fns, args.rounds)
    rate = {name: x.size / tb / 1e6 for name, tb in best.items()}
    print(f"date: {datetime.date.today().isoformat()}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus; "
          f"python {platform.python_version()} numpy {np.__version__} torch {torch.__version__} "
          f"(threads {torch.get_num_threads()}) torchao {torchao.__version__}")
    print(f"x: {args.rows} x {args.cols} float32 = {x.size:,} elements, best of {args.rounds} interleaved rounds")
    print(f"bit-exact vs torchao (profile='torchao'): mxfp4 {ok_mx}, nvfp4 {ok_nv}")
    for name, r in rate.items():
        print(f"{name:<30}{r:10.1f} M el/s")
    mx_ao, nv_ao = rate["torchao to_mx FLOOR (MXFP4)"], rate["torchao nvfp4_quantize"]
    print(f"ratio mxfp4 (ocp) / torchao:     {rate['fp4spec mxfp4 (ocp)'] / mx_ao:.2f}x")
    print(f"ratio mxfp4 (torchao) / torchao: {rate['fp4spec mxfp4 (torchao)'] / mx_ao:.2f}x")
    print(f"ratio nvfp4 (te) / torchao:      {rate['fp4spec nvfp4 (te)'] / nv_ao:.2f}x")
    print(f"ratio nvfp4 (torchao) / torchao: {rate['fp4spec nvfp4 (torchao)'] / nv_ao:.2f}x")
    if not (ok_mx and ok_nv):
        raise SystemExit("fp4spec's torchao profile differs from torchao")


if __name__ == "__main__":
    main()
