"""The public calls on the CPU against ml_dtypes' elementwise cast, timed in the same rounds.

    python benchmarks/bench_cpu_api.py [--rows 4096] [--cols 4096] [--rounds 15]

Each case is a public call (``fp4spec.encode``, ``fp4spec.quantize``, ``fp4spec.dequantize``,
numpy in, numpy out) on a rows x cols tensor of standard-normal values times 2. Baselines,
the cheapest thing a user could compare with (ml_dtypes, elementwise, no scales):

* encode and quantize: ``x32.astype(ml_dtypes.float4_e2m1fn)`` on the float32 tensor (for
  bfloat16 cases too: the bf16 ratio against the same float32 cast shows what the input
  dtype costs);
* dequantize: ``codes.astype(np.float32)`` of the same tensor's ``float4_e2m1fn`` codes.

Every round times, for every case, the baseline and the case back to back (alternating
which goes first); a case's ratio is baseline time / case time in that round (> 1: faster
than ml_dtypes), reported as the median over the rounds with the min and max. bf16 vs
float32: the median over rounds of the float32 call's time / the bf16 call's time (>= 1:
bf16 no slower). Each call is timed twice over: the process's CPU time (``time.process_time``:
what the call costs, steadier on a machine shared with other work, where the scheduler's
time slices land on either side of a pair) and wall time; both ratios are printed.

Before timing, results are checked against ml_dtypes: encode's codes with
``nan="signed_zero"`` (ml_dtypes' NaN rule) on float32 and bfloat16 input, and dequantize of
MXFP4 against ml_dtypes' decode of the codes times ``2^(scale - 127)``. Exits non-zero on
any difference.
"""

import argparse
import datetime
import os
import platform
import statistics
import time

import ml_dtypes
import numpy as np

import fp4spec

E2M1 = ml_dtypes.float4_e2m1fn


def check_against_ml_dtypes(x32, xbf):
    """The codes and values the timed calls produce, against ml_dtypes' cast (bit for bit)."""
    for x in (x32, xbf):
        ours = fp4spec.encode(x, "e2m1", nan="signed_zero")
        if not np.array_equal(ours, x.astype(E2M1).view(np.uint8)):
            raise SystemExit(f"encode({x.dtype}) differs from ml_dtypes' cast")
    q = fp4spec.quantize(x32, "mxfp4")
    k = q.scheme.block_size
    blocks = q.codes.reshape(*q.codes.shape[:-1], -1, k).view(E2M1).astype(np.float32)
    pow2 = np.ldexp(np.float32(1.0), q.scales.astype(np.int32) - 127).astype(np.float32)
    expected = (blocks * pow2[..., None]).reshape(x32.shape)
    if not np.array_equal(fp4spec.dequantize(q).view(np.uint32), expected.view(np.uint32)):
        raise SystemExit("dequantize(mxfp4) differs from ml_dtypes' decode times the scales")


def cases(x32, xbf):
    """name -> (baseline key, call)."""
    q_mx = fp4spec.quantize(x32, "mxfp4")
    q_nv = fp4spec.quantize(x32, "nvfp4")
    return {
        "encode e2m1 f32, nan='signed_zero'": ("cast", lambda: fp4spec.encode(x32, "e2m1", nan="signed_zero")),
        "encode e2m1 f32 (defaults)": ("cast", lambda: fp4spec.encode(x32, "e2m1")),
        "encode e2m1 bf16 (defaults)": ("cast", lambda: fp4spec.encode(xbf, "e2m1")),
        "quantize mxfp4 f32": ("cast", lambda: fp4spec.quantize(x32, "mxfp4")),
        "quantize mxfp4 bf16": ("cast", lambda: fp4spec.quantize(xbf, "mxfp4")),
        "quantize nvfp4 f32": ("cast", lambda: fp4spec.quantize(x32, "nvfp4")),
        "quantize nvfp4 bf16": ("cast", lambda: fp4spec.quantize(xbf, "nvfp4")),
        "dequantize mxfp4 -> f32": ("decode", lambda: fp4spec.dequantize(q_mx)),
        "dequantize nvfp4 -> f32": ("decode", lambda: fp4spec.dequantize(q_nv)),
    }


BF16_PAIRS = (("encode e2m1 f32 (defaults)", "encode e2m1 bf16 (defaults)"),
              ("quantize mxfp4 f32", "quantize mxfp4 bf16"),
              ("quantize nvfp4 f32", "quantize nvfp4 bf16"))


def timed(fn) -> tuple[float, float]:
    """(CPU seconds of this process, wall seconds) of one call."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def run_rounds(calls: dict, baselines: dict, rounds: int):
    """Per case, per round: (baseline (cpu, wall), case (cpu, wall)), the pair timed back to back."""
    for fn in (*baselines.values(), *(fn for _, fn in calls.values())):
        fn()  # warm up (tables, imports)
    times = {name: [] for name in calls}
    for r in range(rounds):
        for name, (base, fn) in calls.items():
            if r % 2:
                tc = timed(fn)
                tb = timed(baselines[base])
            else:
                tb = timed(baselines[base])
                tc = timed(fn)
            times[name].append((tb, tc))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal((args.rows, args.cols)) * 2).astype(np.float32)
    xbf = x32.astype(ml_dtypes.bfloat16)
    codes = x32.astype(E2M1)
    check_against_ml_dtypes(x32, xbf)
    baselines = {"cast": lambda: x32.astype(E2M1), "decode": lambda: codes.astype(np.float32)}
    load0 = os.getloadavg()[0]
    calls = cases(x32, xbf)
    times = run_rounds(calls, baselines, args.rounds)
    load1 = os.getloadavg()[0]
    n = x32.size
    print(f"date: {datetime.date.today().isoformat()}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus; python "
          f"{platform.python_version()} numpy {np.__version__} ml_dtypes {ml_dtypes.__version__}; "
          f"load average {load0:.1f} before, {load1:.1f} after")
    print(f"x: {args.rows} x {args.cols} = {n:,} elements (standard normal x 2), {args.rounds} rounds; "
          f"checked against ml_dtypes: equal")
    print(f"{'case':<36}{'ratio vs ml_dtypes, median [min, max]':>48}{'best M el/s':>13}")
    print(f"{'':<36}{'CPU time':>24}{'wall time':>24}")
    for name, ts in times.items():
        cells = []
        for clock in (0, 1):
            r = [tb[clock] / tc[clock] for tb, tc in ts]
            cells.append(f"{statistics.median(r):.2f}x [{min(r):.2f}, {max(r):.2f}]")
        best = n / min(tc[1] for _, tc in ts) / 1e6
        print(f"{name:<36}{cells[0]:>24}{cells[1]:>24}{best:>13.1f}")
    for kind in ("cast", "decode"):
        tb = [tb[1] for name, (base, _) in calls.items() if base == kind for tb, _ in times[name]]
        print(f"baseline {kind!r}: best {n / min(tb) / 1e6:.1f} M el/s (wall)")
    for f32, bf in BF16_PAIRS:
        cells = [statistics.median(tf[clock] / tbf[clock] for (_, tf), (_, tbf) in zip(times[f32], times[bf]))
                 for clock in (0, 1)]
        print(f"bf16 vs float32, {f32.split(' f32')[0]}: f32 time / bf16 time = {cells[0]:.2f} CPU, "
              f"{cells[1]:.2f} wall (median; >= 1: bf16 no slower)")


if __name__ == "__main__":
    main()
