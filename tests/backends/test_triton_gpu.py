"""GPU exactness of the triton backend at full size (``pytest -m gpu``; skipped without CUDA).

The interpreter tests (test_triton_*.py) run the same kernels on small shapes on the CPU; these
run them on the GPU on large tensors and on inputs the CPU cannot enumerate in time, and check
the GPU-only instructions against their integer twins on every input:

* the fast E2M1 encoder against the exact one over all 2^32 float32 patterns, the hardware UE4M3
  conversion against the integer rounding over all 2^31 non-negative patterns;
* every variant of quantize_packed and dequantize_packed against the emulator on an adversarial
  bf16 tensor (rowwise, columnwise, SR with given and Philox bits, the cuBLAS layout, every
  scheme the kernels take), and against each other on a SIZE x SIZE tensor;
* the fused RHT (butterfly: the three bf16 roundings, the fast encoder alone, SR, the cuBLAS
  layout, the unfused path, the RHT + amax pass; tensor cores: every configuration the
  benchmark times) against the emulator's composition and against the unfused path;
* the conformance RHT tensor kinds through quantize_packed, with the first differing block in
  the failure message.

SIZE is ``$FP4SPEC_GPU_SIZE`` (default 16384, the benchmarks' tensor).
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import fp4spec  # noqa: E402
from fp4spec.backends import torch_backend as tb  # noqa: E402
from fp4spec.backends.base import resolve_scheme  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG, TritonBackend, capability  # noqa: E402
from fp4spec.backends.triton import launch as trl  # noqa: E402
from fp4spec.backends.triton import mma  # noqa: E402
from fp4spec.backends.triton.kernels import primitives as tp  # noqa: E402
from fp4spec.backends.triton.quantize import (dequantize_packed, philox_rbits, quantize_packed,  # noqa: E402
                                              two_level_consts, mx_consts, unpack_lo_first)
from fp4spec.layouts import to_blocked  # noqa: E402
from fp4spec.packing import pack  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SIZE = int(os.environ.get("FP4SPEC_GPU_SIZE", "16384"))
SCHEMES = ["nvfp4", "nvfp4_2d", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"]
FAST = ["nvfp4", "ufp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even"]
HOPPER = torch.cuda.get_device_capability()[0] == 9


def adversarial_bf16(rows, cols, seed=0):
    """bf16 with per-16 exponents from subnormal to huge, E2M1 midpoints, zeros, -0, NaN, Inf."""
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


def rht_adversarial_bf16(rows, cols, seed=0):
    """bf16 whose rows of 16 along both axes stress the fused RHT: magnitudes from subnormal to
    huge, wide spans inside a row of 16, the documented 2^24 example, zeros, -0.0, subnormal
    sums, overflow to Inf inside the butterfly, Inf - Inf, NaN."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((rows, cols)).astype(np.float32)
    e = g.integers(-133, 110, size=(rows // 16, cols // 16))
    x *= np.ldexp(np.float32(1), np.repeat(np.repeat(e, 16, 0), 16, 1)).astype(np.float32)
    for r in range(0, rows, 7):
        c = 16 * int(g.integers(0, cols // 16))
        x[r, c:c + 16] = g.choice([-1, 1], 16) * np.ldexp(1.0 + g.random(16), g.integers(-30, 30, 16))
        col = g.choice([-1, 1], 16) * np.ldexp(1.0 + g.random(16), g.integers(-30, 30, 16))
        x[r:r + 16, c + 3] = col[:min(16, rows - r)]
    x[1, :16] = [2.0 ** 24, 1, -(2.0 ** 24)] + [0] * 13
    x[2, 16:32] = 0.0
    x[3, 16:32] = -0.0
    x[4, 16:32] = np.arange(16) * np.float32(2.0 ** -133)
    x[5, 32:48] = np.float32(3e38) * g.standard_normal(16).astype(np.float32)
    x[6, 48:64] = [np.inf, -np.inf] + [1.0] * 14
    x[7, 64:80] = [np.inf] + [1.0] * 15
    x[8, 80:96] = [np.nan] + [1.0] * 15
    x[40:56, 100] = -0.0
    x[60, cols - 9] = np.nan
    return torch.from_numpy(x).to(torch.bfloat16)


def same_f32(a, b) -> bool:
    """Equal bit patterns, NaN matching NaN (a NaN's payload is not specified)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a.view(np.uint32)[~na], b.view(np.uint32)[~nb]))


def moved_packed(ref):
    m = ref.moved()
    return pack(m["codes"], order="lo_first", axis=-1), m["scales"]


def assert_packed(out, want, what=""):
    pk, sc = want
    got_s = out["scales"].cpu().numpy()
    if got_s.ndim == 1:
        sc = to_blocked(sc)
    got = out["packed"].cpu().numpy()
    bad = np.argwhere(got != pk)
    assert not len(bad), f"{what}: {len(bad)} code bytes differ, first at {tuple(bad[0])}"
    assert np.array_equal(got_s, sc), f"{what}: {int((got_s != sc).sum())} scale codes differ"


def assert_same(a, b, what=""):
    assert torch.equal(a["packed"], b["packed"]) and torch.equal(a["scales"], b["scales"]), what
    if a["global_scale"] is not None:
        assert torch.equal(a["global_scale"].view(torch.int32), b["global_scale"].view(torch.int32)), what


@pytest.fixture(scope="module")
def adv():
    xt = adversarial_bf16(512, 1024).cuda()
    return xt, xt.float().cpu().numpy()


@pytest.fixture(scope="module")
def big():
    g = torch.Generator(device="cuda").manual_seed(0)
    return torch.randn((SIZE, SIZE), device="cuda", generator=g).to(torch.bfloat16)


def _scheme(spec):
    name, *over = spec.split(":")
    return fp4spec.get_scheme(name, **dict(kv.split("=") for kv in over))


# -- GPU-only instructions and the fast encoder, every input -------------------------------------------------


@triton.jit
def _encoder_diff_kernel(out_ptr, BLOCK: tl.constexpr):
    b = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)).to(tl.int32)  # every 32-bit pattern
    y = b.to(tl.float32, bitcast=True)
    bad = ((tp._mag_y(y) - 0x4A800000) != (tp._e2m1_rne(y, True) & 7)) & (y == y)
    tl.atomic_add(out_ptr, tl.sum(bad.to(tl.int32), axis=0))


def test_fast_encoder_every_float32():
    """The fast E2M1 magnitude (three offset fmas and a min) == the exact encoder's on every
    non-NaN float32 pattern."""
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    _encoder_diff_kernel[((1 << 32) // 8192,)](out, BLOCK=8192, num_warps=8)
    assert int(out.item()) == 0


@triton.jit
def _e4m3_diff_kernel(out_ptr, BLOCK: tl.constexpr):
    bits = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)).to(tl.int32)
    s = bits.to(tl.float32, bitcast=True)
    bad = tp._ue4m3_cvt(s) != tp._ue4m3_sat(s)
    tl.atomic_add(out_ptr, tl.sum(bad.to(tl.int32), axis=0))
    tl.atomic_min(out_ptr + 1, tl.min(tl.where(bad, bits, 0x7FFFFFFF), axis=0))


@pytest.mark.skipif(torch.cuda.get_device_capability() < (8, 9), reason="cvt e4m3x2 needs compute capability 8.9+")
def test_hw_ue4m3_every_nonnegative_float32():
    """cvt.rn.satfinite.e4m3x2.f32 == the clamp at 448 and the integer RNE on every non-negative
    float32 pattern 0x00000000 .. 0x7FFFFFFF (+0, subnormals, normals, +Inf, every NaN)."""
    out = torch.tensor([0, 0x7FFFFFFF], dtype=torch.int32, device="cuda")
    _e4m3_diff_kernel[((1 << 31) // 4096,)](out, BLOCK=4096)
    bad, first = (int(v) for v in out.cpu())
    assert bad == 0, f"{bad} patterns differ, first 0x{first:08X}"


# -- quantize and dequantize against the emulator ----------------------------------------------------------


@pytest.mark.parametrize("spec", SCHEMES)
def test_backends_vs_emulator(adv, spec):
    """TritonBackend and TorchBackend on CUDA == the emulator: RNE and SR with given bits, rows
    and columns, dequantize; the packed bf16 path."""
    xt, xf = adv
    sch = _scheme(spec)
    rb = torch.randint(0, 256, xt.shape, dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    trk, tbk = TritonBackend("cuda"), tb.TorchBackend("cuda")
    for rounding in ("rne", "sr"):
        for axis in (-1, 0):
            kw = {"rbits": rb.numpy().astype(np.uint32), "sr_bits": 8} if rounding == "sr" else {}
            ref = fp4spec.quantize(xf, sch, axis=axis, rounding=rounding, **kw)
            for b in (trk, tbk):
                assert b.quantize(xf, sch, axis=axis, rounding=rounding, **kw).equals(ref), (b.name, rounding, axis)
            want = fp4spec.dequantize(ref)
            assert same_f32(trk.dequantize(ref), want) and same_f32(tbk.dequantize(ref), want), (rounding, axis)
    ref = fp4spec.quantize(xf, sch)
    assert_packed(quantize_packed(xt, sch), (ref.pack(), ref.scales), "packed bf16")


@pytest.mark.parametrize("spec", FAST)
def test_variants_vs_emulator(adv, spec):
    """Every rowwise and columnwise variant at its default and one other tile, the cuBLAS
    layout, SR with Philox and given bits (sr_bits 8 and 24), dequantize."""
    xt, xf = adv
    sch = _scheme(spec)
    ref = fp4spec.quantize(xf, sch)
    want = (ref.pack(), ref.scales)
    runs = [(None, None, None), ("rows", 256, 4)]
    if sch.element.name == "e2m1":
        runs += [("rows_bf16", 64, 2), ("rows_split", None, None)]
    for v, br, w in runs:
        assert_packed(quantize_packed(xt, sch, variant=v, BM=br, num_warps=w), want, f"rows {v} BR={br}")
    assert_packed(quantize_packed(xt, sch, scale_layout="cublas"), want, "rows cublas")
    wc = moved_packed(fp4spec.quantize(xf, sch, axis=0))
    for v, bc, w in ((None, None, None), ("cols", 128, 4), ("cols_tile", 512, 2), ("cols_tile", 256, 1)):
        assert_packed(quantize_packed(xt, sch, axis=0, BN=bc, num_warps=w, variant=v), wc, f"cols {v} BC={bc}")
    assert_packed(quantize_packed(xt, sch, axis=0, scale_layout="cublas"), wc, "cols cublas")
    for sr_bits in (8, 24):
        rb = philox_rbits(77 + sr_bits, xf.shape, sr_bits)
        r = fp4spec.quantize(xf, sch, rounding="sr", rbits=rb, sr_bits=sr_bits)
        kw = dict(rounding="sr", sr_bits=sr_bits)
        assert_packed(quantize_packed(xt, sch, seed=77 + sr_bits, **kw), (r.pack(), r.scales), f"philox {sr_bits}")
        rbt = torch.from_numpy(rb.view(np.int32)).cuda()
        assert_packed(quantize_packed(xt, sch, rbits=rbt, **kw), (r.pack(), r.scales), f"given bits {sr_bits}")
        rc = moved_packed(fp4spec.quantize(xf, sch, axis=0, rounding="sr", rbits=rb, sr_bits=sr_bits))
        assert_packed(quantize_packed(xt, sch, axis=0, seed=77 + sr_bits, **kw), rc, f"philox cols {sr_bits}")
    pk, s = torch.from_numpy(ref.pack()).cuda(), torch.from_numpy(ref.scales).cuda()
    gs = None if ref.global_scale is None else float(ref.global_scale)
    for br, w in ((None, None), (128, 4)):
        assert same_f32(dequantize_packed(pk, s, gs, sch, BM=br, num_warps=w).cpu().numpy(), fp4spec.dequantize(ref))


def test_full_size_variants_agree(big):
    """SIZE x SIZE: triton == the torch backend; every rowwise and columnwise variant == the tile
    kernel; the rows_bf16 tiles of the sweep == rows / rows_split; dequantize == the tile kernel."""
    x, n = big, big.shape[0]
    for spec in ("nvfp4", "mxfp4"):
        o = quantize_packed(x, spec)
        r = tb.quantize_tensors(x, spec)
        rp = r["codes"].reshape(n, n // 2, 2)
        torch_out = {"packed": rp[..., 0] | (rp[..., 1] << 4), "scales": r["scales"].reshape(n, -1),
                     "global_scale": r["global_scale"]}
        assert_same(o, torch_out, f"{spec} triton != torch")
        del o, r, rp, torch_out
    sed = tb.tensor_scale(trl.global_amax(x, n, n, n, 1), fp4spec.get_scheme("nvfp4"))
    for spec, kw in (("nvfp4", {"s_enc_dec": sed}), ("mxfp4", {}), ("mxfp4:scale_rule=rceil", {})):
        sch = _scheme(spec)
        t = quantize_packed(x, sch, variant="tile", **kw)
        for v, br, w in (("rows", None, None), ("rows_split", None, None), ("rows_bf16", None, None),
                         ("rows_bf16", 256, 4), ("rows_bf16", 256, 8), ("rows_bf16", 512, 8)):
            assert_same(quantize_packed(x, sch, variant=v, BM=br, num_warps=w, **kw), t, f"{spec} {v} {br}/{w}")
        tc = quantize_packed(x, sch, axis=0, variant="tile", **kw)
        for v, nb in (("cols", None), ("cols", 1), ("cols_tile", None)):
            assert_same(quantize_packed(x, sch, axis=0, variant=v, BM=nb, **kw), tc, f"{spec} columnwise {v} {nb}")
        d = dequantize_packed(t["packed"], t["scales"], t["global_scale"], sch)
        dt = dequantize_packed(t["packed"], t["scales"], t["global_scale"], sch, variant="tile")
        assert torch.equal(d.view(torch.int32), dt.view(torch.int32)), spec
        del t, tc, d, dt
    torch.cuda.empty_cache()


# -- the fused RHT (butterfly) ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rht_adv():
    xt = rht_adversarial_bf16(256, 512).cuda()
    return xt, xt.float().cpu().numpy()


def _rht_ref(xf, spec, rht, axis, **kw):
    return moved_packed(fp4spec.quantize(rht.apply(xf, axis=axis).astype(np.float32), resolve_scheme(spec), axis=axis,
                                         **kw))


TE, SD32 = RHT.te(), RHT.from_seed(5, out_dtype="float32")
RHT_RUNS = ([(s, -1, r) for s in ("nvfp4", "mxfp4") for r in (TE, SD32)]
            + [(s, -1, TE) for s in ("ufp4", "nvint4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even")]
            + [(s, 0, TE) for s in ("nvfp4", "nvint4", "mxfp4", "mxfp4:scale_rule=rceil")]
            + [("nvfp4", 0, SD32), ("mxfp4", 0, SD32)])


@pytest.mark.parametrize("spec,axis,rht", RHT_RUNS, ids=[f"{s}-{a}-{r.out_dtype}" for s, a, r in RHT_RUNS])
def test_fused_rht_vs_emulator(rht_adv, spec, axis, rht):
    xt, xf = rht_adv
    assert_packed(quantize_packed(xt, spec, axis=axis, rht=rht), _rht_ref(xf, spec, rht, axis), "fused")


@pytest.mark.parametrize("cvt", [0, 2])
def test_fused_rht_bf16_roundings(rht_adv, cvt):
    """The other two bf16 roundings of the RHT output (integer operations, packed cvt)."""
    xt, xf = rht_adv
    cfg = replace(DEFAULT_CONFIG, rht_bf16_cvt=cvt)
    for spec, axis in (("nvfp4", -1), ("mxfp4", 0)):
        assert_packed(quantize_packed(xt, spec, axis=axis, rht=TE, config=cfg), _rht_ref(xf, spec, TE, axis), spec)


def test_fused_rht_paths(rht_adv):
    """The fast encoder alone on data where it is exact; SR (Philox, given bits); the cuBLAS
    layout; the unfused path; the RHT + amax pass."""
    xt, xf = rht_adv
    fin = np.where(np.isfinite(xf) & (np.abs(xf) < 4096), xf, np.float32(3.0))
    fin_t = torch.from_numpy(fin).to(torch.bfloat16).cuda()
    fin = fin_t.float().cpu().numpy()
    nofb = replace(DEFAULT_CONFIG, exact_fallback=False)
    for spec, axis in (("nvfp4", -1), ("mxfp4", -1), ("nvfp4", 0), ("mxfp4", 0)):
        assert_packed(quantize_packed(fin_t, spec, axis=axis, rht=TE, config=nofb), _rht_ref(fin, spec, TE, axis),
                      f"fast encoder alone {spec} {axis}")
    rb = philox_rbits(31, xf.shape, 8)
    for spec, axis in (("nvfp4", -1), ("nvfp4", 0)):
        assert_packed(quantize_packed(xt, spec, axis=axis, rht=TE, rounding="sr", seed=31),
                      _rht_ref(xf, spec, TE, axis, rounding="sr", rbits=rb), f"philox {axis}")
    rb2 = np.random.default_rng(4).integers(0, 1 << 24, size=xf.shape).astype(np.uint32)
    rb2_t = torch.from_numpy(rb2.view(np.int32)).cuda()
    for spec, axis in (("nvint4", 0), ("nvfp4", -1)):
        assert_packed(quantize_packed(xt, spec, axis=axis, rht=SD32, rounding="sr", sr_bits=24, rbits=rb2_t),
                      _rht_ref(xf, spec, SD32, axis, rounding="sr", rbits=rb2, sr_bits=24), f"given {spec}")
    for spec, axis in (("nvfp4", -1), ("mxfp4", 0)):
        assert_packed(quantize_packed(xt, spec, axis=axis, rht=TE, scale_layout="cublas"), _rht_ref(xf, spec, TE, axis),
                      f"cublas {spec}")
    for spec in ("nvfp4_2d", "mxfp4:block_size=64"):
        assert_packed(quantize_packed(xt, spec, rht=TE), _rht_ref(xf, spec, TE, -1), f"unfused {spec}")
    finite = torch.where(torch.isfinite(xt), xt, torch.zeros_like(xt))
    ff = finite.float().cpu().numpy()
    r, c = finite.shape
    for rht in (TE, SD32):
        for axis in (-1, 0):
            want = np.float32(np.max(np.abs(rht.apply(ff, axis=axis).astype(np.float32))))
            M, N, sxm, sxn = (r, c, c, 1) if axis == -1 else (c, r, 1, c)
            got = np.float32(trl.rht_global_amax(finite, M, N, sxm, sxn, capability.rht_params(rht)).cpu())
            assert (np.isnan(got) and np.isnan(want)) or got.view(np.uint32) == want.view(np.uint32), (rht, axis)


def test_fused_rht_full_size(big):
    """SIZE x SIZE: fused == unfused rowwise and columnwise; the RHT + amax pass == the amax of the
    unfused transform; the MX bf16x2 encoder == the float32 one."""
    x, n = big, big.shape[0]
    for spec in ("nvfp4", "mxfp4"):
        for axis in (-1, 0):
            assert_same(quantize_packed(x, spec, axis=axis, rht=TE),
                        quantize_packed(x, spec, axis=axis, rht=TE, variant="unfused"), f"{spec} {axis}")
    rp = capability.rht_params(TE)
    for sxm, sxn in ((n, 1), (1, n)):
        y = trl.rht_apply(x, n, n, sxm, sxn, rp)
        a = trl.rht_global_amax(x, n, n, sxm, sxn, rp)
        assert torch.equal(a.view(torch.int32), y.abs().max().view(torch.int32)), (sxm, sxn)
        del y
    assert_same(quantize_packed(x, "mxfp4", rht=TE),
                quantize_packed(x, "mxfp4", rht=TE, config=replace(DEFAULT_CONFIG, rht_rows_bf16x2=False)), "bf16x2")
    torch.cuda.empty_cache()


@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("r", [RHT.te(), RHT.from_seed(3)], ids=["te", "seed3"])
def test_conformance_rht_kinds(spec, r):
    """The conformance suite's RHT tensor kinds through quantize_packed (fused and unfused) ==
    the emulator; a failure names the first differing block."""
    from fp4spec.conformance.rht_properties import RHT_KINDS, rht_tensor

    sch = resolve_scheme(spec)
    for kind in RHT_KINDS:
        x = rht_tensor(np.random.default_rng(1), sch, r, kind).astype(np.float32)
        ref = fp4spec.quantize(x, sch, rht=r, backend="numpy")
        for variant in (None, "unfused"):
            out = quantize_packed(torch.from_numpy(x).cuda(), sch, rht=r, variant=variant)
            codes = unpack_lo_first(out["packed"]).cpu().numpy().reshape(ref.codes.shape)
            sc = out["scales"].cpu().numpy().reshape(ref.scales.shape)
            dc, ds = np.argwhere(codes != ref.codes), np.argwhere(sc != ref.scales)
            if len(dc) or len(ds):
                i, j = (dc[0] if len(dc) else ds[0])[:2]
                k = sch.block_size
                b = (j // k) * k if len(dc) else j * k
                pytest.fail(f"{kind} variant={variant}: {len(dc)} codes, {len(ds)} scales differ; x bits "
                            f"{[hex(v) for v in x[i, b:b + k].view(np.uint32)]}, rht(x) "
                            f"{[hex(v) for v in np.asarray(r.apply(x)[i, b:b + k], np.float32).view(np.uint32)]}, "
                            f"want {ref.codes[i, b:b + k].tolist()} scale {ref.scales[i, b // k]}, got "
                            f"{codes[i, b:b + k].tolist()} scale {sc[i, b // k]}")


# -- the RHT on the tensor cores --------------------------------------------------------------------------------

mma_only = pytest.mark.skipif(not HOPPER, reason="the mma RHT is claimed on Hopper only")
MMA = RHT.te(arith="mma:sm90-bf16")
#: The configurations benchmarks/bench_gpu_rht_mma.py times (config field overrides).
MMA_SWEEP = ([dict(mma_pair_rows={16: p, 32: p}, mma_tma_per_sm=s, mma_tma_stages={16: st, 32: st}, mma_tma_maxnreg=mr)
              for p in (False, True) for s, st, mr in ((5, 3, 96), (6, 3, 80), (5, 4, 96), (7, 3, 72), (8, 3, 64))]
             + [dict(mma_pair_rows={16: p, 32: p}, mma_bf16x2=False) for p in (False, True)]
             + [dict(mma_pair_rows={16: p, 32: p}, hw_instructions=False) for p in (False, True)]
             + [dict(mma_pair_rows={16: True, 32: True}, mma_pair_tmajor=False)]
             + [dict(mma_defer=False, mma_block_stores=False, hw_instructions=False)])


@mma_only
def test_mma_full_size(big):
    """SIZE x SIZE: the fused mma kernel == the unfused transform + quantize, for the default and
    every configuration the benchmark times."""
    x = big
    r = MMA
    sed = tb.tensor_scale(mma.rht_amax(x, r), fp4spec.get_scheme("nvfp4"))
    for spec in ("nvfp4", "mxfp4"):
        sch = resolve_scheme(spec)
        kw = {"s_enc_dec": sed} if spec == "nvfp4" else {}
        want = quantize_packed(x, sch, rht=r, variant="unfused", **kw)
        assert_same(quantize_packed(x, sch, rht=r, **kw), want, f"{spec} default")
        ts = two_level_consts(sch, x.device, s_enc_dec=sed) if spec == "nvfp4" else mx_consts(sch, x.device)
        pk = torch.empty_like(want["packed"])
        sc = torch.empty_like(want["scales"])
        for fields in MMA_SWEEP:
            pk.zero_()
            sc.zero_()
            mma.mma_launcher(x, pk, sc, ts, sch, r, replace(DEFAULT_CONFIG, **fields))()
            assert torch.equal(pk, want["packed"]) and torch.equal(sc, want["scales"]), (spec, fields)
        del want, pk, sc
    torch.cuda.empty_cache()
