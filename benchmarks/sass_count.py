"""Offline SASS instruction counts of the fused RHT + quantize kernels and the plain rowwise
kernels (no GPU needed): ``triton.compile`` for ``GPUTarget("cuda", 90, 32)`` (the H200's
sm_90) with the JIT's ``tt.divisibility=16`` on pointers and sizes, then triton's bundled
``cuobjdump -sass`` / ``-res-usage``. Static counts of straight-line kernels (a fallback
branch that tiles rarely take is counted too; ``--no-fallback`` variants are listed where
they exist).

    python benchmarks/sass_count.py [--only rows_rht,cols,rows_bf16,rows_sr,rows] [--ops] [--loop]

Prints, per kernel: registers, spills, SASS instructions per element, the ALU-pipe
(integer/logic) and FMA-pipe shares per element, compile seconds.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fp4spec.backends.triton import DEFAULT_CONFIG as CFG
from fp4spec.backends.triton.kernels import columnwise, rht_mma, rowwise
from fp4spec.backends.triton.kernels import rht as rht_kernels

ALU = {"LOP3", "SHF", "IADD3", "ISETP", "FSETP", "SEL", "FMNMX", "IMNMX", "VIMNMX", "VIMNMX3", "VIADDMNMX", "PRMT",
       "SGXT", "LEA", "FSEL", "BMSK", "IABS", "POPC", "FLO", "BREV", "PLOP3", "P2R", "R2P"}
FMA = {"FFMA", "FADD", "FMUL", "IMAD", "HFMA2", "VIADD", "FMUL2"}
NODIV = {"NBLK", "seed", "NCH", "sgn", "x_desc", "col_xor"}
SCHEME = {"nvfp4": dict(MX=False, RULE=0, EMAX=0, NAN_INF=False, SCALING=0),
          "mxfp4": dict(MX=True, RULE=0, EMAX=2, NAN_INF=True, SCALING=0)}
ELEM = dict(NTHR=7, INT4=False, NEGZERO=True, ZERO_POS=True)


def _tool():
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def compile_kernel(fn, sig, consts, num_warps, maxnreg=None):
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in sig if k not in NODIV}
    src = ASTSource(fn, signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts, attrs=attrs)
    t = time.time()
    opts = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    return k, time.time() - t


def _sass(k):
    """(cuobjdump -res-usage, cuobjdump -sass) of a compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        res = subprocess.run([_tool(), "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool(), "-sass", f.name], capture_output=True, text=True).stdout
    return res, sass


def _instructions(sass):
    """[(address, opcode)] of the SASS listing, NOPs left out."""
    out = []
    for line in sass.splitlines():
        mm = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)(.*)", line)
        if mm and mm.group(2) != "NOP":
            out.append((int(mm.group(1), 16), mm.group(2), mm.group(3)))
    return out


def sass_ops(k):
    """(registers, spill bytes, Counter of SASS opcodes) of a compiled kernel."""
    res, sass = _sass(k)
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", res)
    c = collections.Counter(op for _, op, _ in _instructions(sass))
    return (int(m.group(1)), int(m.group(4))) if m else (-1, -1), c


def loop_ops(k):
    """Counter of the SASS opcodes in the body of the kernel's first loop (from the target of
    the first backward branch to that branch): a persistent kernel's steady state, which the
    static count of the whole kernel (prologue, epilogue, rare paths) hides."""
    ins = _instructions(_sass(k)[1])
    for addr, op, rest in ins:
        t = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if t and int(t.group(1), 16) < addr:
            lo = int(t.group(1), 16)
            return collections.Counter(o for a, o, _ in ins if lo <= a <= addr)
    return None


SIG_ROWS = dict(x_ptr="*i64", q_ptr="*i64", s_ptr="*u8", r_ptr="*fp32", thr_ptr="*fp32", dthr_ptr="*fp32",
                mags_ptr="*fp32", ts_ptr="*fp32", NBLK="i32", NSC="i32", CPAD="i32", seed="i32")
SIG_COLS = dict(x_ptr="*i16", q_ptr="*i64", s_ptr="*i32", r_ptr="*fp32", thr_ptr="*fp32", dthr_ptr="*fp32",
                mags_ptr="*fp32", ts_ptr="*fp32", NCOL="i32", sxr="i32", srr="i32", QW="i32", NSC="i32", CPAD="i32",
                seed="i32", sgn=("i32",) * 16, col_xor="i32")
SIG_MMA = dict(x_ptr="*i16", x_desc="*i16", w_ptr="*i16", t_ptr="*i16", q_ptr="*i32", s_ptr="*u8", ts_ptr="*fp32", NELEM="i32",
               NBLK="i32", NTILES="i32", half="fp32", quarter="fp32")
SIG_TB = dict(x_ptr="*i32", q_ptr="*i32", s_ptr="*u8", ts_ptr="*fp32", NBLK="i32")
SIG_SR = dict(x_ptr="*i64", q_ptr="*i64", s_ptr="*u8", r_ptr="*i32", ts_ptr="*fp32", NBLK="i32", NSC="i32",
              CPAD="i32", seed="i32")


def _rht(signs=-1, cvt=1):
    return dict(SIGNS=signs, OUT_BF16=True, BF16_CVT=cvt)


#: (blocks per program, warps) of the fused rowwise kernel to count (the default first).
RHT_TILES = [(CFG.rht_rows_blocks, CFG.rht_rows_warps), (512, 8), (128, 4)]


def configs():
    """(name, kernel, signature, constexprs, num_warps, elements per thread)."""
    out = []
    for spec in ("nvfp4", "mxfp4"):
        K = 16 if spec == "nvfp4" else 32
        # fused RHT rowwise (quantize_packed's default tile first)
        # TE's mask goes in at run time (config rht_const_signs); compiled in only for comparison
        for signs, tag, slow in ((-1, "te", True), (-1, "te (no fallback)", False),
                                 (0xD7E8, "te compiled-in (no fallback)", False)):
            for br, w in RHT_TILES:
                c = dict(BR=br, K=K, FAST=True, SR=0, SR_BITS=8, IN_BF16=True, CUBLAS=False, **SCHEME[spec], **ELEM,
                         **_rht(signs))
                if "SLOW" in rht_kernels.quantize_rows_rht_kernel.arg_names:
                    c["SLOW"] = slow
                elif not slow:
                    continue
                out.append((f"rows_rht {spec} {tag} BR={br} w={w}", rht_kernels.quantize_rows_rht_kernel,
                            {**SIG_ROWS, "sgn": ("i32",) * 16}, c, w, br * K / (32 * w)))
                if spec == "mxfp4" and not tag.startswith("te compiled"):  # the encoder on bf16x2 words
                    out.append((f"rows_rht {spec} {tag} bf16x2 BR={br} w={w}", rht_kernels.quantize_rows_rht_kernel,
                                {**SIG_ROWS, "sgn": ("i32",) * 16}, {**c, "BF16X2": True}, w, br * K / (32 * w)))
        bc, w, nb = CFG.cols_fast[K]  # quantize_packed's columnwise default
        for rht, slow in ((True, True), (True, False), (False, True), (False, False)):
            c = dict(BC=bc, K=K, NB=nb, FAST=True, SR=0, SR_BITS=8, IN_BF16=True, CUBLAS=False, RHT=rht,
                     SCALAR_LOADS=(K, rht) in CFG.cols_scalar_loads, **SCHEME[spec], **ELEM, **_rht())
            if "SLOW" in columnwise.quantize_cols_kernel.arg_names:
                c["SLOW"] = slow
            elif not slow:
                continue
            out.append((f"cols {spec} {'RHT te' if rht else 'plain'} BC={bc} NB={nb} w={w}"
                        + ("" if slow else " (no fallback)"),
                        columnwise.quantize_cols_kernel, {**SIG_COLS, "sgn": ("i32",) * 16}, c, w, nb * bc * K / (32 * w)))
        # fused RHT rowwise on the tensor cores (arith "mma:sm90-bf16"): the wide dot
        for R, w in ((CFG.mma_rows, CFG.mma_warps), (128, 4), (128, 8)):
            for slow, spread in ((True, True), (False, False)):
                c = dict(R=R, K=K, EVEN=True, SLOW=slow, INTERP=False, PERSIST=False, STAGES=1, SPREAD=spread, TMA=False,
                         **SCHEME[spec])
                out.append((f"rows_mma {spec} R={R} w={w}" + ("" if slow else " (no fallbacks)"),
                            rht_mma.rows_rht_mma_kernel, SIG_MMA, c, w, R * 64 / (32 * w)))
        # ... with the operand by TMA (the default: pipelined persistent loop; static counts
        # include the pipeline's prologue and epilogue copies of the loop body)
        for pair in (True, False):
            for slow, spread, defer in ((True, True, True), (True, True, False), (False, False, False)):
                c = dict(R=CFG.mma_rows, K=K, EVEN=True, SLOW=slow, INTERP=False, PERSIST=False, TMA=True,
                         STAGES=CFG.mma_tma_stages[K], SPREAD=spread, PAIR=pair, DEFER=defer,
                         BLOCK_STORES=CFG.mma_block_stores, HW_CVT=True, PAIR_T=pair and CFG.mma_pair_tmajor,
                         BF16X2=K == 32 and defer and CFG.mma_bf16x2, **SCHEME[spec])
                g = CFG.mma_rows // 16
                box = (f"4,{g},2,8,16" if CFG.mma_pair_tmajor else f"{g},2,8,4,16") if pair else f"{CFG.mma_rows},64"
                sig = {**SIG_MMA, "x_desc": f"tensordesc<bf16[{box}]>"}  # mma_launcher's GPU box
                tag = ("" if slow else " (no fallbacks)") + ("" if defer or not slow else " per-tile") + \
                    (" bf16x2" if c["BF16X2"] else "")
                out.append((f"rows_mma_tma {spec} {'pair' if pair else 'plain'} R={CFG.mma_rows} w={CFG.mma_warps}" + tag,
                            rht_mma.rows_rht_mma_kernel, sig, c, CFG.mma_warps, CFG.mma_rows * 64 / (32 * CFG.mma_warps)))
        # plain rowwise: rows_bf16 (the default) and rows
        br, w = CFG.rows_bf16_blocks, CFG.rows_bf16_warps
        for slow in (True, False):
            c = dict(BR=br, K=K, EVEN=True, SLOW=slow, HW=True, **SCHEME[spec])
            out.append((f"rows_bf16 {spec}" + ("" if slow else " (no fallback)"), rowwise.quantize_rows_bf16_kernel,
                        SIG_TB, c, w, br * K / (32 * w)))
        c = dict(BR=512, K=K, FAST=True, SR=0, SR_BITS=8, IN_BF16=True, CUBLAS=False, **SCHEME[spec], **ELEM)
        out.append((f"rows {spec}", rowwise.quantize_rows_kernel, SIG_ROWS, c, 8, 512 * K / 256))
        # stochastic rounding: rows_sr (the default; the integer or the FP32-pipe encoder) and rows
        for sr, tag in ((2, "seed"), (1, "bits")):
            br, w = CFG.rows_sr_blocks, CFG.rows_sr_warps
            for fp in (False, True):
                c = dict(BR=br, K=K, SR=sr, SR_BITS=8, IN_BF16=True, CUBLAS=False, E2M1=True, SR_MAX=6.0,
                         SR_SCALE=512.0, HALF_STEP=True, FP32_PIPE=fp, INT4=False, NEGZERO=True,
                         ZERO_POS=not SCHEME[spec]["MX"], **SCHEME[spec])
                out.append((f"rows_sr {spec} sr {tag}" + (" fp32 pipe" if fp else ""), rowwise.quantize_rows_sr_kernel,
                            SIG_SR, c, w, br * K / (32 * w)))
            c = dict(BR=512, K=K, FAST=False, SR=sr, SR_BITS=8, IN_BF16=True, CUBLAS=False, **SCHEME[spec],
                     **{**ELEM, "NTHR": 8})
            out.append((f"rows {spec} sr {tag}", rowwise.quantize_rows_kernel,
                        {**SIG_ROWS, "r_ptr": "*i32" if sr == 1 else "*fp32"}, c, 8, 512 * K / 256))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="comma list of name prefixes (rows_rht, cols, rows_bf16, rows)")
    ap.add_argument("--ops", action="store_true", help="print the opcode histogram per kernel")
    ap.add_argument("--loop", action="store_true",
                    help="also count the first loop's body (persistent kernels: the per-tile steady state)")
    args = ap.parse_args()
    pre = None if args.only is None else tuple(p.strip() for p in args.only.split(","))
    print(f"triton {triton.__version__}, target sm_90")
    print(f"{'kernel':<34} {'regs':>4} {'spill':>5} {'SASS/el':>8} {'ALU/el':>7} {'FMA/el':>7} {'compile s':>9}")
    for name, fn, sig, consts, nw, epth in configs():
        if pre and not name.startswith(pre):
            continue
        k, dt = compile_kernel(fn, sig, consts, nw, CFG.mma_tma_maxnreg if consts.get("TMA") else None)
        (regs, spill), c = sass_ops(k)
        tot = sum(c.values())
        alu = sum(v for o, v in c.items() if o in ALU)
        fma = sum(v for o, v in c.items() if o in FMA)
        print(f"{name:<34} {regs:>4} {spill:>5} {tot / epth:8.2f} {alu / epth:7.2f} {fma / epth:7.2f} {dt:9.1f}", flush=True)
        if args.ops:
            print("    " + ", ".join(f"{o}:{v}" for o, v in c.most_common(24)))
        lc = loop_ops(k) if args.loop else None
        if lc:
            print(f"    loop body: {sum(lc.values()) / epth:.2f} SASS/el, ALU {sum(v for o, v in lc.items() if o in ALU) / epth:.2f}, "
                  f"FMA {sum(v for o, v in lc.items() if o in FMA) / epth:.2f}"
                  + ("  " + ", ".join(f"{o}:{v}" for o, v in lc.most_common(16)) if args.ops else ""))


if __name__ == "__main__":
    main()
