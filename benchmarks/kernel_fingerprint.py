"""Fingerprints of the kernels the triton backend launches, compiled offline for the H200's sm_90.

No GPU needed. The host functions (``quantize_packed``, ``dequantize_packed``,
``matmul_packed``, ``global_amax``) run on small CPU tensors against a stand-in Triton driver
whose target is ``GPUTarget("cuda", 90, 32)`` and whose device answers as an H200 does (compute
capability 9.0: the hardware UE4M3 conversion, the bf16x2 encoder, the ``mma:sm90-bf16`` RHT).
Every kernel launch is caught by Triton's ``jit_cache_hook`` before it would run: its
specialization (signature, constexprs, divisibility attributes, launch options) is exactly the
one the JIT builds on the GPU. Each distinct specialization is compiled with ``triton.compile``
and disassembled by Triton's bundled ``cuobjdump``; its fingerprint is the SHA-256 of the
instruction text (addresses, opcodes, operands; the kernel's name left out), its registers,
spill bytes and instruction count.

    python benchmarks/kernel_fingerprint.py --out FILE.json [--compare BASE.json] [--jobs 2] [--only a,b]

``--compare`` checks that every request of BASE launches kernels with identical fingerprints
(same SASS, registers and spills, in the same order) and prints each difference; exit status
1 on any. Requests are named by what a user asks for (scheme, axis, dtype, rounding, scale
layout, RHT, shape), not by kernel names, so a refactoring that renames kernels and
constexprs compares cleanly.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)  # the GPU path of every host function

import torch  # noqa: E402
import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


class StandInDriver:
    """The driver calls Triton's JIT makes before a launch, answered for one sm_90 device."""

    def get_current_target(self):
        return TARGET

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


# -- the code under test ---------------------------------------------------------------------------


def code():
    """(quantize_packed, dequantize_packed, matmul_packed, global_amax, gemm configs, variant names)
    of the tree, with the device features of an H200 patched in."""
    try:
        from fp4spec.backends.triton import capability, gemm
        from fp4spec.backends.triton import quantize as q
    except ImportError:  # the modules before the sub-package
        from fp4spec.backends import triton_backend as trb, triton_gemm as G, triton_rht_mma as rm
        from fp4spec.backends import triton_rows_fast as rf

        rf.hw_e4m3 = lambda device: True
        rf.hw_bf16x2 = lambda device: True
        rm.mma_arith = lambda device=None: "mma:sm90-bf16"
        return dict(quantize=trb.quantize_packed, dequantize=trb.dequantize_packed, matmul=G.matmul_packed,
                    amax=trb.global_amax, gemm_default=G.DEFAULT_CONFIG, gemm_small=G.SMALL_CONFIG,
                    tile="v1", rows_split="rows2d", cols_tile="cols")
    from fp4spec.backends.triton.config import DEFAULT_CONFIG

    capability.gpu_features = lambda device=None: capability.H200_FEATURES
    return dict(quantize=q.quantize_packed, dequantize=q.dequantize_packed, matmul=gemm.matmul_packed,
                amax=q.global_amax, gemm_default=DEFAULT_CONFIG.gemm, gemm_small=DEFAULT_CONFIG.gemm_small,
                tile="tile", rows_split="rows_split", cols_tile="cols_tile")


# -- requests ----------------------------------------------------------------------------------------

SCHEMES = ["mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=ceil", "mxfp4:scale_rule=even",
           "mxfp4:profile=torchao", "mxfp4:block_size=16", "mxfp4:block_size=64", "nvfp4", "nvfp4_2d", "ufp4",
           "nvint4"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _rht(name):
    from fp4spec.rht import RHT

    return {None: None, "te": RHT.te(), "seed7-fp32": RHT.from_seed(7, out_dtype="float32"),
            "mma-te": RHT.te(arith="mma:sm90-bf16")}[name]


def quantize_requests(full=False):
    """(name, kwargs of quantize_packed) covering every kernel family and every value of each
    request factor; ``full``: the whole cross product (about 1600 compiles)."""
    shapes = {"256x1024": (256, 1024), "96x96": (96, 96)}
    if full:
        for (sn, shape), dn, spec, axis, rnd, lay, r in itertools.product(
                shapes.items(), DTYPES, SCHEMES, (-1, 0), ("rne", "sr", "philox"), ("plain", "cublas"),
                (None, "te", "seed7-fp32", "mma-te")):
            yield f"{spec} axis={axis} {dn} {rnd} {lay} rht={r} {sn}", dict(
                shape=shape, dtype=dn, scheme=spec, axis=axis, rounding=rnd, scale_layout=lay, rht=r)
        return
    base = dict(shape=(256, 1024), dtype="bf16", rounding="rne", scale_layout="plain", rht=None)
    seen = set()

    def req(**kw):
        d = {**base, **kw}
        name = " ".join(f"{k}={v}" for k, v in d.items() if k not in base or v != base[k] or k == "scheme")
        if name not in seen:
            seen.add(name)
            return [(name, d)]
        return []

    out = []
    for spec in SCHEMES:  # every scheme, both axes: bf16 RNE, plain scales
        for axis in (-1, 0):
            out += req(scheme=spec, axis=axis)
    for axis in (-1, 0):  # HiF4: rows_hif4 / cols_hif4, every input dtype
        for dn in DTYPES:
            out += req(scheme="hif4", axis=axis, dtype=dn)
    for spec in ("if4", "if4_2d"):  # IF4: rows_if4 / cols_if4, every input dtype, both SR sources, every rule
        for axis in (-1, 0):
            for dn in DTYPES:
                out += req(scheme=spec, axis=axis, dtype=dn)
            for rnd in ("sr", "philox"):
                out += req(scheme=spec, axis=axis, rounding=rnd)
        for rule in ("mae", "abs_max"):
            out += req(scheme=f"{spec}:scale_rule={rule}", axis=-1)
    for spec in ("nvfp4", "mxfp4", "nvint4", "mxfp4:scale_rule=rceil"):
        for axis in (-1, 0):
            for dn in ("fp16", "fp32"):
                out += req(scheme=spec, axis=axis, dtype=dn)
            for rnd in ("sr", "philox"):
                out += req(scheme=spec, axis=axis, rounding=rnd)
            out += req(scheme=spec, axis=axis, scale_layout="cublas")
            for r in ("te", "seed7-fp32", "mma-te"):
                out += req(scheme=spec, axis=axis, rht=r)
                out += req(scheme=spec, axis=axis, rht=r, dtype="fp32")
            out += req(scheme=spec, axis=axis, rht="te", rounding="philox")
            out += req(scheme=spec, axis=axis, rht="te", rounding="sr")
            out += req(scheme=spec, axis=axis, rht="te", scale_layout="cublas")
            out += req(scheme=spec, axis=axis, shape=(96, 96))
            out += req(scheme=spec, axis=axis, shape=(96, 96), rht="te")
            out += req(scheme=spec, axis=axis, shape=(96, 96), rht="mma-te")
    for spec in ("ufp4", "mxfp4:block_size=16", "mxfp4:profile=torchao", "nvfp4_2d", "mxfp4:block_size=64"):
        for axis in (-1, 0):
            out += req(scheme=spec, axis=axis, rht="te")
            out += req(scheme=spec, axis=axis, rounding="sr")
    out += req(scheme="nvfp4", axis=-1, tensor_scale="given")
    out += req(scheme="nvfp4", axis=-1, tensor_scale="given", rht="te")
    out += req(scheme="nvfp4", axis=-1, tensor_scale="given", rht="mma-te")
    out += req(scheme="nvfp4", axis=0, tensor_scale="given")
    for spec in ("nvfp4", "mxfp4"):  # the explicit variants a caller can name
        out += req(scheme=spec, axis=-1, variant="tile")
        out += req(scheme=spec, axis=-1, variant="rows_split")
        out += req(scheme=spec, axis=0, variant="cols_tile")
    yield from out


def run_quantize(c, d):
    shape = d["shape"]
    x = torch.randn(*shape).to(DTYPES[d["dtype"]])
    kw = dict(axis=d["axis"], scale_layout=d["scale_layout"], rht=_rht(d["rht"]))
    if d["rounding"] == "sr":
        kw.update(rounding="sr", rbits=torch.zeros(shape, dtype=torch.int32))
    elif d["rounding"] == "philox":
        kw.update(rounding="sr", seed=1)
    if d.get("tensor_scale") == "given":
        kw["s_enc_dec"] = (torch.tensor(1.0), torch.tensor(1.0))
    if d.get("variant"):
        kw["variant"] = c[d["variant"]]
    if d["rht"] == "mma-te" and d["dtype"] != "bf16":
        x = x.to(torch.bfloat16).to(DTYPES[d["dtype"]])  # the mma RHT's operand holds bf16 values
    c["quantize"](x, d["scheme"], **kw)


def other_requests():
    for spec in SCHEMES + ["mxfp4:block_size=128"]:
        for v in (None, "tile"):
            yield f"dequantize {spec} variant={v}", ("dequantize", spec, v)
    pairs = [("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"), ("nvint4", "nvint4"), ("ufp4", "ufp4"), ("mxfp4", "nvfp4"),
             ("nvfp4_2d", "nvfp4")]
    for (a, b), cfg, extra in itertools.product(pairs, ("default", "small"), ("plain", "c+g+bf16")):
        yield f"matmul {a} x {b} config={cfg} {extra}", ("matmul", (a, b), cfg, extra)
    for dn in DTYPES:
        yield f"global_amax {dn}", ("amax", dn)


def run_other(c, what):
    import fp4spec

    if what[0] == "dequantize":
        _, spec, v = what
        x = torch.randn(256, 1024)
        o = c["quantize"](x, spec)
        c["dequantize"](o["packed"], o["scales"], o["global_scale"], spec,
                        **({"variant": c[v]} if v else {}))
    elif what[0] == "matmul":
        _, (sa, sb), cfg, extra = what
        m, n, k = 256, 256, 1024
        qa = fp4spec.quantize(torch.randn(m, k).numpy(), sa)
        qb = fp4spec.quantize(torch.randn(n, k).numpy(), sb)
        pa = torch.from_numpy(qa.pack())
        pb = torch.from_numpy(qb.pack())
        kw = {}
        if extra != "plain":
            kw = dict(g=1.0, c=torch.zeros(m, n), out_dtype=torch.bfloat16)
        c["matmul"](pa, torch.from_numpy(qa.scales[:m].copy()), pb, torch.from_numpy(qb.scales[:n].copy()), (sa, sb),
                    config=c["gemm_" + cfg], **kw)
    else:
        x = torch.randn(256, 1024).to(DTYPES[what[1]])
        c["amax"](x, 256, 1024, 1024, 1)


# -- capture and compile -------------------------------------------------------------------------------

_SPECS: dict = {}  # specialization key -> (JITFunction, signature, constexprs, attrs, options)


def _tuples(v):
    return tuple(_tuples(e) for e in v) if isinstance(v, list) else v


def _hook(sink):
    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        data = json.loads(compile["specialization_data"])
        k = hashlib.sha256(compile["specialization_data"].encode()).hexdigest()[:16]
        if k not in _SPECS:
            opts = {o: _tuples(v) for o, v in data["options"].items()}  # JSON made the tuples lists
            _SPECS[k] = (fn.jit_function, compile["signature"], compile["constants"], compile["configs"][0], opts)
        sink.append(k)
        return True  # nothing runs

    return hook


def capture(requests, runner, c):
    """{request name: [specialization keys launched, in order]} and the failures."""
    out, failed = {}, {}
    for name, d in requests:
        sink = []
        knobs.runtime.jit_cache_hook = _hook(sink)
        try:
            runner(c, d)
        except (NotImplementedError, ValueError) as exc:  # a request the kernels refuse: recorded as such
            failed[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        finally:
            knobs.runtime.jit_cache_hook = None
        out[name] = sink
    return out, failed


def _tool():
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


_INSN = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?;)")


def fingerprint(k):
    """Compile one captured specialization; its SASS fingerprint."""
    from triton.compiler import ASTSource

    fn, sig, consts, attrs, opts = _SPECS[k]
    t = time.time()
    ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=TARGET, options=opts)
    dt = time.time() - t
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        res = subprocess.run([_tool(), "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool(), "-sass", f.name], capture_output=True, text=True).stdout
    insns = [m.group(1) + " " + m.group(2) for m in map(_INSN.match, sass.splitlines()) if m]
    r = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", res)
    return dict(kernel=f"{fn.fn.__module__}.{fn.fn.__qualname__}",
                constexprs={fn.arg_names[p[0]]: v for p, v in consts.items() if len(p) == 1 and fn.params[p[0]].is_constexpr},
                num_warps=opts["num_warps"], num_stages=opts["num_stages"], maxnreg=opts.get("maxnreg"),
                sass_sha256=hashlib.sha256("\n".join(insns).encode()).hexdigest(),
                instructions=sum(1 for i in insns if " NOP" not in i), registers=int(r.group(1)) if r else None,
                spill_bytes=int(r.group(4)) if r else None, shared=int(r.group(3)) if r else None,
                compile_s=round(dt, 1))


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def compare(base, new):
    """Lines describing every request whose launches differ (empty: identical)."""
    diffs = []
    for name, keys in base["requests"].items():
        if name not in new["requests"]:
            diffs.append(f"{name}: missing (now: {new['refused'].get(name, 'not requested')})")
            continue
        fa = [base["launches"][k] for k in keys]
        fb = [new["launches"][k] for k in new["requests"][name]]
        sig = lambda f: (f["sass_sha256"], f["registers"], f["spill_bytes"], f["num_warps"])  # noqa: E731
        if [sig(f) for f in fa] != [sig(f) for f in fb]:
            diffs.append(f"{name}:\n    was " + "; ".join(f"{f['kernel']} {f['instructions']} insns {f['registers']} regs"
                                                          for f in fa)
                         + "\n    now " + "; ".join(f"{f['kernel']} {f['instructions']} insns {f['registers']} regs"
                                                    for f in fb))
    for name in base["refused"]:
        if name not in new["refused"]:
            diffs.append(f"{name}: refused before, runs now")
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None, help="a previous --out file: exit 1 unless every request matches")
    ap.add_argument("--full", action="store_true", help="every combination of the request factors (slow)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma list of substrings: the requests whose name has one "
                                                  "(--compare then checks those only)")
    args = ap.parse_args()
    driver.set_active(StandInDriver())
    c = code()
    t0 = time.time()
    keep = (lambda rs: rs) if args.only is None else (
        lambda rs: [(n, d) for n, d in rs if any(p in n for p in args.only.split(","))])
    reqs, refused = capture(keep(list(quantize_requests(args.full))), run_quantize, c)
    r2, f2 = capture(keep(list(other_requests())), run_other, c)
    reqs.update(r2)
    refused.update(f2)
    keys = sorted({k for ks in reqs.values() for k in ks})
    print(f"{len(reqs)} requests, {len(refused)} refused, {len(keys)} distinct kernel specializations "
          f"(captured in {time.time() - t0:.0f} s); compiling with {args.jobs} jobs", flush=True)
    import multiprocessing as mp

    launches = {}
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for i, (k, fp) in enumerate(zip(keys, pool.imap(fingerprint, keys))):
            fp["constexprs"] = {a: _jsonable(v) for a, v in fp["constexprs"].items()}
            launches[k] = fp
            if (i + 1) % 20 == 0:
                print(f"  {i + 1}/{len(keys)} compiled [{time.time() - t0:.0f} s]", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    out = dict(triton=triton.__version__, torch=torch.__version__, target="cuda sm_90 (H200 features)",
               commit=commit, full=args.full, only=args.only, requests=reqs, refused=refused, launches=launches)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    per_kernel = collections.Counter(fp["kernel"].rsplit(".", 1)[-1] for fp in launches.values())
    print(f"wrote {args.out} in {time.time() - t0:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(per_kernel.items())))
    if args.compare:
        with open(args.compare) as f:
            base = json.load(f)
        if args.only:
            base = dict(base, requests={n: k for n, k in base["requests"].items() if n in reqs or n in refused},
                        refused={n: v for n, v in base["refused"].items() if n in reqs or n in refused})
        diffs = compare(base, out)
        same = len(base["requests"]) - len(diffs)
        print(f"compared with {args.compare} (commit {base.get('commit', '?')[:10]}): {same} of "
              f"{len(base['requests'])} requests launch identical SASS, registers and spills")
        for d in diffs:
            print("  DIFF " + d)
        sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
