"""The public calls on the GPU, as users call them, against baselines timed in the same run.

    python benchmarks/bench_gpu_api.py [--n 16384] [--gemm 8192] [--iters 20] [--only quant,deq,gemm,host,linear,torchao,memory]

Times ``fp4spec.quantize`` (every scheme the GPU backends take, rowwise and ``axis=0``, ``rht="te"``,
``pad=True``, SR with given bits and with a seed), ``fp4spec.dequantize`` (nvfp4, mxfp4, mxfp8_e4m3, hif4, if4 to float32),
``fp4spec.matmul`` of CUDA operands (``sm90-bf16`` and the certified models, 8192^3; each result
compared with the emulator on 64 x 64 sampled outputs), the host overhead of a warm call on
a 16 x 64 tensor and a fake-quant linear ``dq(q(x)) @ dq(q(w)).T``, each with CUDA events
around the public call (host work included), and prints:

* ms and the share of a bf16 copy's bandwidth for the bytes the call must move (x read, codes
  and scales written), the copy timed in the same run; "pipelined": the same for calls back to
  back between two events (the host queues the next call while the device runs this one, as in
  a training loop: a call then costs the larger of its host and device times, not their sum);
* for quantize, the time of the kernels alone (``quantize_packed`` on the prepared tensor:
  the public call's cost over the kernels it launches); for SR also the generic ``rows``
  kernel's and that of ``rows_sr`` with ``TritonConfig.rows_sr_fp32_pipe`` (checked equal);
  rows with given bits count their int32 bits as read bytes too;
* matmul and the fake-quant linear against bf16 ``torch.matmul`` of the same size;
* torchao's compiled NVFP4 / MXFP4 quantize beside ours when torchao is importable.

Checks (it exits non-zero otherwise): every timed quantize equals the emulator on a 256-row
slice of x, bit for bit.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import torch

from gpu_timing import copy_baseline, event_time, log, stream_time

import fp4spec
from fp4spec.backends.triton import DEFAULT_CONFIG, quantize_packed
from fp4spec.backends.triton.launch import SR_ELEMENTS

QUANT = [  # (label, scheme, kwargs)
    ("mxfp4", "mxfp4", {}),
    ("mxfp4 rceil", "mxfp4:scale_rule=rceil", {}),
    ("mxfp4 axis=0", "mxfp4", {"axis": 0}),
    ("mxfp4 rht=te", "mxfp4", {"rht": "te"}),
    ("nvfp4", "nvfp4", {}),
    ("nvfp4 axis=0", "nvfp4", {"axis": 0}),
    ("nvfp4 rht=te", "nvfp4", {"rht": "te"}),
    ("nvfp4_2d", "nvfp4_2d", {}),
    ("ufp4", "ufp4", {}),
    ("nvint4", "nvint4", {}),
    ("mxfp6_e2m3", "mxfp6_e2m3", {}),
    ("mxfp6_e3m2", "mxfp6_e3m2", {}),
    ("mxfp8_e4m3", "mxfp8_e4m3", {}),
    ("mxfp8_e5m2", "mxfp8_e5m2", {}),
    ("mxfp8_e4m3 rceil", "mxfp8_e4m3:scale_rule=rceil", {}),
    ("mxfp8_e4m3 axis=0", "mxfp8_e4m3", {"axis": 0}),
    ("mxfp6_e2m3 axis=0", "mxfp6_e2m3", {"axis": 0}),
    ("mxfp8_e4m3 sr (seed: Philox on the device)", "mxfp8_e4m3", {"rounding": "sr", "seed": 1234}),
    ("mxfp8_e4m3 pad=True", "mxfp8_e4m3", {"pad": True, "cols": -8}),
    ("hif4", "hif4", {}),
    ("hif4 axis=0", "hif4", {"axis": 0}),
    ("hif4 pad=True", "hif4", {"pad": True, "cols": -8}),
    ("if4", "if4", {}),
    ("if4 axis=0", "if4", {"axis": 0}),
    ("if4 sr (given bits)", "if4", {"rounding": "sr"}),
    ("if4_2d", "if4_2d", {}),
    ("nvfp4 sr (given bits)", "nvfp4", {"rounding": "sr"}),
    ("nvfp4 sr (seed: Philox on the device)", "nvfp4", {"rounding": "sr", "seed": 1234}),
    ("mxfp4 sr (given bits)", "mxfp4", {"rounding": "sr"}),
    ("mxfp4 sr (seed: Philox on the device)", "mxfp4", {"rounding": "sr", "seed": 1234}),
    ("nvfp4 pad=True", "nvfp4", {"pad": True, "cols": -8}),
]


#: --sweep: also time rows_sr's other tiles and its FP32-pipe encoder
SWEEP = False
#: rows_sr tiles timed beside the shipped one (TritonConfig.rows_sr_blocks / rows_sr_warps)
SR_TILES = [(64, 2), (256, 4), (256, 8)]


def out_bytes(q) -> int:
    bits = sum(b.numel() for b in (q.e1_8, q.e1_16) if b is not None)  # HiF4: a byte per micro-exponent bit
    return int(q.data.numel() * q.data.element_size() + q.scales.numel() + bits)


def check_slice(x, scheme, kw) -> bool:
    """The public call on the device equals the emulator on a CPU copy, bit for bit, on the
    first 256 rows (columns for axis=0) of x."""
    cut = (slice(None), slice(0, 256)) if kw.get("axis", -1) == 0 else (slice(0, 256),)
    xs = x[cut]
    ks = {k: (v[cut] if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    ref = fp4spec.quantize(xs.cpu(), scheme, backend="numpy",
                           **{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in ks.items()})
    return fp4spec.quantize(xs, scheme, **ks).equals(ref)


def bench_quant(x, iters, t_copy, rows):
    bad = 0
    for label, scheme, kw in QUANT:
        kw = dict(kw)
        xi = x[:, :x.shape[1] + kw.pop("cols")] if "cols" in kw else x
        if kw.get("rounding") == "sr" and "seed" not in kw:
            kw["rbits"] = torch.randint(0, 256, xi.shape, dtype=torch.int32, device=x.device)
        try:
            q = fp4spec.quantize(xi, scheme, **kw)
            t = event_time(lambda: fp4spec.quantize(xi, scheme, **kw), iters)
        except Exception as exc:  # noqa: BLE001 -- a row that cannot run says why
            log(f"{label}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        moved = xi.numel() * xi.element_size() + out_bytes(q)
        if "rbits" in kw:  # given bits are read too (int32 per element)
            moved += kw["rbits"].numel() * kw["rbits"].element_size()
        bw = moved / t
        copy_bw = 2 * x.numel() * x.element_size() / t_copy
        tp = stream_time(lambda: fp4spec.quantize(xi, scheme, **kw), iters)
        kern = f"pipelined {tp * 1e3:.3f} ms ({moved / tp / copy_bw:.0%}); "
        if q.backend == "triton" and "rht" not in kw and "pad" not in kw:
            pk = {k: v for k, v in kw.items() if k in ("axis", "rounding", "seed", "rbits")}
            tk = event_time(lambda: quantize_packed(xi, scheme, **pk), iters)
            kern += f"{tk * 1e3:.3f} ms ({t / tk:.2f}x)"
            rows_sr = (SWEEP and kw.get("rounding") == "sr" and kw.get("axis", -1) == -1
                       and fp4spec.get_scheme(scheme).element.name in SR_ELEMENTS)
            if rows_sr:  # the generic kernel SR ran on before rows_sr; its FP32-pipe encoder
                tg = event_time(lambda: quantize_packed(xi, scheme, variant="rows", **pk), iters)
                fp = replace(DEFAULT_CONFIG, rows_sr_fp32_pipe=True)
                tf = event_time(lambda: quantize_packed(xi, scheme, config=fp, **pk), iters)
                same = all(torch.equal(a, b) for a, b in zip(quantize_packed(xi, scheme, config=fp, **pk).values(),
                                                            quantize_packed(xi, scheme, **pk).values())
                           if isinstance(a, torch.Tensor))
                kern += (f"; generic rows {tg * 1e3:.3f} ms; rows_sr_fp32_pipe {tf * 1e3:.3f} ms"
                         f" ({'same bits' if same else 'DIFFERS'})")
                bad += not same
                for br, w in SR_TILES:  # rows_sr tiles other than the config's (blocks per program, warps)
                    ts = event_time(lambda: quantize_packed(xi, scheme, BM=br, num_warps=w, **pk), iters)
                    kern += f"; BR={br} w={w} {ts * 1e3:.3f} ms"
        ok = check_slice(xi, scheme, kw)
        bad += not ok
        rows.append((f"quantize {label}", q.backend, t, f"{bw / (2 * x.numel() * x.element_size() / t_copy):.0%}",
                     kern, "ok" if ok else "DIFFERS"))
        log(f"{label}: {t * 1e3:.3f} ms on {q.backend} {kern} {'ok' if ok else 'DIFFERS'}")
    return bad


def bench_deq(x, iters, t_copy, rows):
    for scheme in ("nvfp4", "mxfp4", "mxfp8_e4m3", "hif4", "if4"):
        q = fp4spec.quantize(x, scheme)
        for dtype in (torch.float32, torch.bfloat16):
            t = event_time(lambda: fp4spec.dequantize(q, dtype=dtype), iters)
            tp = stream_time(lambda: fp4spec.dequantize(q, dtype=dtype), iters)
            moved = out_bytes(q) + x.numel() * dtype.itemsize
            copy_bw = 2 * x.numel() * x.element_size() / t_copy
            name = str(dtype).replace("torch.", "")
            rows.append((f"dequantize {scheme} -> {name}", "auto", t, f"{moved / t / copy_bw:.0%}",
                         f"pipelined {tp * 1e3:.3f} ms ({moved / tp / copy_bw:.0%})", ""))
            log(f"dequantize {scheme} -> {name}: {t * 1e3:.3f} ms, pipelined {tp * 1e3:.3f} ms")


def peak_extra_bytes(fn) -> tuple:
    """(peak bytes the call allocated beyond what it returns, bytes it returns): the
    temporaries, from torch's caching allocator (memory already held is not counted)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    return torch.cuda.max_memory_allocated() - base - kept, kept, out


def bench_memory(x, rows):
    """Peak temporaries per public call on the 16384^2 bf16 x (the issue: none full-size)."""
    calls = [(label, scheme, kw) for label, scheme, kw in QUANT if "cols" not in kw and kw.get("rounding") != "sr"]
    calls.append(("nvfp4 sr (seed)", "nvfp4", {"rounding": "sr", "seed": 5}))
    full = x.numel() * x.element_size()
    for label, scheme, kw in calls:
        try:
            extra, kept, _ = peak_extra_bytes(lambda: fp4spec.quantize(x, scheme, **kw))
        except Exception as exc:  # noqa: BLE001
            log(f"memory {label}: {type(exc).__name__}: {str(exc)[:100]}")
            continue
        rows.append((f"memory: quantize {label}", "auto", 0.0, f"temporaries {extra / 2**20:.1f} MiB "
                     f"({extra / full:.2f}x x's bytes), output {kept / 2**20:.1f} MiB", "", ""))
        log(f"memory {label}: temporaries {extra / 2**20:.1f} MiB, output {kept / 2**20:.1f} MiB")
    q = fp4spec.quantize(x, "nvfp4")
    extra, kept, _ = peak_extra_bytes(lambda: fp4spec.dequantize(q))
    rows.append(("memory: dequantize nvfp4", "auto", 0.0, f"temporaries {extra / 2**20:.1f} MiB, output "
                 f"{kept / 2**20:.1f} MiB", "", ""))


GEMM_MODELS = ("sm90-bf16", "sm100-mxf4nvf4", "sm100-mxf8f6f4", "exact", "fp32")


def sampled_exact(qa, qb, model, out) -> bool:
    """The device result equals the emulator on 64 sampled rows x 64 sampled columns."""
    import numpy as np

    from fp4spec.emulator.gemm import matmul_block
    from fp4spec.matmul_operands import check_operands

    na, nb = qa.to_numpy(), qb.to_numpy()
    m = fp4spec.get_accumulator(model)
    ops = check_operands(m, na, nb)
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(qa.shape[0], 64, replace=False))
    cols = np.sort(rng.choice(qb.shape[0], 64, replace=False))
    want = matmul_block(na, nb, m, ops, rows, cols)
    got = out[torch.as_tensor(rows, device=out.device)][:, torch.as_tensor(cols, device=out.device)].cpu().numpy()
    return bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))


def bench_gemm(n, iters, rows, models=GEMM_MODELS):
    """fp4spec.matmul per scheme and model. The emulator fallback of uncertified tiles is
    replaced by a count (an 8192^3 fallback would run for hours on the CPU): the timing is
    the device's, and the tiles it would hand to the CPU are reported."""
    from fp4spec.backends.triton import certify

    uncertified = []
    real_fill = certify.fill_uncertified

    def count_only(out, cert, *args, **kw):
        uncertified.append(int((cert.bad != 0).sum()))
        return 0

    certify.fill_uncertified = count_only
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t_bf16 = event_time(lambda: a @ b.T, iters)
    flops = 2 * n ** 3
    rows.append((f"bf16 torch.matmul {n}^3", "-", t_bf16, f"{flops / t_bf16 / 1e12:.0f} TFLOP/s", "", ""))
    try:
        for scheme in ("nvfp4", "mxfp4"):
            qa, qb = fp4spec.quantize(a, scheme), fp4spec.quantize(b, scheme)
            for model in models:
                if model == "sm100-mxf8f6f4" and scheme != "mxfp4":
                    continue
                uncertified.clear()
                try:
                    out = fp4spec.matmul(qa, qb, accumulator=model)
                except Exception as exc:  # noqa: BLE001
                    log(f"matmul {scheme} {model}: {type(exc).__name__}: {str(exc)[:160]}")
                    continue
                bad = uncertified[0] if uncertified else 0
                t = event_time(lambda: fp4spec.matmul(qa, qb, accumulator=model), max(3, iters // 4))
                tp = stream_time(lambda: fp4spec.matmul(qa, qb, accumulator=model), max(3, iters // 4))
                ok = bad == 0 and sampled_exact(qa, qb, model, out)
                note = ("64x64 sampled == emulator" if ok else "DIFFERS") if bad == 0 else f"{bad} tiles uncertified"
                rows.append((f"matmul {scheme} {model} {n}^3", "triton" if out.is_cuda else "?", t,
                             f"{t_bf16 / t:.0%} of bf16", f"pipelined {tp * 1e3:.2f} ms ({t_bf16 / tp:.0%})", note))
                log(f"matmul {scheme} {model}: {t * 1e3:.2f} ms ({t_bf16 / t:.0%} of bf16), pipelined "
                    f"{tp * 1e3:.2f} ms ({t_bf16 / tp:.0%}), {note}")
        from fp4spec.backends.triton import gemm as G

        qa, qb = fp4spec.quantize(a, "mxfp4"), fp4spec.quantize(b, "mxfp4")
        for cfg in CERT_CONFIGS:  # the certificate kernel's tile (its second accumulator costs registers)
            t = event_time(lambda: G.matmul(qa, qb, accumulator="exact", config=cfg), max(3, iters // 4))
            rows.append((f"  mxfp4 exact, config {cfg}", "triton", t, f"{t_bf16 / t:.0%} of bf16", "", ""))
            log(f"mxfp4 exact config {cfg}: {t * 1e3:.2f} ms ({t_bf16 / t:.0%} of bf16)")
    finally:
        certify.fill_uncertified = real_fill
    return t_bf16


CERT_CONFIGS = ("prepass-128x128-w8", "prepass-128x128", "prepass-128x256", "hybrid-128x128")


def bench_linear(iters, rows):
    m, k, n = 8192, 4096, 4096
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    t_bf16 = event_time(lambda: x @ w.T, iters)
    tp_bf16 = stream_time(lambda: x @ w.T, iters)

    def fake_quant_f32():  # float32 values, then a cast: the call before dtype= existed
        xq = fp4spec.dequantize(fp4spec.quantize(x, "nvfp4")).to(torch.bfloat16)
        wq = fp4spec.dequantize(fp4spec.quantize(w, "nvfp4")).to(torch.bfloat16)
        return xq @ wq.T

    def fake_quant():
        xq = fp4spec.dequantize(fp4spec.quantize(x, "nvfp4"), dtype=torch.bfloat16)
        wq = fp4spec.dequantize(fp4spec.quantize(w, "nvfp4"), dtype=torch.bfloat16)
        return xq @ wq.T

    ref = fake_quant()
    for label, fn in (("dequantize to float32, .to(bf16)", fake_quant_f32), ("dequantize(dtype=bf16)", fake_quant)):
        t = event_time(fn, iters)
        tp = stream_time(fn, iters)
        rows.append((f"fake-quant linear nvfp4 8192x4096x4096, {label}", "auto", t, f"{t / t_bf16:.2f}x bf16",
                     f"pipelined {tp * 1e3:.3f} ms ({tp / tp_bf16:.2f}x bf16 pipelined)", ""))
        log(f"fake-quant linear, {label}: {t * 1e3:.3f} ms, {t / t_bf16:.2f}x the bf16 matmul; pipelined "
            f"{tp / tp_bf16:.2f}x")
    for mode in ("default", "reduce-overhead"):  # one graph (the custom operators); CUDA graphs
        f = torch.compile(fake_quant, fullgraph=True, mode=mode)
        for _ in range(3):
            out = f()
        t = event_time(f, iters)
        same = torch.equal(out, ref)
        rows.append((f"fake-quant linear, torch.compile mode={mode}", "auto", t, f"{t / t_bf16:.2f}x bf16", "",
                     "ok" if same else "DIFFERS"))
        log(f"fake-quant linear compiled ({mode}): {t * 1e3:.3f} ms, {t / t_bf16:.2f}x bf16, {'ok' if same else 'DIFFERS'}")


def bench_host(rows):
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    for scheme in ("nvfp4", "mxfp4"):
        q = fp4spec.quantize(x, scheme)
        for label, fn in (("quantize", lambda: fp4spec.quantize(x, scheme)), ("dequantize", lambda: fp4spec.dequantize(q))):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            n = 200
            for _ in range(n):
                fn()
            t_host = (time.perf_counter() - t0) / n  # launches queue: the host's time per call
            torch.cuda.synchronize()
            rows.append((f"host: {label} {scheme} 16x64", "auto", t_host, "", "", ""))
            log(f"host {label} {scheme}: {t_host * 1e6:.0f} us per call")


def bench_graph_host(rows):
    """The host time of a captured quantize + dequantize (torch.cuda.graph), per replay: what
    a training step captured whole pays instead of the eager calls' launches."""
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    for scheme in ("nvfp4", "mxfp4"):
        for _ in range(3):
            fp4spec.dequantize(fp4spec.quantize(x, scheme))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fp4spec.dequantize(fp4spec.quantize(x, scheme))
        for _ in range(20):
            g.replay()
        torch.cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            g.replay()
        t_host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        rows.append((f"host: quantize + dequantize {scheme} 16x64, one CUDA graph replay", "triton", t_host, "", "",
                     ""))
        log(f"host graph replay {scheme}: {t_host * 1e6:.0f} us per quantize + dequantize")


def bench_torchao(x, iters, rows):
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    except Exception as exc:  # noqa: BLE001
        log(f"torchao: not benchmarked ({type(exc).__name__}: {str(exc)[:80]})")
        return

    @torch.compile
    def ao_nv(t):
        return NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max()))

    @torch.compile
    def ao_mx(t):
        return to_mx(t, torch.float4_e2m1fn_x2, 32)

    for label, fn in (("torchao nvfp4 (compiled)", ao_nv), ("torchao mxfp4 (compiled)", ao_mx)):
        try:
            t = event_time(lambda: fn(x), iters)
            tp = stream_time(lambda: fn(x), iters)
        except Exception as exc:  # noqa: BLE001
            log(f"{label}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        rows.append((label, "torchao", t, "", f"pipelined {tp * 1e3:.3f} ms", ""))
        log(f"{label}: {t * 1e3:.3f} ms, pipelined {tp * 1e3:.3f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--gemm", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--only", default="quant,deq,gemm,host,linear,torchao,memory")
    ap.add_argument("--gemm-models", default=",".join(GEMM_MODELS))
    ap.add_argument("--sweep", action="store_true", help="also time rows_sr's other tiles and encoders")
    ap.add_argument("--quant", default=None, help="comma-separated labels of QUANT to time (default: all)")
    args = ap.parse_args()
    global SWEEP, QUANT
    SWEEP = args.sweep
    if args.quant:
        QUANT = [r for r in QUANT if r[0] in args.quant.split(",")]
    only = set(args.only.split(","))
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, fp4spec {fp4spec.__version__}")
    x = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    t_copy, _ = copy_baseline(x, args.iters)
    rows = [(f"bf16 copy {args.n}^2", "-", t_copy, "100%", "", "")]
    bad = 0
    if "quant" in only:
        bad += bench_quant(x, args.iters, t_copy, rows)
    if "torchao" in only:
        bench_torchao(x, args.iters, rows)
    if "deq" in only:
        bench_deq(x, args.iters, t_copy, rows)
    if "gemm" in only:
        bench_gemm(args.gemm, args.iters, rows, args.gemm_models.split(","))
    if "linear" in only:
        bench_linear(args.iters, rows)
    if "host" in only:
        bench_host(rows)
        bench_graph_host(rows)
    if "memory" in only:
        bench_memory(x, rows)
    print()
    print("| call | backend | ms | vs baseline | kernels alone (call / kernels) | check |")
    print("|---|---|---:|---|---|---|")
    for label, backend, t, rel, kern, ok in rows:
        ms = "" if t == 0 else f"{t * 1e3:.3f}" if t >= 1e-4 else f"{t * 1e6:.0f} us"
        print(f"| {label} | {backend} | {ms} | {rel} | {kern} | {ok} |")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
