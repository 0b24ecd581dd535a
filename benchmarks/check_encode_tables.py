"""Every float32 bit pattern through the table encoder: equal to ml_dtypes and to the general encoder.

    python benchmarks/check_encode_tables.py [--configs e2m1:rto int4:rdn ...]

The 2^32 patterns run in slices of 2^24. For each: ``fp4spec.encode(x, "e2m1",
nan="signed_zero")`` (the table path) against ``x.astype(ml_dtypes.float4_e2m1fn)``, and for
each ``format:mode`` of ``--configs`` the table path (``nan="max"``) against the general
threshold encoder (:func:`fp4spec.emulator.elements.encode_general`). Prints the mismatch count
(exit status 1 if any) and the time taken. Several minutes on 2 cores.
"""

import argparse
import time

import ml_dtypes
import numpy as np

import fp4spec
from fp4spec.emulator.elements import encode, encode_general

SLICE = 1 << 24


def mismatches(x: np.ndarray, configs) -> int:
    bad = int(np.count_nonzero(encode(x, "e2m1", nan="signed_zero") != x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)))
    for name, mode in configs:
        fmt = fp4spec.get_format(name)
        want = encode_general(x, fmt, mode, None, 8, "saturate", "max", "preserve", "overflow")
        bad += int(np.count_nonzero(encode(x, fmt, mode, nan="max") != want))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=["e2m1:rto", "int4:rdn", "e3m2:rna", "e1m2:rup"],
                    help="format:mode pairs checked against the general encoder")
    args = ap.parse_args()
    configs = [tuple(c.split(":")) for c in args.configs]
    t0 = time.perf_counter()
    bad = 0
    for start in range(0, 1 << 32, SLICE):
        bits = np.arange(start, start + SLICE, dtype=np.uint64).astype(np.uint32)
        bad += mismatches(bits.view(np.float32), configs)
    print(f"every float32 pattern: e2m1 rne vs ml_dtypes {ml_dtypes.__version__}, "
          f"{' '.join(args.configs) or 'no other configs'} vs the general encoder: {bad} mismatches, "
          f"{time.perf_counter() - t0:.0f} s")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
