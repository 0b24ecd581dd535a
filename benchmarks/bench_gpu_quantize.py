"""GPU timing of quantize_packed and dequantize_packed (run on a CUDA device). Exactness is the
``gpu`` tests' (tests/backends/test_triton_gpu.py); this only times and prints ratios.

CUDA-graph replay, median of --iters runs, on a SIZE x SIZE bf16 tensor, against the faster
bf16 copy (cudaMemcpy or an elementwise kernel) in the same run. Bytes per element: quantize 2
read + 0.5 written + scale bytes; dequantize 0.5 read + scale bytes + 4 written (float32 out);
the amax pass 2 read. Sections:

* ``time``: the main table (every variant and option, dequantize; ``--tune`` sweeps the tiles
  and times the table with the best ones, as a TritonConfig);
* ``rht``: the fused RHT + quantize next to plain quantize (whole calls) and the ratios;
* ``cols``: the columnwise variants and a tile sweep;
* ``torchao``: torchao's compiled NVFP4 quantize when importable.

    python benchmarks/bench_gpu_quantize.py [--size 16384] [--iters 50] [--only time,rht] [--tune]

With $OUT set, the table is also written to $OUT/bench_gpu_quantize.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import copy_baseline, cuda_time, log  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.backends import torch_backend as tb  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG, capability  # noqa: E402
from fp4spec.backends.triton.launch import global_amax, rht_global_amax  # noqa: E402
from fp4spec.backends.triton.quantize import dequantize_packed, quantize_packed  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

SECTIONS = ("time", "rht", "cols", "torchao")


def timed(rows, name, fn, nbytes, T):
    """Time fn, append (name, seconds, bytes) to rows and print the row at once."""
    t = T(fn)
    rows.append((name, t, nbytes))
    log(f"  {name:<56} {t * 1e3:8.3f} ms")
    return t


def tune(x, T, q_nv, q_mx, dq_nv, bw_copy):
    """A sweep of the rowwise, columnwise (cols_tile) and dequantize tiles; the best as a config."""
    n = x.shape[0]
    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), nv)
    sweep = []
    for spec, kw, nb in (("nvfp4", {"s_enc_dec": sed}, q_nv), ("mxfp4", {}, q_mx)):
        for v in ("rows", "rows_split"):
            for br, w in ((256, 8), (512, 8)):
                sweep.append((f"{spec} {v} BR={br} w={w}",
                              T(lambda: quantize_packed(x, spec, variant=v, BM=br, num_warps=w, **kw)), nb))
        for bc, w, nbd in ((256, 1, 8), (512, 2, 8), (512, 4, 4)):
            sweep.append((f"{spec} cols_tile BC={bc} w={w} bands={nbd}",
                          T(lambda: quantize_packed(x, spec, axis=0, BN=bc, BM=nbd, num_warps=w, variant="cols_tile",
                                                    **kw)), nb))
    o = quantize_packed(x, nv)
    for br, w in ((512, 8), (1024, 8)):
        sweep.append((f"dequantize nvfp4 BR={br} w={w}",
                       T(lambda: dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, BM=br, num_warps=w)),
                       dq_nv))
    best = {}
    for struct, spec in (("rows_two_level", "nvfp4"), ("rows_mx", "mxfp4")):
        _, name = min((t, nm) for nm, t, _ in sweep if nm.startswith(spec + " rows"))
        _, v, br, w = name.split()
        best[struct] = (v, int(br[3:]), int(w[2:]))
    _, name = min((t, nm) for nm, t, _ in sweep if nm.startswith("nvfp4 cols_tile"))
    _, _, bc, w, bands = name.split()
    best.update(cols_tile_columns=int(bc[3:]), cols_tile_warps=int(w[2:]), cols_tile_bands=int(bands[6:]))
    _, name = min((t, nm) for nm, t, _ in sweep if nm.startswith("dequantize"))
    _, _, br, w = name.split()
    best.update(dequant_elements=16 * int(br[3:]), dequant_warps=int(w[2:]))
    print(f"\n{'sweep':<42} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
    for name, t, nbytes in sweep:
        print(f"{name:<42} {t * 1e3:8.3f} {nbytes / t / 1e12:7.2f} {100 * nbytes / t / bw_copy:6.1f}%")
    print(f"chosen: {best}")
    return replace(DEFAULT_CONFIG, **best)


def main_table(x, cfg, T, rows, q_nv, q_mx, ne, torch_backend):
    n = x.shape[0]
    nv = fp4spec.get_scheme("nvfp4")
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), nv)
    dq_nv = ne // 2 + ne // 16 + 4 * ne
    dq_mx = ne // 2 + ne // 32 + 4 * ne
    q = lambda *a, **k: quantize_packed(*a, config=cfg, **k)  # noqa: E731
    log("time: the main table")
    timed(rows, "quantize nvfp4 (tensor scale given)", lambda: q(x, nv, s_enc_dec=sed), q_nv, T)
    timed(rows, "quantize nvfp4 (incl. amax pass)", lambda: q(x, nv), q_nv, T)
    timed(rows, "amax pass alone", lambda: global_amax(x, n, n, n, 1), 2 * ne, T)
    timed(rows, "quantize nvfp4 tile kernel (given)", lambda: q(x, nv, s_enc_dec=sed, variant="tile"), q_nv, T)
    timed(rows, "quantize nvfp4 cuBLAS scale layout (given)", lambda: q(x, nv, s_enc_dec=sed, scale_layout="cublas"),
          q_nv, T)
    timed(rows, "quantize nvfp4 rows_split variant (given)", lambda: q(x, nv, s_enc_dec=sed, variant="rows_split"),
          q_nv, T)
    timed(rows, "quantize mxfp4 rows variant", lambda: q(x, "mxfp4", variant="rows"), q_mx, T)
    timed(rows, "quantize mxfp4 rows_split variant", lambda: q(x, "mxfp4", variant="rows_split"), q_mx, T)
    timed(rows, "quantize nvfp4 SR Philox (given)", lambda: q(x, nv, s_enc_dec=sed, rounding="sr", seed=1), q_nv, T)
    timed(rows, "quantize nvfp4_2d (given, tile)", lambda: q(x, "nvfp4_2d", s_enc_dec=sed), q_nv, T)
    timed(rows, "quantize nvfp4 columnwise (given)", lambda: q(x, nv, axis=0, s_enc_dec=sed), q_nv, T)
    timed(rows, "quantize mxfp4", lambda: q(x, "mxfp4"), q_mx, T)
    timed(rows, "quantize mxfp4 tile kernel", lambda: q(x, "mxfp4", variant="tile"), q_mx, T)
    timed(rows, "quantize mxfp4 columnwise", lambda: q(x, "mxfp4", axis=0), q_mx, T)
    o = q(x, nv)
    timed(rows, "dequantize nvfp4 -> fp32",
          lambda: dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, config=cfg), dq_nv, T)
    timed(rows, "dequantize nvfp4 -> fp32 tile kernel",
          lambda: dequantize_packed(o["packed"], o["scales"], o["global_scale"], nv, variant="tile"), dq_nv, T)
    om = q(x, "mxfp4")
    timed(rows, "dequantize mxfp4 -> fp32",
          lambda: dequantize_packed(om["packed"], om["scales"], None, "mxfp4", config=cfg), dq_mx, T)
    del o, om
    if torch_backend:
        rows.append(("torch backend quantize nvfp4", cuda_time(lambda: tb.quantize_tensors(x, nv), 3), q_nv))


def time_rht(x, T, rows, q_nv, q_mx, ne):
    """Fused RHT + quantize next to the default plain quantize_packed calls (whole calls; tensor
    scale given for NVFP4, and with the amax pass), the ratios fused / plain, a few
    configurations (bf16 roundings, float32 output, tiles)."""
    te, sd32 = RHT.te(), RHT.from_seed(5, out_dtype="float32")
    n = x.shape[0]
    nv = fp4spec.get_scheme("nvfp4")
    rp = capability.rht_params(te)
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), nv)
    sed_r = tb.tensor_scale(rht_global_amax(x, n, n, n, 1, rp), nv)
    sed_c = tb.tensor_scale(rht_global_amax(x, n, n, 1, n, rp), nv)
    ratios = []
    log("time rht: plain (default quantize_packed) vs fused RHT + quantize")
    for spec, nb in (("nvfp4", q_nv), ("mxfp4", q_mx)):
        for axis, tag in ((-1, "rowwise"), (0, "columnwise")):
            kw = {"s_enc_dec": sed} if spec == "nvfp4" else {}
            kr = {"s_enc_dec": sed_r if axis == -1 else sed_c} if spec == "nvfp4" else {}
            tp = timed(rows, f"{spec} {tag} plain" + (" (given)" if kw else ""),
                       lambda: quantize_packed(x, spec, axis=axis, **kw), nb, T)
            tf = timed(rows, f"{spec} {tag} RHT(te)+quantize" + (" (given)" if kr else ""),
                       lambda: quantize_packed(x, spec, axis=axis, rht=te, **kr), nb, T)
            ratios.append((f"{spec} {tag}", tf / tp))
    log("time rht: incl. the amax passes")
    tp = timed(rows, "nvfp4 rowwise plain incl. amax pass", lambda: quantize_packed(x, nv), q_nv, T)
    tf = timed(rows, "nvfp4 rowwise RHT incl. RHT+amax pass", lambda: quantize_packed(x, nv, rht=te), q_nv, T)
    ratios.append(("nvfp4 rowwise, amax incl.", tf / tp))
    tp = timed(rows, "nvfp4 columnwise plain incl. amax pass", lambda: quantize_packed(x, nv, axis=0), q_nv, T)
    tf = timed(rows, "nvfp4 columnwise RHT incl. RHT+amax pass", lambda: quantize_packed(x, nv, axis=0, rht=te),
               q_nv, T)
    ratios.append(("nvfp4 columnwise, amax incl.", tf / tp))
    timed(rows, "amax pass alone", lambda: global_amax(x, n, n, n, 1), 2 * ne, T)
    timed(rows, "RHT+amax pass rowwise", lambda: rht_global_amax(x, n, n, n, 1, rp), 2 * ne, T)
    timed(rows, "RHT+amax pass columnwise", lambda: rht_global_amax(x, n, n, 1, n, rp), 2 * ne, T)
    log("time rht: configurations")
    for cvt in (0, 2):
        cfg = replace(DEFAULT_CONFIG, rht_bf16_cvt=cvt)
        timed(rows, f"nvfp4 rowwise RHT bf16 cvt={cvt} (given)",
              lambda: quantize_packed(x, nv, rht=te, s_enc_dec=sed_r, config=cfg), q_nv, T)
    cfg = replace(DEFAULT_CONFIG, rht_bf16_cvt=2)
    timed(rows, "mxfp4 columnwise RHT bf16 cvt=2", lambda: quantize_packed(x, "mxfp4", axis=0, rht=te, config=cfg),
          q_mx, T)
    timed(rows, "nvfp4 rowwise RHT fp32 out (given)", lambda: quantize_packed(x, nv, rht=sd32, s_enc_dec=sed_r),
          q_nv, T)
    timed(rows, "nvfp4 rowwise RHT unfused (given)",
          lambda: quantize_packed(x, nv, rht=te, s_enc_dec=sed_r, variant="unfused"), q_nv, T)
    for br, w in ((128, 4), (512, 8)):
        timed(rows, f"nvfp4 rowwise RHT BR={br} w={w} (given)",
              lambda: quantize_packed(x, nv, rht=te, s_enc_dec=sed_r, BM=br, num_warps=w), q_nv, T)
    return ratios


def time_cols(x, T, rows, q_nv, q_mx):
    """Columnwise cols_tile vs cols, and a cols tile sweep (at most 8 blocks per thread)."""
    n = x.shape[0]
    sed = tb.tensor_scale(global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    for spec, kw, nb in (("nvfp4", {"s_enc_dec": sed}, q_nv), ("mxfp4", {}, q_mx)):
        log(f"time cols {spec}")
        timed(rows, f"{spec} columnwise cols_tile", lambda: quantize_packed(x, spec, axis=0, variant="cols_tile", **kw),
              nb, T)
        cfg = DEFAULT_CONFIG.cols_fast[fp4spec.get_scheme(spec).block_size]
        timed(rows, f"{spec} columnwise cols (default {cfg[0]}/{cfg[1]}/{cfg[2]})",
              lambda: quantize_packed(x, spec, axis=0, variant="cols", **kw), nb, T)
        for bc, w, blocks in ((128, 4, None), (256, 4, None), (256, 8, None), (256, 4, 1)):
            if (bc, w) == cfg[:2] and blocks is None:
                continue
            timed(rows, f"{spec} cols BC={bc} w={w} NB={blocks or 'dflt'}",
                  lambda: quantize_packed(x, spec, axis=0, variant="cols", BN=bc, BM=blocks, num_warps=w, **kw), nb, T)
    timed(rows, "nvfp4 rowwise (default, reference)", lambda: quantize_packed(x, "nvfp4", s_enc_dec=sed), q_nv, T)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--tune", action="store_true", help="sweep tiles first; time the table with the best")
    ap.add_argument("--only", default=None, help=f"comma list of sections (default: all): {', '.join(SECTIONS)}")
    ap.add_argument("--torch-backend", action="store_true", help="also time the eager torch backend")
    args = ap.parse_args()
    only = set(SECTIONS) if args.only is None else {p.strip() for p in args.only.split(",") if p.strip()}
    bad = only - set(SECTIONS)
    if bad:
        ap.error(f"--only: unknown sections {', '.join(sorted(bad))} (known: {', '.join(SECTIONS)})")
    import triton

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}",
          flush=True)
    n = args.size
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ne = n * n
    t_copy, bw_copy = copy_baseline(x, args.iters)
    rows = [("copy bf16 (faster of cudaMemcpy and an elementwise kernel)", t_copy, 4 * ne)]
    q_nv = 2 * ne + ne // 2 + ne // 16
    q_mx = 2 * ne + ne // 2 + ne // 32
    T = lambda f: cuda_time(f, args.iters)  # noqa: E731
    ratios = []
    cfg = DEFAULT_CONFIG
    if "time" in only:
        if args.tune:
            cfg = tune(x, T, q_nv, q_mx, ne // 2 + ne // 16 + 4 * ne, bw_copy)
        main_table(x, cfg, T, rows, q_nv, q_mx, ne, args.torch_backend)
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
    print(f"\n{'kernel':<60} {'ms':>8} {'TB/s':>7} {'% copy':>7}")
    for name, t, nbytes in rows:
        bw = nbytes / t
        print(f"{name:<60} {t * 1e3:8.3f} {bw / 1e12:7.2f} {100 * bw / bw_copy:6.1f}%")
    if ratios:
        print("\nfused RHT + quantize / plain quantize_packed, whole calls (target <= 1.05):")
        for name, r in ratios:
            print(f"  {name:<30} {r:6.3f}" + ("" if r <= 1.05 else "  (above target)"))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu_quantize.json"), "w") as fh:
            json.dump({"rows": rows, "ratios": ratios, "copy_bw": bw_copy, "size": n}, fh, indent=1)
    log("total")


if __name__ == "__main__":
    main()
