"""GPU check and benchmark of the fast rowwise quantize kernels (backends/triton_rows_fast.py).

1. Bit-exactness (any difference: exit status 1):
   * the fast E2M1 magnitude encoder against the v2 encoder over every non-NaN float32
     pattern (2^32 values, one kernel);
   * every variant against the numpy emulator on a small adversarial bf16 tensor (ties after
     scaling, tiny/huge/subnormal blocks, zeros and -0, NaN/Inf) and on every bf16 pattern;
   * every variant against ``triton_backend.quantize_packed``'s v2 kernels on the full N x N
     tensor (nvfp4 with the tensor scale given, mxfp4 floor and rceil).
2. Timing (CUDA-graph replay of 10 calls, median of --iters replays, as
   bench_gpu_quantize.py): an elementwise bf16 copy kernel (the denominator of "% copy"), the
   current kernels through quantize_packed, each variant x a few tiles. "kernel" rows launch
   the kernel alone (no host-side torch ops: constants prepared once); "call" rows the whole
   Python entry (as quantize_packed is timed). Bytes per element: 2 read + 0.5 written +
   scale bytes (1/16 nvfp4, 1/32 mxfp4).
3. SASS instructions per element of each compiled variant (cuobjdump from triton's bundle
   when present; static count of the kernel text, the exact-fallback branch excluded by
   also compiling without it).

    python benchmarks/bench_gpu_rows.py [--size 16384] [--iters 20] [--quick]

With $OUT set, the table goes to $OUT/bench_gpu_rows.txt and $OUT/bench_gpu_rows.json too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import triton
import triton.language as tl

import fp4spec
from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb
from fp4spec.backends import triton_rows_fast as rf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu_quantize import cuda_time  # noqa: E402  (graph replay, median: the same timer)

# (variant, BR, warps, programs per SM or None): about 8 per scheme
CONFIGS = [("tb", 128, 4, None), ("tb", 256, 4, None), ("tb", 256, 8, None), ("tb", 512, 8, None),
           ("pair", 256, 8, None), ("pair", 512, 8, None), ("tbp", 256, 4, 8), ("tbp", 512, 8, 4)]


# -- 1. checks ----------------------------------------------------------------------------------


@triton.jit
def _encoder_diff_kernel(out_ptr, BLOCK: tl.constexpr):
    """Count the non-NaN float32 patterns whose fast magnitude differs from the v2 encoder's."""
    pid = tl.program_id(0)
    b = (pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)).to(tl.int32)  # every 32-bit pattern
    y = b.to(tl.float32, bitcast=True)
    fast = rf._mag_y(y) - 0x4A800000
    exact = rf._e2m1_exact(y, True) & 7
    bad = (fast != exact) & (y == y)
    tl.atomic_add(out_ptr, tl.sum(bad.to(tl.int32), axis=0))


def check_encoder(failures):
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    BLOCK = 8192
    _encoder_diff_kernel[((1 << 32) // BLOCK,)](out, BLOCK=BLOCK, num_warps=8)
    n = int(out.item())
    print(f"encoder: fast == v2 over all 2^32 float32 patterns (NaN excluded): {n} differences")
    if n:
        failures.append(f"encoder: {n} float32 patterns differ")


def adversarial_bf16(rows, cols, seed=0):
    """As bench_gpu_quantize.adversarial_bf16, plus exact ties after scaling (blocks with amax
    6 * 2^j, elements at E2M1 midpoints * 2^j) and bf16-max blocks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    e = torch.randint(-135, 120, (rows, cols // 16), generator=g).float()
    x = x * torch.exp2(e).repeat_interleave(16, dim=1)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.5, 3.0, 6.0, -6.5, -5.5, -4.5, -3.25])
    for r in range(0, rows, 4):
        x[r, 16:32] = mids * 2.0 ** (r % 13 - 6)
        x[r, 32:48] = -mids.flip(0) * 2.0 ** (r % 11 - 5)
    x[5, 32:48] = 0.0
    x[6, 32:48] = -0.0
    x[7, 64:80] = 3.3895e38
    x[8, 64:80] = -3.3895e38 * torch.rand(16, generator=g)
    x[10, 3] = float("nan")
    x[11, 40] = float("inf")
    x[12, 100] = float("-inf")
    return x.to(torch.bfloat16)


SCHEMES = ["nvfp4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even", "mxfp4:profile=torchao"]


def _scheme(spec):
    name, *over = spec.split(":")
    return fp4spec.get_scheme(name, **dict(kv.split("=") for kv in over))


def _same(o, ref_packed, ref_scales):
    return bool(np.array_equal(o["packed"].cpu().numpy(), ref_packed) and np.array_equal(o["scales"].cpu().numpy(), ref_scales))


def check_emulator(failures):
    """Small tensors against the emulator: adversarial (two sizes; with and without the
    exact branch where the fast path must be exact) and every bf16 pattern."""
    import ml_dtypes

    n = 0
    allbf = torch.from_numpy(np.arange(1 << 16, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    tensors = {"adversarial": adversarial_bf16(512, 1024), "every bf16": allbf.reshape(128, 512)}
    finite = adversarial_bf16(256, 512, seed=3).float()
    finite = torch.where(torch.isfinite(finite), finite, torch.zeros_like(finite)).clamp(-2688.0, 2688.0)
    finite[0, 0] = 2688.0  # global amax 448 * 6, S_enc = 1: power-of-two TE scales keep the ties
    tensors["finite ties (fast path alone)"] = finite.to(torch.bfloat16)
    for tname, xt in tensors.items():
        xt = xt.cuda()
        xf = xt.float().cpu().numpy()
        assert not tname.startswith("every") or np.array_equal(
            xt.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32), xf.view(np.uint32))
        fast_alone = tname.startswith("finite")
        for spec in SCHEMES if tname == "adversarial" else SCHEMES[:2]:
            sch = _scheme(spec)
            ref = fp4spec.quantize(xf, sch)
            rp, rs = ref.pack(), ref.scales
            for v in rf.VARIANTS:  # default tiles (the full-tensor check covers the sweep's)
                o = rf.quantize_rows_fast(xt, sch, variant=v, exact_fallback=not fast_alone)
                n += 1
                if not _same(o, rp, rs):
                    failures.append(f"emulator {tname} {spec} {v}")
    print(f"emulator checks: {n} comparisons, {len(failures)} failures so far")


def check_full(x, sed, configs, failures):
    """Full tensor: every variant (default tile and the sweep's) == quantize_packed."""
    n = 0
    for spec in ("nvfp4", "mxfp4", "mxfp4:scale_rule=rceil"):
        sch = _scheme(spec)
        kw = {"s_enc_dec": sed} if sch.structure == "two_level" else {}
        ref = trb.quantize_packed(x, sch, variant="rows" if sch.structure == "two_level" else "rows2d", **kw)  # v2
        cfgs = configs if spec != "mxfp4:scale_rule=rceil" else [(v, None, None, None) for v in rf.VARIANTS]
        for v, br, w, pps in cfgs:
            o = rf.quantize_rows_fast(x, sch, variant=v, BR=br, num_warps=w, programs_per_sm=pps, **kw)
            n += 1
            if not (torch.equal(o["packed"], ref["packed"]) and torch.equal(o["scales"], ref["scales"])):
                failures.append(f"full {tuple(x.shape)} {spec} {v} BR={br} w={w} != quantize_packed v2")
            del o
        del ref
    torch.cuda.empty_cache()
    print(f"full-tensor checks: {n} comparisons against quantize_packed's v2 kernels, {len(failures)} failures so far")


# -- 2. timing ----------------------------------------------------------------------------------


# -- 3. SASS ------------------------------------------------------------------------------------


def _cuobjdump():
    p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return p if os.path.exists(p) else shutil.which("cuobjdump")


def sass_count(compiled, elems_per_thread):
    """(instructions per element, ALU-pipe per element) of a compiled kernel's text, or None."""
    tool = _cuobjdump()
    cubin = getattr(compiled, "asm", {}).get("cubin") if compiled is not None else None
    if not tool or not cubin:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    ops = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m and m.group(1) != "NOP":
            ops.append(m.group(1))
    alu = {"LOP3", "SHF", "IADD3", "ISETP", "FSETP", "SEL", "FMNMX", "IMNMX", "VIMNMX", "VIMNMX3", "VIADDMNMX",
           "PRMT", "SGXT", "LEA", "FSEL", "PLOP3", "P2R", "R2P"}
    return len(ops) / elems_per_thread, sum(o in alu for o in ops) / elems_per_thread


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--quick", action="store_true", help="first config of each variant only")
    args = ap.parse_args()
    t0 = time.time()
    failures = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    configs = CONFIGS
    if args.quick:
        seen = set()
        configs = [c for c in CONFIGS if not (c[0] in seen or seen.add(c[0]))]
    if not args.no_check:
        check_encoder(failures)
        check_emulator(failures)
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    if not args.no_check:
        check_full(x, sed, configs, failures)
    print(f"checks done at {time.time() - t0:.0f} s")

    y = torch.empty_like(x)
    t_copy = cuda_time(lambda: torch.mul(x, 1, out=y), args.iters)
    bw_copy = 4 * ne / t_copy
    rows = [("copy bf16: elementwise kernel (graph) -- baseline", t_copy, 4 * ne, None)]
    q = {"nvfp4": 2 * ne + ne // 2 + ne // 16, "mxfp4": 2 * ne + ne // 2 + ne // 32}
    T = lambda f: cuda_time(f, args.iters)  # noqa: E731
    for spec, kw in (("nvfp4", {"s_enc_dec": sed}), ("mxfp4", {})):
        cfg = trb.ROWS_CFG["two_level" if spec == "nvfp4" else "mx"]
        rows.append((f"{spec} quantize_packed v2 ({cfg[0]} {cfg[1]}/{cfg[2]}) call",
                     T(lambda: trb.quantize_packed(x, spec, variant=cfg[0], **kw)), q[spec], None))
        rows.append((f"{spec} quantize_packed default (tb {trb.TB_BR}/{trb.TB_WARPS}) call",
                     T(lambda: trb.quantize_packed(x, spec, **kw)), q[spec], None))
        for v, br, w, pps in configs:
            _, launch = rf.quantize_rows_fast(x, spec, variant=v, BR=br, num_warps=w, programs_per_sm=pps,
                                              return_launcher=True, **kw)
            t = T(launch)
            cnt = None
            if (br, w) == rf.DEFAULTS[v]:
                # instruction count without the exact-fallback branch (the path every tile takes
                # here), for the default tile only (one more compilation each)
                _, launch0 = rf.quantize_rows_fast(x[:256], spec, variant=v, exact_fallback=False,
                                                   return_launcher=True, **kw)
                cnt = sass_count(launch0(), br * (16 if spec == "nvfp4" else 32) / (32 * w))
            tag = f"{spec} {v} BR={br} w={w}" + (f" p/SM={pps}" if pps else "") + " kernel"
            rows.append((tag, t, q[spec], cnt))
        v, br, w, pps = configs[0]
        rows.append((f"{spec} {v} BR={br} w={w} call (entry incl. host ops)",
                     T(lambda: rf.quantize_rows_fast(x, spec, variant=v, BR=br, num_warps=w, **kw)), q[spec], None))
        torch.cuda.empty_cache()

    lines = [f"{'kernel (quantize bytes 2 + 0.5 + scales)':<58} {'ms':>7} {'TB/s':>6} {'% copy':>7} {'SASS/el':>8} {'ALU/el':>7}"]
    table = []
    for name, t, nbytes, cnt in rows:
        bw = nbytes / t
        c1, c2 = (f"{cnt[0]:8.2f}", f"{cnt[1]:7.2f}") if cnt else (f"{'':>8}", f"{'':>7}")
        lines.append(f"{name:<58} {t * 1e3:7.3f} {bw / 1e12:6.2f} {100 * bw / bw_copy:6.1f}% {c1} {c2}")
        table.append({"name": name, "ms": t * 1e3, "TBps": bw / 1e12, "pct_copy": 100 * bw / bw_copy,
                      "sass_per_elem": cnt[0] if cnt else None, "alu_per_elem": cnt[1] if cnt else None})
    target = 0.85 * bw_copy
    lines.append(f"85 % of copy = {target / 1e12:.2f} TB/s: nvfp4 <= {q['nvfp4'] / target * 1e3:.3f} ms, "
                 f"mxfp4 <= {q['mxfp4'] / target * 1e3:.3f} ms")
    text = "\n".join(lines)
    print("\n" + text)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_rows.txt"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "bench_gpu_rows.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "size": n,
                       "rows": table, "failures": failures}, f, indent=1)
    print(f"total {time.time() - t0:.0f} s")
    if failures:
        print(f"\nBIT-EXACTNESS FAILURES ({len(failures)}):\n  " + "\n  ".join(failures[:30]))
        sys.exit(1)
    print("\nall outputs bit-exact (emulator, quantize_packed, encoder over every float32)")


if __name__ == "__main__":
    main()
