"""float32 -> e2m1 RNE encode through the emulator vs ml_dtypes' cast, measured in one run.

    python benchmarks/bench_encode_cpu.py [--n 16777216] [--repeat 7]

Prints M elements/s for each and the ratio fp4spec / ml_dtypes (>= 1 means as fast or faster),
plus a float32 copy as the memory baseline. Exits non-zero if the codes differ.
"""

import argparse
import platform
import time

import ml_dtypes
import numpy as np

import fp4spec


def best_time(fn, repeat):
    fn()  # warm up (threshold tables are built once per format)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16 * 2**20)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.n) * 2).astype(np.float32)
    ours = fp4spec.encode(x, "e2m1", nan="signed_zero")
    theirs = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    if not np.array_equal(ours, theirs):
        raise SystemExit("codes differ from ml_dtypes")
    t_copy = best_time(lambda: x.copy(), args.repeat)
    t_ml = best_time(lambda: x.astype(ml_dtypes.float4_e2m1fn), args.repeat)
    t_ours = best_time(lambda: fp4spec.encode(x, "e2m1"), args.repeat)
    rate = lambda t: args.n / t / 1e6
    print(f"machine: {platform.machine()} {platform.processor() or ''} numpy {np.__version__} ml_dtypes {ml_dtypes.__version__}")
    print(f"n = {args.n:,} float32 elements, best of {args.repeat}")
    print(f"{'float32 copy':<28}{rate(t_copy):10.1f} M el/s")
    print(f"{'ml_dtypes astype(e2m1)':<28}{rate(t_ml):10.1f} M el/s")
    print(f"{'fp4spec.encode(e2m1, rne)':<28}{rate(t_ours):10.1f} M el/s")
    print(f"ratio fp4spec / ml_dtypes: {t_ml / t_ours:.2f}x")


if __name__ == "__main__":
    main()
