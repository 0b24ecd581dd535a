"""GPU check and benchmark of the triton and torch backends (run on a CUDA device).

1. Bit-exactness: triton and torch backends against the numpy emulator on an adversarial
   bf16 tensor (every catalogued scheme the backends claim, RNE and SR with given bits,
   rowwise and columnwise), and triton against the torch backend on the full benchmark
   tensor. Any difference: exit status 1.
2. Timing (CUDA events, median of --iters runs, after warm-up) on a 16384 x 16384 bf16
   tensor: device-to-device copy (the baseline, same run), quantize NVFP4 (with and without
   the global-amax pass), MXFP4, NVFP4 columnwise, dequantize, torchao when importable.
   Bytes per element: quantize 2 read + 0.5 written + scale bytes; dequantize 0.5 read +
   scale bytes + 4 written (float32 out); the amax pass adds 2 read.
3. Fused RHT + quantize (section ``rht``): exactness against the emulator composition on a
   small adversarial tensor (schemes, rowwise and columnwise, bf16/float32 output, the three
   bf16 roundings, SR, cuBLAS layout, unfused path, RHT + amax, the fast encoder alone on
   data where it needs no fallback), fused == unfused on the full tensor, timings of the
   default quantize_packed calls (plain: rowwise ``tb``, columnwise ``cols3``; whole calls)
   next to the fused ones, and the ratios fused / plain.
4. Columnwise v3 vs v2 (section ``cols``): bit-equal on the full tensor, timings, a tile sweep.

    python benchmarks/bench_gpu_quantize.py [--size 16384] [--iters 50] [--only rht,cols]

Progress lines carry the seconds since the start (flushed), and every timing is printed as
it is taken, so a run cut by a time limit shows where it was. ``--only rht,cols`` compiles
about 40 kernels (the RHT checks are chosen for that; the interpreter tests cover the rest).
With $OUT set, the table is also written to $OUT/bench_gpu_quantize.json. Exit status 1 on
any bit difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

import fp4spec
from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb

T0 = time.time()


def log(msg):
    """A progress line with the seconds since the start, flushed (a timeout shows where it was)."""
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def adversarial_bf16(rows, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    e = torch.randint(-135, 120, (rows, cols // 16), generator=g).float()
    x = x * torch.exp2(e).repeat_interleave(16, dim=1)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.5, 3.0, 6.0, 7.0, 6.5, 5.5, 4.5, 3.25])
    x[::4, :16] = mids * 2.0 ** 3
    x[5, 32:48] = 0.0
    x[6, 32:48] = -0.0
    x[10, 3] = float("nan")
    x[11, 40] = float("inf")
    return x.to(torch.bfloat16)


SCHEMES = ["nvfp4", "nvfp4_2d", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"]


def check(failures):
    from fp4spec.backends.base import resolve_scheme

    xt = adversarial_bf16(512, 1024).cuda()
    xf = xt.float().cpu().numpy()
    rb = torch.randint(0, 256, xt.shape, dtype=torch.int32).cuda()
    tbk, trk = tb.TorchBackend("cuda"), trb.TritonBackend("cuda")
    n = 0
    for spec in SCHEMES:
        log(f"check {spec}: emulator vs triton and torch backends (rne, sr; rows, columns)")
        sch = resolve_scheme(spec)
        for rounding in ("rne", "sr"):
            for axis in (-1, 0):
                kw = {"rbits": rb.cpu().numpy().astype(np.uint32), "sr_bits": 8} if rounding == "sr" else {}
                ref = fp4spec.quantize(xf, sch, axis=axis, rounding=rounding, **kw)
                for b in (tbk, trk):
                    q = b.quantize(xf, sch, axis=axis, rounding=rounding, **kw)
                    n += 1
                    if not q.equals(ref):
                        failures.append(f"{b.name} {spec} {rounding} axis={axis}")
                want = fp4spec.dequantize(ref)
                if not same_f32(trk.dequantize(ref), want):
                    failures.append(f"triton dequantize {spec} {rounding} axis={axis}")
                if not same_f32(tbk.dequantize(ref), want):
                    failures.append(f"torch dequantize {spec} {rounding} axis={axis}")
        # packed bf16 path on the device
        out = trb.quantize_packed(xt, sch)
        ref = fp4spec.quantize(xf, sch)
        if not (np.array_equal(out["packed"].cpu().numpy(), ref.pack())
                and np.array_equal(out["scales"].cpu().numpy(), ref.scales)):
            failures.append(f"triton packed bf16 {spec}")
    n += check_fast(xt, failures)
    log(f"emulator checks: {n} quantize comparisons + dequantize, {len(failures)} failures")


def moved_packed(ref):
    from fp4spec.packing import pack

    m = ref.moved()
    return pack(m["codes"], order="lo_first", axis=-1), m["scales"]


def check_fast(xt, failures):
    """Fast paths on the device (bf16): rowwise (tb, the default, and the v2 variants),
    columnwise, given-bits and Philox SR, cuBLAS scale layout, dequantize; against the
    emulator. One or two tiles per kernel (every tile is a compile: the full sweep made this
    section run for minutes with no output; bench_gpu_rows.py sweeps the rowwise tiles)."""
    from fp4spec.layouts import to_blocked

    xf = xt.float().cpu().numpy()
    n = 0
    for spec in ("nvfp4", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"):
        log(f"check fast paths {spec}")
        sch = fp4spec.get_scheme(*spec.split(":")[:1], **dict(kv.split("=") for kv in spec.split(":")[1:]))
        ref = fp4spec.quantize(xf, sch)
        runs = [(None, None, None), ("rows", 256, 4)]
        if sch.element.name == "e2m1":
            runs += [("tb", 64, 2), ("rows2d", None, None)]
        for v, br, w in runs:
            o = trb.quantize_packed(xt, sch, variant=v, BM=br, num_warps=w)
            n += 1
            if not (np.array_equal(o["packed"].cpu().numpy(), ref.pack()) and np.array_equal(o["scales"].cpu().numpy(), ref.scales)):
                failures.append(f"fast {v or 'default'} {spec} BR={br}")
        o = trb.quantize_packed(xt, sch, scale_layout="cublas")
        n += 1
        if not np.array_equal(o["scales"].cpu().numpy(), to_blocked(ref.scales)):
            failures.append(f"cublas layout rows {spec}")
        refc = fp4spec.quantize(xf, sch, axis=0)
        pc, sc = moved_packed(refc)
        # columnwise: the default (cols3 for k = 16, 32) and v2 at its own tiles. (The v2 tiles
        # given to cols3 -- e.g. 1024 columns x 4 warps -- put 32 blocks in a thread: minutes of
        # compiling, the silent > 200 s of this section in two GPU sessions.)
        for v, bc, w in ((None, None, None), ("cols3", 128, 4), ("cols", 512, 2), ("cols", 256, 1)):
            o = trb.quantize_packed(xt, sch, axis=0, BN=bc, num_warps=w, variant=v)
            n += 1
            if not (np.array_equal(o["packed"].cpu().numpy(), pc) and np.array_equal(o["scales"].cpu().numpy(), sc)):
                failures.append(f"fast cols {v or 'default'} {spec} BC={bc}")
        o = trb.quantize_packed(xt, sch, axis=0, scale_layout="cublas")
        if not np.array_equal(o["scales"].cpu().numpy(), to_blocked(sc)):
            failures.append(f"cublas layout cols {spec}")
        for sr_bits in (8, 24):
            rb = trb.philox_rbits(77 + sr_bits, xf.shape, sr_bits)
            ref = fp4spec.quantize(xf, sch, rounding="sr", rbits=rb, sr_bits=sr_bits)
            o = trb.quantize_packed(xt, sch, rounding="sr", seed=77 + sr_bits, sr_bits=sr_bits)
            o2 = trb.quantize_packed(xt, sch, rounding="sr", rbits=torch.from_numpy(rb.view(np.int32)).cuda(), sr_bits=sr_bits)
            n += 2
            for tag, oo in (("philox", o), ("given", o2)):
                if not (np.array_equal(oo["packed"].cpu().numpy(), ref.pack()) and np.array_equal(oo["scales"].cpu().numpy(), ref.scales)):
                    failures.append(f"sr {tag} rows {spec} sr_bits={sr_bits}")
            refc = fp4spec.quantize(xf, sch, axis=0, rounding="sr", rbits=rb, sr_bits=sr_bits)
            pc, sc = moved_packed(refc)
            o = trb.quantize_packed(xt, sch, axis=0, rounding="sr", seed=77 + sr_bits, sr_bits=sr_bits)
            n += 1
            if not (np.array_equal(o["packed"].cpu().numpy(), pc) and np.array_equal(o["scales"].cpu().numpy(), sc)):
                failures.append(f"sr philox cols {spec} sr_bits={sr_bits}")
        ref = fp4spec.quantize(xf, sch)
        pk, s = torch.from_numpy(ref.pack()).cuda(), torch.from_numpy(ref.scales).cuda()
        gs = None if ref.global_scale is None else float(ref.global_scale)
        for br, w in ((None, None), (128, 4)):
            d = trb.dequantize_packed(pk, s, gs, sch, BM=br, num_warps=w)
            if not same_f32(d.cpu().numpy(), fp4spec.dequantize(ref)):
                failures.append(f"fast dequantize {spec} BR={br}")
    return n


def rht_adversarial_bf16(rows, cols, seed=0):
    """bf16 (rows, cols) whose rows of 16 along both axes stress the fused RHT: per-row-of-16
    magnitudes from subnormal to huge, wide spans inside a row of 16 (the float32 butterfly
    differs from float64), the documented 2^24 example, zeros, -0.0, subnormal sums, overflow
    to Inf inside the butterfly, Inf - Inf, NaN. Returns a CPU tensor."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((rows, cols)).astype(np.float32)
    e = g.integers(-133, 110, size=(rows // 16, cols // 16))  # per 16 x 16 tile: rows of 16 both ways
    x *= np.ldexp(np.float32(1), np.repeat(np.repeat(e, 16, 0), 16, 1)).astype(np.float32)
    for r in range(0, rows, 7):
        c = 16 * int(g.integers(0, cols // 16))
        x[r, c:c + 16] = g.choice([-1, 1], 16) * np.ldexp(1.0 + g.random(16), g.integers(-30, 30, 16))
        col = g.choice([-1, 1], 16) * np.ldexp(1.0 + g.random(16), g.integers(-30, 30, 16))
        x[r:r + 16, c + 3] = col[:min(16, rows - r)]
    x[1, :16] = [2.0 ** 24, 1, -(2.0 ** 24)] + [0] * 13
    x[2, 16:32] = 0.0
    x[3, 16:32] = -0.0
    x[4, 16:32] = np.arange(16) * np.float32(2.0 ** -133)  # bf16 subnormals
    x[5, 32:48] = np.float32(3e38) * g.standard_normal(16).astype(np.float32)
    x[6, 48:64] = [np.inf, -np.inf] + [1.0] * 14
    x[7, 64:80] = [np.inf] + [1.0] * 15
    x[8, 80:96] = [np.nan] + [1.0] * 15
    x[40:56, 100] = -0.0
    x[60, cols - 9] = np.nan
    return torch.from_numpy(x).to(torch.bfloat16)


def check_rht(failures, shape=(256, 512)):
    """Fused RHT + quantize on the device against the emulator composition
    fp4spec.quantize(RHT.apply(x, axis), ...): schemes x rowwise/columnwise x bf16 output
    (three bf16 roundings: integer, cvt, packed cvt) / float32 output, RNE, SR (Philox and
    given bits), cuBLAS scale layout, the unfused path (nvfp4_2d), the RHT + amax pass."""
    from fp4spec.rht import RHT

    xt = rht_adversarial_bf16(*shape).cuda()
    xf = xt.float().cpu().numpy()
    te, sd = RHT.te(), RHT.from_seed(5, out_dtype="float32")
    refs = {}

    def ref(spec, rht, axis, **kw):
        from fp4spec.backends.base import resolve_scheme

        key = (spec, rht, axis)
        if kw or key not in refs:
            r = moved_packed(fp4spec.quantize(rht.apply(xf, axis=axis).astype(np.float32), resolve_scheme(spec),
                                              axis=axis, **kw))
            if kw:
                return r
            refs[key] = r
        return refs[key]

    def cmp(tag, o, want):
        pk, sc = want
        got_s = o["scales"].cpu().numpy()
        if got_s.ndim == 1:
            from fp4spec.layouts import to_blocked
            sc = to_blocked(sc)
        if not (np.array_equal(o["packed"].cpu().numpy(), pk) and np.array_equal(got_s, sc)):
            failures.append(f"rht {tag}")

    n = 0
    # (spec, axis, rht) runs chosen to cover every scheme and both layouts while keeping the
    # number of kernel compiles (each constexpr set is one; columnwise ~1-5 s with the fast
    # encoder's fallback branch, SR up to ~15 s) small; the interpreter tests cover the rest
    runs = [(spec, -1, rht) for spec in ("nvfp4", "mxfp4") for rht in (te, sd)]
    runs += [(spec, -1, te) for spec in ("ufp4", "nvint4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even")]
    runs += [(spec, 0, te) for spec in ("nvfp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil")]
    runs += [("nvfp4", 0, sd), ("mxfp4", 0, sd)]
    saved = trb.RHT_BF16_CVT
    try:
        for cvt in (1, 2, 0):
            log(f"check rht: bf16 rounding cvt={cvt}")
            trb.RHT_BF16_CVT = cvt
            for spec, axis, rht in (runs if cvt == 1 else [("nvfp4", -1, te), ("mxfp4", 0, te)]):
                cmp(f"{spec} axis={axis} {rht.out_dtype} cvt={cvt}",
                    trb.quantize_packed(xt, spec, axis=axis, rht=rht), ref(spec, rht, axis))
                n += 1
    finally:
        trb.RHT_BF16_CVT = saved
    # the fast E2M1 encoder alone (no per-program fallback) where it must be exact: finite
    # values below 2^12 (TE multipliers >= 2^-16, no MX NaN scales)
    log("check rht: fast encoder without its fallback")
    fin = np.where(np.isfinite(xf) & (np.abs(xf) < 4096), xf, np.float32(3.0))
    fin_t = torch.from_numpy(fin).to(torch.bfloat16).cuda()
    fin = fin_t.float().cpu().numpy()
    saved = trb.FAST_EXACT_FALLBACK
    try:
        trb.FAST_EXACT_FALLBACK = False
        for spec, axis in (("nvfp4", -1), ("mxfp4", -1), ("nvfp4", 0), ("mxfp4", 0)):
            want = moved_packed(fp4spec.quantize(te.apply(fin, axis=axis).astype(np.float32), spec, axis=axis))
            cmp(f"{spec} axis={axis} fast encoder alone", trb.quantize_packed(fin_t, spec, axis=axis, rht=te), want)
            n += 1
    finally:
        trb.FAST_EXACT_FALLBACK = saved
    log("check rht: SR, cuBLAS layout, unfused, RHT + amax")
    rb = trb.philox_rbits(31, xf.shape, 8)
    rb2 = np.random.default_rng(4).integers(0, 1 << 24, size=xf.shape).astype(np.uint32)
    rb2_t = torch.from_numpy(rb2.view(np.int32)).cuda()
    for spec, axis in (("nvfp4", -1), ("nvfp4", 0)):  # (MX SR, k = 32: interpreter tests)
        cmp(f"{spec} axis={axis} sr philox", trb.quantize_packed(xt, spec, axis=axis, rht=te, rounding="sr", seed=31),
            ref(spec, te, axis, rounding="sr", rbits=rb))
        n += 1
    for spec, axis in (("nvint4", 0), ("nvfp4", -1)):
        cmp(f"{spec} axis={axis} sr given", trb.quantize_packed(xt, spec, axis=axis, rht=sd, rounding="sr", sr_bits=24,
                                                                 rbits=rb2_t),
            ref(spec, sd, axis, rounding="sr", rbits=rb2, sr_bits=24))
        n += 1
    for spec, axis in (("nvfp4", -1), ("mxfp4", 0)):
        cmp(f"{spec} axis={axis} cublas", trb.quantize_packed(xt, spec, axis=axis, rht=te, scale_layout="cublas"),
            ref(spec, te, axis))
        n += 1
    for spec in ("nvfp4_2d", "mxfp4:block_size=64"):
        cmp(f"{spec} unfused", trb.quantize_packed(xt, spec, rht=te), ref(spec, te, -1))
        n += 1
    finite = torch.where(torch.isfinite(xt), xt, torch.zeros_like(xt))
    ff = finite.float().cpu().numpy()
    for rht in (te, sd):
        for axis in (-1, 0):
            want = np.float32(np.max(np.abs(rht.apply(ff, axis=axis).astype(np.float32))))
            r, c = finite.shape
            M, N, sxm, sxn = (r, c, c, 1) if axis == -1 else (c, r, 1, c)
            got = trb.rht_global_amax(finite, M, N, sxm, sxn, trb.rht_params(rht))
            got = np.float32(got.cpu())
            # a NaN amax (Inf - Inf inside the butterfly) is any NaN: its payload is the
            # platform's (x86 0x7FC00000, CUDA 0x7FFFFFFF) and only "NaN" enters S_enc = 1
            if not (np.isnan(got) and np.isnan(want)) and got.view(np.uint32) != want.view(np.uint32):
                failures.append(f"rht amax {rht.out_dtype} axis={axis}")
            n += 1
    return n


def check_rht_full(x, failures):
    """Full tensor: fused RHT + quantize == the unfused path (rht_kernel to a float32
    temporary, then the plain kernels), rowwise and columnwise; RHT + amax == amax of the
    temporary."""
    from fp4spec.rht import RHT

    te = RHT.te()
    n = x.shape[0]
    rp = trb.rht_params(te)
    for spec in ("nvfp4", "mxfp4"):
        for axis in (-1, 0):
            o = trb.quantize_packed(x, spec, axis=axis, rht=te)
            u = trb.quantize_packed(x, spec, axis=axis, rht=te, variant="unfused")
            same = torch.equal(o["packed"], u["packed"]) and torch.equal(o["scales"], u["scales"])
            if o["global_scale"] is not None:
                same = same and torch.equal(o["global_scale"].view(torch.int32), u["global_scale"].view(torch.int32))
            if not same:
                failures.append(f"full {n}x{n} rht fused != unfused {spec} axis={axis}")
            del o, u
    y = trb.rht_apply(x, n, n, n, 1, rp)
    a = trb.rht_global_amax(x, n, n, n, 1, rp)
    if not torch.equal(a.view(torch.int32), y.abs().max().view(torch.int32)):
        failures.append(f"full {n}x{n} rht amax rows")
    del y
    y = trb.rht_apply(x, n, n, 1, n, rp)
    a = trb.rht_global_amax(x, n, n, 1, n, rp)
    if not torch.equal(a.view(torch.int32), y.abs().max().view(torch.int32)):
        failures.append(f"full {n}x{n} rht amax cols")
    del y
    torch.cuda.empty_cache()


def timed(rows, name, fn, nbytes, T):
    """Time fn, append (name, seconds, bytes) to rows and print the row at once."""
    t = T(fn)
    rows.append((name, t, nbytes))
    log(f"  {name:<52} {t * 1e3:8.3f} ms")
    return t


def time_rht(x, T, rows, q_nv, q_mx, ne):
    """Fused RHT + quantize next to the default plain quantize_packed calls (whole calls:
    rowwise tb, columnwise cols3; tensor scale given for NVFP4, and with the amax pass), the
    ratios fused / plain, a few variants (bf16 roundings, float32 output, tiles). About 15
    compiles."""
    from fp4spec.rht import RHT

    te, sd32 = RHT.te(), RHT.from_seed(5, out_dtype="float32")
    n = x.shape[0]
    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    sed_r = tb.tensor_scale(trb.rht_global_amax(x, n, n, n, 1, trb.rht_params(te)), nv)
    sed_c = tb.tensor_scale(trb.rht_global_amax(x, n, n, 1, n, trb.rht_params(te)), nv)
    ratios = []
    log("time rht: plain (default quantize_packed) vs fused RHT + quantize")
    for spec, nb in (("nvfp4", q_nv), ("mxfp4", q_mx)):
        for axis, tag in ((-1, "rowwise"), (0, "columnwise")):
            kw = {"s_enc_dec": sed} if spec == "nvfp4" else {}
            kr = {"s_enc_dec": sed_r if axis == -1 else sed_c} if spec == "nvfp4" else {}
            plain = "tb" if axis == -1 else "cols3"
            tp = timed(rows, f"{spec} {tag} plain ({plain})" + (" (given)" if kw else ""),
                       lambda: trb.quantize_packed(x, spec, axis=axis, **kw), nb, T)
            tf = timed(rows, f"{spec} {tag} RHT(te)+quantize" + (" (given)" if kr else ""),
                       lambda: trb.quantize_packed(x, spec, axis=axis, rht=te, **kr), nb, T)
            ratios.append((f"{spec} {tag}", tf / tp))
    log("time rht: incl. the amax passes")
    tp = timed(rows, "nvfp4 rowwise plain (tb) incl. amax pass", lambda: trb.quantize_packed(x, nv), q_nv, T)
    tf = timed(rows, "nvfp4 rowwise RHT incl. RHT+amax pass", lambda: trb.quantize_packed(x, nv, rht=te), q_nv, T)
    ratios.append(("nvfp4 rowwise, amax incl.", tf / tp))
    tp = timed(rows, "nvfp4 columnwise plain incl. amax pass", lambda: trb.quantize_packed(x, nv, axis=0), q_nv, T)
    tf = timed(rows, "nvfp4 columnwise RHT incl. RHT+amax pass", lambda: trb.quantize_packed(x, nv, axis=0, rht=te),
               q_nv, T)
    ratios.append(("nvfp4 columnwise, amax incl.", tf / tp))
    timed(rows, "amax pass alone", lambda: trb.global_amax(x, n, n, n, 1), 2 * ne, T)
    timed(rows, "RHT+amax pass rowwise", lambda: trb.rht_global_amax(x, n, n, n, 1, trb.rht_params(te)), 2 * ne, T)
    timed(rows, "RHT+amax pass columnwise", lambda: trb.rht_global_amax(x, n, n, 1, n, trb.rht_params(te)), 2 * ne, T)
    log("time rht: variants")
    saved = trb.RHT_BF16_CVT
    try:
        for cvt in (0, 2):
            trb.RHT_BF16_CVT = cvt
            timed(rows, f"nvfp4 rowwise RHT bf16 cvt={cvt} (given)",
                  lambda: trb.quantize_packed(x, nv, rht=te, s_enc_dec=sed_r), q_nv, T)
        timed(rows, "mxfp4 columnwise RHT bf16 cvt=2", lambda: trb.quantize_packed(x, "mxfp4", axis=0, rht=te), q_mx, T)
    finally:
        trb.RHT_BF16_CVT = saved
    timed(rows, "nvfp4 rowwise RHT fp32 out (given)", lambda: trb.quantize_packed(x, nv, rht=sd32, s_enc_dec=sed_r), q_nv, T)
    timed(rows, "nvfp4 rowwise RHT unfused (given)",
          lambda: trb.quantize_packed(x, nv, rht=te, s_enc_dec=sed_r, variant="unfused"), q_nv, T)
    for br, w in ((128, 4), (512, 8)):
        timed(rows, f"nvfp4 rowwise RHT BR={br} w={w} (given)",
              lambda: trb.quantize_packed(x, nv, rht=te, s_enc_dec=sed_r, BM=br, num_warps=w), q_nv, T)
    return ratios


def check_cols_full(x, failures):
    """Full tensor: columnwise v3 == v2 (itself checked against v1 and the emulator)."""
    n = x.shape[0]
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    for spec, kw in (("nvfp4", {"s_enc_dec": sed}), ("mxfp4", {})):
        o2 = trb.quantize_packed(x, spec, axis=0, variant="cols", **kw)
        for nb in (None, 1):
            o3 = trb.quantize_packed(x, spec, axis=0, variant="cols3", BM=nb, **kw)
            if not (torch.equal(o3["packed"], o2["packed"]) and torch.equal(o3["scales"], o2["scales"])):
                failures.append(f"full {n}x{n} cols3 != cols {spec} BM={nb}")
            del o3
        del o2
    torch.cuda.empty_cache()


def time_cols(x, T, rows, q_nv, q_mx):
    """Columnwise v2 vs v3, and a v3 tile sweep (tiles of at most 8 blocks per thread)."""
    n = x.shape[0]
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    for spec, kw, nb in (("nvfp4", {"s_enc_dec": sed}, q_nv), ("mxfp4", {}, q_mx)):
        log(f"time cols {spec}")
        timed(rows, f"{spec} columnwise v2 (cols)", lambda: trb.quantize_packed(x, spec, axis=0, variant="cols", **kw), nb, T)
        cfg = trb.COLS3_CFG[fp4spec.get_scheme(spec).block_size]
        timed(rows, f"{spec} columnwise v3 (cols3 default {cfg[0]}/{cfg[1]}/{cfg[2]})",
              lambda: trb.quantize_packed(x, spec, axis=0, variant="cols3", **kw), nb, T)
        for bc, w, blocks in ((128, 4, None), (256, 4, None), (256, 8, None), (256, 4, 1)):
            if (bc, w) == cfg[:2] and blocks is None:
                continue
            timed(rows, f"{spec} cols3 BC={bc} w={w} NB={blocks or 'dflt'}",
                  lambda: trb.quantize_packed(x, spec, axis=0, variant="cols3", BN=bc, BM=blocks, num_warps=w, **kw), nb, T)
    timed(rows, "nvfp4 rowwise (default, reference)", lambda: trb.quantize_packed(x, "nvfp4", s_enc_dec=sed), q_nv, T)


def same_f32(a, b) -> bool:
    """Equal bit patterns, NaN matching NaN (a NaN's sign and payload are not specified: x86
    gives 0xFFC00000 for 0 * Inf, CUDA the canonical 0x7FFFFFFF)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a.view(np.uint32)[~na], b.view(np.uint32)[~nb]))


def event_time(fn, iters):
    """Seconds per call: median of `iters` calls each between two CUDA events."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def cuda_time(fn, iters, per_graph=10):
    """Seconds per call of fn: median over `iters` replays of a CUDA graph holding
    `per_graph` calls (host-side Python and the small torch ops around each kernel launch
    are captured, so the host's speed does not enter the number)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / per_graph)
    del g
    torch.cuda.empty_cache()
    return statistics.median(ts)


SECTIONS = ("check", "full", "time", "rht", "cols", "torchao")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--only", default=None,
                    help=f"comma list of sections to run (default: all): {', '.join(SECTIONS)}. "
                         "check: emulator checks of every path on a small adversarial tensor; full: full-tensor "
                         "cross-checks and the main timing table; rht: fused RHT + quantize (checks and timings); "
                         "cols: columnwise v3 vs v2 (checks and timings); time: the main timing table")
    ap.add_argument("--torch-backend", action="store_true", help="also time the eager torch backend")
    args = ap.parse_args()
    only = set(SECTIONS) if args.only is None else {p.strip() for p in args.only.split(",") if p.strip()}
    bad = only - set(SECTIONS)
    if bad:
        ap.error(f"--only: unknown sections {', '.join(sorted(bad))} (known: {', '.join(SECTIONS)})")
    if args.no_check:
        only.discard("check")
    failures = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {trb.triton.__version__}",
          flush=True)
    log(f"sections: {', '.join(s for s in SECTIONS if s in only)}")
    if "check" in only:
        check(failures)
    if "rht" in only:
        nr = check_rht(failures)
        log(f"rht emulator checks: {nr} comparisons, {len(failures)} failures so far")
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    if "full" in only:
        log("full-tensor checks: triton == torch, fast paths == v1")
        full_checks(x, n, failures)
    if "rht" in only:
        log("full-tensor checks: fused RHT == unfused, RHT + amax")
        check_rht_full(x, failures)
    if "cols" in only:
        log("full-tensor checks: cols3 == cols")
        check_cols_full(x, failures)
    log(f"full-tensor checks done, {len(failures)} failures so far")
    y = torch.empty_like(x)
    rows = []
    # Baselines: cudaMemcpy D2D timed with events (no graph: a memcpy node in a graph runs
    # slower), and an elementwise copy kernel timed like the kernels (graph replay). The
    # faster of the two is the denominator of "% copy".
    t_memcpy = event_time(lambda: y.copy_(x), args.iters)
    t_kcopy = cuda_time(lambda: torch.mul(x, 1, out=y), args.iters)
    t_copy = min(t_memcpy, t_kcopy)
    bw_copy = 4 * ne / t_copy
    rows.append(("copy bf16: cudaMemcpy D2D (events)", t_memcpy, 4 * ne))
    rows.append(("copy bf16: elementwise kernel (graph)", t_kcopy, 4 * ne))
    log(f"copy: cudaMemcpy {t_memcpy * 1e3:.3f} ms, elementwise kernel {t_kcopy * 1e3:.3f} ms "
        f"({bw_copy / 1e12:.2f} TB/s, the '% copy' denominator)")
    del y
    q_nv = 2 * ne + ne // 2 + ne // 16
    q_mx = 2 * ne + ne // 2 + ne // 32
    T = lambda f: cuda_time(f, args.iters)  # noqa: E731
    ratios = []
    if "time" in only:
        main_table(x, n, args, T, rows, bw_copy, q_nv, q_mx, ne)
    if "rht" in only:
        ratios = time_rht(x, T, rows, q_nv, q_mx, ne)
    if "cols" in only:
        time_cols(x, T, rows, q_nv, q_mx)
    if "torchao" in only:
        try:
            from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

            f = torch.compile(lambda t: NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max())))
            rows.append(("torchao NVFP4Tensor.to_nvfp4 (compiled)", cuda_time(lambda: f(x), 10), q_nv))
        except Exception as exc:  # noqa: BLE001
            print(f"torchao: not benchmarked ({type(exc).__name__}: {str(exc)[:100]})")

    print(f"\n{'kernel':<56} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
    for name, t, nbytes in rows:
        bw = nbytes / t
        print(f"{name:<56} {t * 1e3:8.3f} {bw / 1e12:7.2f} {100 * bw / bw_copy:6.1f}%")
    if ratios:
        print("\nfused RHT + quantize / plain quantize_packed, whole calls (target <= 1.05):")
        for name, r in ratios:
            print(f"  {name:<30} {r:6.3f}" + ("" if r <= 1.05 else "  (above target)"))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_quantize.json"), "w") as fh:
            json.dump({"rows": [(nm, t, b) for nm, t, b in rows], "ratios": ratios, "failures": failures,
                       "copy_bw": bw_copy, "size": n}, fh, indent=1)
    log("total")
    if failures:
        print(f"\nBIT-EXACTNESS FAILURES ({len(failures)}):\n  " + "\n  ".join(failures[:40]))
        sys.exit(1)
    print("\nall outputs bit-exact with the emulator")


def full_checks(x, n, failures):
    """Full tensor: triton == torch backend; fast paths == the v1 kernel."""
    for spec in ("nvfp4", "mxfp4"):
        o = trb.quantize_packed(x, spec)
        r = tb.quantize_tensors(x, spec)
        rp = r["codes"].reshape(n, n // 2, 2)
        rp = rp[..., 0] | (rp[..., 1] << 4)
        same = torch.equal(o["packed"], rp) and torch.equal(o["scales"], r["scales"].reshape(n, -1))
        if r["global_scale"] is not None:
            same = same and torch.equal(o["global_scale"].view(torch.int32), r["global_scale"].view(torch.int32))
        if not same:
            failures.append(f"full {n}x{n} triton != torch {spec}")
        del o, r, rp
    torch.cuda.empty_cache()
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    for spec, kw in (("nvfp4", {"s_enc_dec": sed}), ("mxfp4", {})):
        o1 = trb.quantize_packed(x, spec, variant="v1", **kw)
        for v in ("rows", "rows2d"):
            o = trb.quantize_packed(x, spec, variant=v, **kw)
            if not (torch.equal(o["packed"], o1["packed"]) and torch.equal(o["scales"], o1["scales"])):
                failures.append(f"full {n}x{n} {v} != v1 {spec}")
        oc1 = trb.quantize_packed(x, spec, axis=0, variant="v1", **kw)
        oc = trb.quantize_packed(x, spec, axis=0, **kw)
        if not (torch.equal(oc["packed"], oc1["packed"]) and torch.equal(oc["scales"], oc1["scales"])):
            failures.append(f"full {n}x{n} cols != v1 {spec}")
        d1 = trb.dequantize_packed(o1["packed"], o1["scales"], o1["global_scale"], spec, variant="v1")
        d = trb.dequantize_packed(o1["packed"], o1["scales"], o1["global_scale"], spec)
        if not torch.equal(d.view(torch.int32), d1.view(torch.int32)):
            failures.append(f"full {n}x{n} dequantize != v1 {spec}")
        del o1, o, oc1, oc, d1, d
    torch.cuda.empty_cache()


def main_table(x, n, args, T, rows, bw_copy, q_nv, q_mx, ne):
    """The main timing table (and the --tune sweep)."""
    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    dq_nv = ne // 2 + ne // 16 + 4 * ne
    dq_mx = ne // 2 + ne // 32 + 4 * ne
    sweep = []
    if args.tune:
        for spec, kw, nb in (("nvfp4", {"s_enc_dec": sed}, q_nv), ("mxfp4", {}, q_mx)):
            for v in ("rows", "rows2d"):
                for br, w in ((256, 8), (512, 8)):
                    t = T(lambda: trb.quantize_packed(x, spec, variant=v, BM=br, num_warps=w, **kw))
                    sweep.append((f"{spec} {v} BR={br} w={w}", t, nb))
            for bc, w, nbd in ((256, 1, 8), (512, 2, 8), (512, 4, 4)):
                t = T(lambda: trb.quantize_packed(x, spec, axis=0, BN=bc, BM=nbd, num_warps=w, variant="cols", **kw))
                sweep.append((f"{spec} cols BC={bc} w={w} bands={nbd}", t, nb))
        o = trb.quantize_packed(x, nv)
        for br, w in ((512, 8), (1024, 8)):
            t = T(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, BM=br, num_warps=w))
            sweep.append((f"dequantize nvfp4 BR={br} w={w}", t, dq_nv))
        del o
        for struct, spec in (("two_level", "nvfp4"), ("mx", "mxfp4")):
            best = min((t, name) for name, t, _ in sweep if name.startswith(spec + " rows"))
            _, v, br, w = best[1].split()
            trb.ROWS_CFG[struct] = (v, int(br[3:]), int(w[2:]))
        best = min((t, name) for name, t, _ in sweep if name.startswith("nvfp4 cols"))
        _, _, bc, w, bands = best[1].split()
        trb.COLS_BC, trb.COLS_WARPS, trb.COLS_BANDS = int(bc[3:]), int(w[2:]), int(bands[6:])
        best = min((t, name) for name, t, _ in sweep if name.startswith("dequantize"))
        _, _, br, w = best[1].split()
        trb.DQ_ELEMS, trb.DQ_WARPS = 16 * int(br[3:]), int(w[2:])
        print(f"chosen: rows {trb.ROWS_CFG}, cols BC={trb.COLS_BC} w={trb.COLS_WARPS} bands={trb.COLS_BANDS}, "
              f"dequantize elements/program={trb.DQ_ELEMS} w={trb.DQ_WARPS}")
        print(f"\n{'sweep':<42} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
        for name, t, nbytes in sweep:
            print(f"{name:<42} {t * 1e3:8.3f} {nbytes / t / 1e12:7.2f} {100 * nbytes / t / bw_copy:6.1f}%")

    rows.append(("quantize nvfp4 (tensor scale given)", T(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed)), q_nv))
    rows.append(("quantize nvfp4 (incl. amax pass)", T(lambda: trb.quantize_packed(x, nv)), q_nv))
    rows.append(("amax pass alone", T(lambda: trb.global_amax(x, n, n, n, 1)), 2 * ne))
    rows.append(("quantize nvfp4 v1 kernel (given)", T(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed, variant="v1")), q_nv))
    rows.append(("quantize nvfp4 cuBLAS scale layout (given)", T(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed, scale_layout="cublas")), q_nv))
    rows.append(("quantize nvfp4 rows2d variant (given)", T(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed, variant="rows2d")), q_nv))
    rows.append(("quantize mxfp4 rows variant", T(lambda: trb.quantize_packed(x, "mxfp4", variant="rows")), q_mx))
    rows.append(("quantize mxfp4 rows2d variant", T(lambda: trb.quantize_packed(x, "mxfp4", variant="rows2d")), q_mx))
    rows.append(("quantize nvfp4 SR Philox (given)", T(lambda: trb.quantize_packed(x, nv, s_enc_dec=sed, rounding="sr", seed=1)), q_nv))
    rows.append(("quantize nvfp4_2d (given, v1)", T(lambda: trb.quantize_packed(x, "nvfp4_2d", s_enc_dec=sed)), q_nv))
    rows.append(("quantize nvfp4 columnwise (given)", T(lambda: trb.quantize_packed(x, nv, axis=0, s_enc_dec=sed)), q_nv))
    rows.append(("quantize mxfp4", T(lambda: trb.quantize_packed(x, "mxfp4")), q_mx))
    rows.append(("quantize mxfp4 v1 kernel", T(lambda: trb.quantize_packed(x, "mxfp4", variant="v1")), q_mx))
    rows.append(("quantize mxfp4 columnwise", T(lambda: trb.quantize_packed(x, "mxfp4", axis=0)), q_mx))
    o = trb.quantize_packed(x, nv)
    rows.append(("dequantize nvfp4 -> fp32", T(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv)), dq_nv))
    rows.append(("dequantize nvfp4 -> fp32 v1 kernel", T(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, variant="v1")), dq_nv))
    om = trb.quantize_packed(x, "mxfp4")
    rows.append(("dequantize mxfp4 -> fp32", T(lambda: trb.dequantize_packed(om["packed"], om["scales"], None, "mxfp4")), dq_mx))
    del o, om
    if args.torch_backend:
        rows.append(("torch backend quantize nvfp4", cuda_time(lambda: tb.quantize_tensors(x, nv), 3), q_nv))


if __name__ == "__main__":
    main()
