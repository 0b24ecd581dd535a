"""GPU probe: the sign of zero in Hopper's bf16 MMA with an FP32 accumulator (wgmma and mma.sync).

Why: ``benchmarks/bench_gpu_gemm.py`` found one output (subnormal family, mxfp4, 128 x 192 x
512, (119, 125)) where the H200 gave +0.0 and the ``sm90-bf16`` model (then with the
MMA-Sim fork's rounding) -0.0: the last k = 16 step had acc = +0 and a negative product sum
of about 2^-154.75, which RZ rounds to zero. This script pins the rule down with hand-built bf16 operands fed straight
into a minimal ``tl.dot`` kernel, and through ``fp4spec.backends.triton.gemm.matmul_packed``.

Each probe is one output element: a row of A and a row of B (K bf16 values each) and the
initial accumulator c; the kernel computes ``acc = c; for each K step: acc = tl.dot(a, b^T,
acc)``. It runs on three paths: ``wgmma`` (64 x 64 tile, one dot per k = 16),
``wgmma-bk64`` (one dot of four k = 16 instructions), ``mma`` (16 x 16 tile, one warp:
mma.sync m16n8k16); the PTX of each compiled kernel is checked for the instruction.

Models (the "model" columns): the sm90-bf16 accumulator model with ``zero_sign="signed"``
(the MMA-Sim fork before 2.1.1: -0.0 for a negative sum that rounds to zero) and
``zero_sign="positive"`` (every zero a step returns is +0.0; MMA-Sim 2.1.1 and the
catalogue), computed by the vectorized emulator and checked equal to the scalar reference.
Note: with a zero accumulator the zero terms get exponent e_zero = -133, so a product below
2^-158 (= 2^(-133 - 25)) is truncated away entirely; only products in [2^-158, 2^-149) make
a nonzero sum that rounds to zero.

Output: one line per probe and path: ``path probe | gpu bits | signed | positive | ieee-rz |
inputs`` with ``*`` after a column that differs from the GPU (``ieee-rz``, a yardstick and
not a model: the exact step sum rounded toward zero with IEEE 754's zero signs, -0 + -0 =
-0 included); then a verdict per model. Exit status:
0 when one of the two models matches every probe, 1 otherwise. JSON to $OUT when set.

    python benchmarks/probe_gpu_zero_sign.py            # on the H200 (< 60 s)
    python benchmarks/probe_gpu_zero_sign.py --cpu-smoke  # the logic under TRITON_INTERPRET=1
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from fractions import Fraction

import numpy as np

if "--cpu-smoke" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import ml_dtypes  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec import gemm_reference as R  # noqa: E402
from fp4spec.matmul_operands import MatmulOperands  # noqa: E402
from fp4spec.emulator import gemm as E  # noqa: E402

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
BASE = fp4spec.get_accumulator("sm90-bf16")
MODELS = {z: dataclasses.replace(BASE, name=f"sm90-bf16/{z}", zero_sign=z) for z in ("signed", "positive")}
T0 = time.time()


# =====================================================================================
# Kernel
# =====================================================================================

@triton.jit
def probe_kernel(a_ptr, b_ptr, c_ptr, out_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 F32: tl.constexpr):
    """out (BM x BN, int32 bits) = c + A . B^T, A (BM x K) and B (BN x K) bf16 given as int16
    bit patterns, c float32 loaded from memory (so the first MMA reads it: scale-d = 1)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    acc = tl.load(c_ptr + rm[:, None] * BN + rn[None, :])
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :])
        b = tl.load(b_ptr + rn[:, None] * K + kk[None, :])
        if F32:  # interpreter: its tl.dot mishandles bf16 (the numbers are numpy's then)
            a = (a.to(tl.int32) << 16).to(tl.float32, bitcast=True)
            b = (b.to(tl.int32) << 16).to(tl.float32, bitcast=True)
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
        else:
            acc = tl.dot(a.to(tl.bfloat16, bitcast=True), tl.trans(b.to(tl.bfloat16, bitcast=True)), acc)
    tl.store(out_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.int32, bitcast=True))


#: path -> (BM = BN, BK, num_warps, instruction expected in the PTX)
PATHS = {"wgmma": (64, 16, 4, "wgmma"), "wgmma-bk64": (64, 64, 4, "wgmma"), "mma": (16, 16, 1, "mma.sync")}


def bf16_bits(x) -> np.ndarray:
    """int16 bit patterns of float values that are exact in bf16 (checked)."""
    x = np.asarray(x, np.float64)
    b = x.astype(ml_dtypes.bfloat16)
    if not np.array_equal(b.astype(np.float64), x) or not np.array_equal(np.signbit(b), np.signbit(x)):
        raise ValueError(f"not exact in bf16: {x}")
    return b.view(np.int16)


def run_path(path: str, a: np.ndarray, b: np.ndarray, c: float) -> tuple[int, str]:
    """(float32 bits of out[0, 0], instruction seen in the PTX or '?') for one probe."""
    bm, bk, warps, _ = PATHS[path]
    k = a.size
    A = np.zeros((bm, k), np.int16)
    B = np.zeros((bm, k), np.int16)
    A[0], B[0] = bf16_bits(a), bf16_bits(b)
    C = np.zeros((bm, bm), np.float32)
    C[0, 0] = c
    out = torch.empty((bm, bm), dtype=torch.int32, device=DEV)
    ker = probe_kernel[(1,)](torch.from_numpy(A).to(DEV), torch.from_numpy(B).to(DEV), torch.from_numpy(C).to(DEV),
                             out, k, BM=bm, BN=bm, BK=bk, F32=SMOKE, num_warps=warps)
    inst = "?"
    try:
        ptx = ker.asm["ptx"]
        inst = "wgmma" if "wgmma.mma_async" in ptx else ("mma.sync" if "mma.sync" in ptx else "none")
    except Exception:
        pass
    return int(out[0, 0].item()) & 0xFFFFFFFF, inst


# =====================================================================================
# Models
# =====================================================================================

def ref_row(v: np.ndarray, fmt, sf) -> R.RefRow:
    """A scalar-reference row of exact bf16 values with one block scale of 1."""
    return R.RefRow(tuple(Fraction(float(x)) for x in v), tuple(bool(np.signbit(x)) for x in v), (Fraction(1),),
                    v.size, fmt, sf)


def model_bits(a: np.ndarray, b: np.ndarray, c: float) -> dict[str, int]:
    """sm90-bf16 with each zero_sign: the emulator's bits (checked equal to the scalar reference)."""
    k = a.size
    out = {}
    for z, model in MODELS.items():
        ops = MatmulOperands(1, 1, k, k, None, np.full((1, 1), c, np.float32))
        fmt, sf = fp4spec.get_scheme("mxfp4").element, fp4spec.get_scheme("mxfp4").scale
        oa = E.Operand(np.asarray(a, np.float64)[None, :], np.ones((1, 1)), k, fmt, sf)
        ob = E.Operand(np.asarray(b, np.float64)[None, :], np.ones((1, 1)), k, fmt, sf)
        got = E.matmul_fdpa(oa, ob, ops, model)[0, 0]
        ref = np.float32(R.dot_fdpa(ref_row(a, fmt, sf), ref_row(b, fmt, sf), float(np.float32(c)), None, model))
        gb, rb = int(np.float32(got).view(np.uint32)), int(ref.view(np.uint32))
        if gb != rb:
            raise AssertionError(f"emulator 0x{gb:08X} != scalar reference 0x{rb:08X} ({z})")
        out[z] = gb
    return out


def ieee_rz_bits(a: np.ndarray, b: np.ndarray, c: float) -> int:
    """Not a model, a yardstick: per k = 16 step the exact sum of the products and acc,
    rounded once toward zero with IEEE 754's zero signs (an exact zero sum is -0 only when
    every addend is -0; an underflow keeps the sum's sign); no alignment truncation."""
    acc = float(np.float32(c))
    for k0 in range(0, a.size, 16):
        prods = [float(x) * float(y) for x, y in zip(a[k0:k0 + 16], b[k0:k0 + 16])]
        total = sum((Fraction(x) * Fraction(y) for x, y in zip(a[k0:k0 + 16], b[k0:k0 + 16])), Fraction(acc))
        if total == 0:
            neg = all(p == 0 and np.signbit(p) for p in prods) and np.signbit(acc)
            acc = -0.0 if neg else 0.0
        else:
            acc = R.round_f32(total, "rz")
    return int(np.float32(acc).view(np.uint32))


# =====================================================================================
# Probes
# =====================================================================================

def p2(e: int) -> float:
    return float(2.0 ** e)


def probe(label, pairs, c=0.0, k=16):
    """A probe from (a, b) value pairs placed at K = 0, 1, ... (the rest +0), as arrays."""
    a = np.zeros(k)
    b = np.zeros(k)
    for i, (x, y) in enumerate(pairs):
        a[i], b[i] = x, y
    return label, a, b, float(c)


def probes() -> list:
    t = p2(-75)   # t * t = 2^-150, t * 2^-80 = 2^-155: products in [2^-158, 2^-149)
    ps = [
        # (a) one negative product: below 2^-158 (truncated away) and in the window
        probe("a1 -2^-200, acc +0", [(-p2(-100), p2(-100))]),
        probe("a2 -2^-200, acc -0", [(-p2(-100), p2(-100))], c=-0.0),
        probe("a3 -2^-150, acc +0", [(-t, t)]),
        probe("a4 -2^-150, acc -0", [(-t, t)], c=-0.0),
        probe("a5 -2^-155, acc +0", [(-t, p2(-80))]),
        probe("a6 -2^-155, acc -0", [(-t, p2(-80))], c=-0.0),
        # (b) several negative tiny products (sum -3 * 2^-152 ~ 2^-150.4)
        probe("b1 3x -2^-152, acc +0", [(-t, p2(-77))] * 3),
        probe("b2 3x -2^-152, acc -0", [(-t, p2(-77))] * 3, c=-0.0),
        probe("b3 -2^-150 + 2^-152 + 0 ..., acc +0", [(-t, t), (t, p2(-77))]),
        # (c) all products -0
        probe("c1 all -0 products, acc +0", [(-0.0, 1.0)] * 16),
        probe("c2 all -0 products, acc -0", [(-0.0, 1.0)] * 16, c=-0.0),
        probe("c3 +0 products, acc -0", [], c=-0.0),
        # (d) exact cancellation
        probe("d1 1 - 1, acc +0", [(1.0, 1.0), (-1.0, 1.0)]),
        probe("d2 1 - 1, acc -0", [(1.0, 1.0), (-1.0, 1.0)], c=-0.0),
        probe("d3 acc 1, product -1", [(-1.0, 1.0)], c=1.0),
        probe("d4 acc -2^-149, product 2^-149", [(p2(-74), p2(-75))], c=-p2(-149)),
        # (e) negative subnormal results
        probe("e1 -2^-140, acc +0", [(-p2(-70), p2(-70))]),
        probe("e2 -(2^-149 + 2^-151), acc +0", [(-p2(-74), p2(-75)), (-t, p2(-76))]),
        probe("e3 -2^-127, acc -0", [(-p2(-63), p2(-64))], c=-0.0),
        probe("e4 acc -2^-149 alone", [], c=-p2(-149)),
        probe("e5 acc 2^-140, product -2^-140 - 2^-150", [(-p2(-70), p2(-70)), (-t, t)], c=p2(-140)),
        # (f) positive counterparts
        probe("f1 +2^-150, acc +0", [(t, t)]),
        probe("f2 +2^-150, acc -0", [(t, t)], c=-0.0),
        probe("f3 +2^-140, acc +0", [(p2(-70), p2(-70))]),
        probe("f4 3x +2^-152, acc -0", [(t, p2(-77))] * 3, c=-0.0),
    ]
    # (g) chained k = 16 steps: the zero from the first step, then steps adding zeros / tiny values
    g = []
    for label, pairs, c, rest in [
        ("g1 -2^-150 then +0 steps, acc +0", [(-t, t)], 0.0, []),
        ("g2 -2^-150 then +0 steps, acc -0", [(-t, t)], -0.0, []),
        ("g3 -0 products x4 steps, acc -0", [(-0.0, 1.0)] * 16, -0.0, [(-0.0, 1.0)] * 48),
        ("g4 +0 steps then -2^-150 last", [], 0.0, None),
        ("g5 -2^-150 in each of 4 steps", [(-t, t)], 0.0, "each"),
    ]:
        a = np.zeros(64)
        b = np.zeros(64)
        for i, (x, y) in enumerate(pairs):
            a[i], b[i] = x, y
        if rest:
            if rest == "each":
                for s in range(1, 4):
                    a[16 * s], b[16 * s] = -t, t
            else:
                for i, (x, y) in enumerate(rest):
                    a[16 + i], b[16 + i] = x, y
        if rest is None:
            a[48], b[48] = -t, t
        g.append((label, a, b, float(c)))
    return ps + g


def bench_case() -> tuple:
    """The bench_gpu_gemm output that differed: row 119 of A, row 125 of B as bf16 operands, and c."""
    from fp4spec.conformance.matmul_properties import FAMILIES, GENERATORS

    fi = FAMILIES.index("subnormal")
    case = GENERATORS["subnormal"](np.random.default_rng(100 * fi), BASE, fp4spec.get_scheme("mxfp4"), 128, 192, 512)
    a = E._operands_rounded(E.operand(case.qa, BASE), fp4spec.accumulator_models.BF16).astype(np.float64)
    b = E._operands_rounded(E.operand(case.qb, BASE), fp4spec.accumulator_models.BF16).astype(np.float64)
    c = 0.0 if case.c is None else float(case.c[119, 125])
    return case, ("h1 bench subnormal mxfp4 (119, 125)", a[119], b[125], c)


def summary(a, b, c) -> str:
    p = a * b
    nz = np.flatnonzero(p)
    neg0 = int(np.count_nonzero((p == 0) & np.signbit(p)))
    tiny = ", ".join(f"{p[i]:+.3g}@{i}" for i in nz[:3]) + (" ..." if nz.size > 3 else "")
    return f"K={a.size} c={c!r} nonzero products {nz.size} [{tiny}] -0 products {neg0}"


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("no CUDA device: nothing to run (use --cpu-smoke for the logic)")
        return 1
    dev = "cpu (interpreter: numpy's dot, not the GPU)" if SMOKE else torch.cuda.get_device_name()
    print(f"device {dev}, torch {torch.__version__}, triton {triton.__version__}")
    case, h1 = bench_case()
    all_probes = probes() + [h1]
    rows = []
    miss = {z: 0 for z in MODELS}
    ieee_miss = 0
    insts = {}
    print(f"{'path':10} {'probe':44} | {'gpu':10} | {'signed':11} | {'positive':11} | {'ieee-rz':11} | inputs")
    for label, a, b, c in all_probes:
        want = model_bits(a, b, c)
        ieee = ieee_rz_bits(a, b, c)
        for path in PATHS:
            if path == "wgmma-bk64" and a.size % 64:
                continue
            got, inst = run_path(path, a, b, c)
            insts.setdefault(path, set()).add(inst)
            marks = {}
            for z, w in want.items():
                marks[z] = "" if w == got else "*"
                miss[z] += w != got
            ieee_miss += ieee != got
            print(f"{path:10} {label:44} | 0x{got:08X} | 0x{want['signed']:08X}{marks['signed']:1} | "
                  f"0x{want['positive']:08X}{marks['positive']:1} | 0x{ieee:08X}{'' if ieee == got else '*':1} | "
                  f"{summary(a, b, c)}")
            rows.append({"path": path, "probe": label, "gpu": got, "inst": inst, **{z: w for z, w in want.items()},
                         "ieee_rz": ieee, "inputs": summary(a, b, c)})
    # through the real kernel: matmul_packed on the bench case (prepass and fused, and a 16-row tile)
    from fp4spec.backends.triton import gemm as G

    want_pos = fp4spec.matmul(case.qa, case.qb, accumulator=MODELS["positive"], c=case.c)
    want_sig = fp4spec.matmul(case.qa, case.qb, accumulator=MODELS["signed"], c=case.c)
    for cfg in ("prepass-128x256", "fused-128x128"):
        got = G.matmul(case.qa, case.qb, c=case.c, config=cfg).view(np.uint32)
        d = {z: int(np.count_nonzero(got != w.view(np.uint32))) for z, w in (("signed", want_sig), ("positive", want_pos))}
        print(f"matmul_packed {cfg:18} bench subnormal mxfp4 128x192x512: (119, 125) gpu 0x{int(got[119, 125]):08X}; "
              f"outputs differing from signed {d['signed']}, from positive {d['positive']}")
        rows.append({"path": f"matmul_packed {cfg}", "probe": "bench subnormal", "gpu": int(got[119, 125]), **d})
        for z in d:
            miss[z] += d[z]
    from fp4spec.conformance.matmul_properties import make_operand

    qa16 = make_operand(np.asarray(case.qa.codes)[112:128], np.asarray(case.qa.scales)[112:128], "mxfp4")
    qb16 = make_operand(np.asarray(case.qb.codes)[120:136], np.asarray(case.qb.scales)[120:136], "mxfp4")
    c16 = None if case.c is None else np.ascontiguousarray(case.c[112:128, 120:136])
    got = G.matmul(qa16, qb16, c=c16).view(np.uint32)
    for z in MODELS:
        w = fp4spec.matmul(qa16, qb16, accumulator=MODELS[z], c=c16).view(np.uint32)
        n = int(np.count_nonzero(got != w))
        miss[z] += n
        print(f"matmul_packed 16x16 tile (mma.sync) rows 112.., cols 120..: (7, 5) gpu 0x{int(got[7, 5]):08X}; "
              f"outputs differing from {z} {n}")
    print(f"instructions in the PTX per path: { {p: sorted(v) for p, v in insts.items()} }")
    for path, (_, _, _, want_inst) in PATHS.items():
        if not SMOKE and insts.get(path) and insts[path] != {want_inst}:
            print(f"WARNING: path {path} compiled to {sorted(insts[path])}, not {want_inst}")
    for z in MODELS:
        print(f"verdict: zero_sign={z!r}: {miss[z]} differences" + ("  <- matches the GPU" if not miss[z] else ""))
    print(f"(yardstick, not a model: IEEE RZ of exact step sums differs on {ieee_miss} probe lines)")
    print(f"time {time.time() - T0:.1f} s")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "probe_gpu_zero_sign.json"), "w") as f:
            json.dump({"device": dev, "rows": rows, "misses": miss}, f, indent=1)
    return 0 if min(miss.values()) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
