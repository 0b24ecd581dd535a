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

    python benchmarks/bench_gpu_quantize.py [--size 16384] [--iters 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch

import fp4spec
from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb


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
    print(f"emulator checks: {n} quantize comparisons + dequantize, {len(failures)} failures")


def moved_packed(ref):
    from fp4spec.packing import pack

    m = ref.moved()
    return pack(m["codes"], order="lo_first", axis=-1), m["scales"]


def check_fast(xt, failures):
    """Fast paths on the device (bf16): rowwise (both variants), columnwise, given-bits and
    Philox SR, cuBLAS scale layout, dequantize; against the emulator."""
    from fp4spec.layouts import to_blocked

    xf = xt.float().cpu().numpy()
    n = 0
    for spec in ("nvfp4", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"):
        sch = fp4spec.get_scheme(*spec.split(":")[:1], **dict(kv.split("=") for kv in spec.split(":")[1:]))
        ref = fp4spec.quantize(xf, sch)
        variants = ["rows", "rows2d"] if sch.element.name == "e2m1" else ["rows"]
        for v in variants:
            for br, w in ((128, 4), (256, 4), (512, 8)):
                o = trb.quantize_packed(xt, sch, variant=v, BM=br, num_warps=w)
                n += 1
                if not (np.array_equal(o["packed"].cpu().numpy(), ref.pack()) and np.array_equal(o["scales"].cpu().numpy(), ref.scales)):
                    failures.append(f"fast {v} {spec} BR={br}")
        o = trb.quantize_packed(xt, sch, scale_layout="cublas")
        n += 1
        if not np.array_equal(o["scales"].cpu().numpy(), to_blocked(ref.scales)):
            failures.append(f"cublas layout rows {spec}")
        refc = fp4spec.quantize(xf, sch, axis=0)
        pc, sc = moved_packed(refc)
        for bc, w in ((128, 1), (256, 1), (512, 2), (1024, 4), (256, 4)):
            o = trb.quantize_packed(xt, sch, axis=0, BN=bc, num_warps=w)
            n += 1
            if not (np.array_equal(o["packed"].cpu().numpy(), pc) and np.array_equal(o["scales"].cpu().numpy(), sc)):
                failures.append(f"fast cols {spec} BC={bc}")
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
        for br, w in ((128, 4), (256, 4), (512, 8)):
            d = trb.dequantize_packed(pk, s, gs, sch, BM=br, num_warps=w)
            if not same_f32(d.cpu().numpy(), fp4spec.dequantize(ref)):
                failures.append(f"fast dequantize {spec} BR={br}")
    if hasattr(trb, "quantize_rht"):
        n += check_rht(xt, failures)
    return n


def check_rht(xt, failures):
    from fp4spec.rht import rht
    import ml_dtypes

    xb = xt.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    n = 0
    for signs in ("te", 5):
        kw = {"signs": "te"} if signs == "te" else {"seed": signs}
        for axis in (-1, 0):
            y = rht(xb, 16, axis=axis, out_dtype="bfloat16", **kw).astype(np.float32)
            for spec in ("nvfp4", "mxfp4"):
                ref = fp4spec.quantize(y, spec, axis=axis)
                o = trb.quantize_rht(xt, spec, axis=axis, **kw)
                pc, sc = moved_packed(ref)
                n += 1
                if not (np.array_equal(o["packed"].cpu().numpy(), pc) and np.array_equal(o["scales"].cpu().numpy(), sc)):
                    failures.append(f"rht {signs} axis={axis} {spec}")
    return n


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--torch-backend", action="store_true", help="also time the eager torch backend")
    args = ap.parse_args()
    failures = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {trb.triton.__version__}")
    if not args.no_check:
        check(failures)
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    # full-tensor cross-check: triton == torch backend (itself equal to the emulator above)
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
    rows.append(("copy bf16: cudaMemcpy again (spread)", event_time(lambda: y.copy_(x), args.iters), 4 * ne))

    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(trb.global_amax(x, n, n, n, 1), nv)
    q_nv = 2 * ne + ne // 2 + ne // 16
    q_mx = 2 * ne + ne // 2 + ne // 32
    dq_nv = ne // 2 + ne // 16 + 4 * ne
    dq_mx = ne // 2 + ne // 32 + 4 * ne
    T = lambda f: cuda_time(f, args.iters)  # noqa: E731

    # full-tensor cross-check: fast paths == generic v1 kernel (itself == torch backend == emulator)
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

    sweep = []
    if args.tune:
        for spec, kw, nb in (("nvfp4", {"s_enc_dec": sed}, q_nv), ("mxfp4", {}, q_mx)):
            for v in ("rows", "rows2d"):
                for br, w in ((256, 8), (512, 8)):
                    t = T(lambda: trb.quantize_packed(x, spec, variant=v, BM=br, num_warps=w, **kw))
                    sweep.append((f"{spec} {v} BR={br} w={w}", t, nb))
            for bc, w, nbd in ((256, 1, 8), (512, 2, 8), (512, 4, 4)):
                t = T(lambda: trb.quantize_packed(x, spec, axis=0, BN=bc, BM=nbd, num_warps=w, **kw))
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
    if hasattr(trb, "quantize_rht"):
        rows.append(("RHT(te)+quantize nvfp4 (given)", T(lambda: trb.quantize_rht(x, nv, signs="te", s_enc_dec=sed)), q_nv))
        rows.append(("RHT(te)+quantize nvfp4 columnwise (given)", T(lambda: trb.quantize_rht(x, nv, axis=0, signs="te", s_enc_dec=sed)), q_nv))
        rows.append(("RHT(te)+quantize mxfp4", T(lambda: trb.quantize_rht(x, "mxfp4", signs="te")), q_mx))
    o = trb.quantize_packed(x, nv)
    rows.append(("dequantize nvfp4 -> fp32", T(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv)), dq_nv))
    rows.append(("dequantize nvfp4 -> fp32 v1 kernel", T(lambda: trb.dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, variant="v1")), dq_nv))
    om = trb.quantize_packed(x, "mxfp4")
    rows.append(("dequantize mxfp4 -> fp32", T(lambda: trb.dequantize_packed(om["packed"], om["scales"], None, "mxfp4")), dq_mx))
    del o, om
    if args.torch_backend:
        rows.append(("torch backend quantize nvfp4", cuda_time(lambda: tb.quantize_tensors(x, nv), 3), q_nv))
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

        f = torch.compile(lambda t: NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max())))
        rows.append(("torchao NVFP4Tensor.to_nvfp4 (compiled)", cuda_time(lambda: f(x), 10), q_nv))
    except Exception as exc:  # noqa: BLE001
        print(f"torchao: not benchmarked ({type(exc).__name__}: {str(exc)[:100]})")

    print(f"\n{'kernel':<42} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
    for name, t, nbytes in rows:
        bw = nbytes / t
        print(f"{name:<42} {t * 1e3:8.3f} {bw / 1e12:7.2f} {100 * bw / bw_copy:6.1f}%")
    if failures:
        print(f"\nBIT-EXACTNESS FAILURES ({len(failures)}):\n  " + "\n  ".join(failures[:20]))
        sys.exit(1)
    print("\nall outputs bit-exact with the emulator")


if __name__ == "__main__":
    main()
