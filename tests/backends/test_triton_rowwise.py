"""The fast rowwise quantize kernel (variant ``rows_bf16``, quantize_packed's default for bf16
E2M1 1 x 16 / 1 x 32 RNE with plain scales) equals the other rowwise kernels (``rows``,
``rows_split``) and the numpy emulator bit for bit; its E2M1 encoder equals the exact encoder
(proof below); the MX encoder on bf16x2 words and the hardware UE4M3 conversion equal their
integer twins (the GPU tests: every input).

On a machine without a GPU the kernels run under TRITON_INTERPRET=1 (small shapes)."""

from __future__ import annotations

import os
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fp4spec.backends.triton import DEFAULT_CONFIG, capability, quantize_packed  # noqa: E402
from fp4spec.backends.triton import launch as trl  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.triton.kernels import primitives as tp  # noqa: E402

from .test_torch_backend import adversarial, with_nonfinite  # noqa: E402
from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
K0 = 0x4A800000


# -- the encoder, emulated in numpy -------------------------------------------------------------


def _fma_bits(a, s, c):
    """bits(fp32(a * s + c)) for float32 a >= 0, power-of-two s and c = 2^22 + small: the
    product and the sum are exact in float64 wherever the float32 rounding can tie (a * s
    >= 1/4 has its last bit >= 2^-25), so one float64 evaluation rounds once."""
    return (np.asarray(a, np.float64) * s + c).astype(F32).view(np.int32)


def fast_mag(a, m=1.0):
    """primitives._mag_y / _mag_scaled: 0x4A800000 + code of |a| * m."""
    a = np.abs(np.asarray(a, F32))
    u1 = _fma_bits(a, m, 4194304.0)
    u2 = _fma_bits(a, m * 0.5, 4194305.0)
    u3 = _fma_bits(a, m * 0.25, 4194306.0)
    return np.minimum(np.minimum(u1, u2), np.minimum(u3, K0 + 7)) - K0


def v2_mag(y):
    """primitives._e2m1_rne without the sign: min of three magic-number roundings of
    min(|y|, 6) (float32 additions)."""
    a = np.minimum(np.abs(np.asarray(y, F32)), F32(6))
    c1 = (a + F32(4194304.0)).view(np.int32) - 0x4A800000
    c2 = (a + F32(8388608.0)).view(np.int32) - (0x4B000000 - 2)
    c3 = (a + F32(16777216.0)).view(np.int32) - (0x4B800000 - 4)
    return np.minimum(np.minimum(c1, c2), c3)


def e2m1_rne_reference(y):
    """The emulator's element encoder (codes 0..7 of |y|)."""
    from fp4spec import encode

    return np.asarray(encode(np.abs(np.asarray(y, F32)), "e2m1"), np.int64) & 7


def _near(values, ulps):
    """float32 values within `ulps` ulps of each of `values` (non-negative)."""
    b = np.asarray(values, F32).view(np.int32)[:, None] + np.arange(-ulps, ulps + 1, dtype=np.int32)[None, :]
    return np.unique(b[b >= 0]).view(F32)


def test_fast_encoder_proof():
    """Both encoders are monotone in |y| (min of monotone roundings), and the E2M1 code is
    constant between consecutive decision points (midpoints, ties to even); two monotone
    step functions that agree at both ends of every interval on which one is constant agree
    everywhere. So checking the decision points (+- a few ulps), 0, 6, and everything above
    6 that changes the fast encoder's candidates (binade edges up to Inf) is a proof over
    every float32 magnitude; a coarse exhaustive grid and the monotonicity of the samples are
    checked too."""
    mids = F32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    grid = F32([0, 0.5, 1, 1.5, 2, 3, 4, 6, 7, 8])
    big = F32(2.0) ** np.arange(-149, 128).astype(F32)
    pts = np.concatenate([_near(mids, 64), _near(grid, 64), _near(big, 2), F32([np.inf, 3.4028235e38]),
                          np.arange(0, 1 << 31, 1 << 13, dtype=np.int64).astype(np.uint32).view(F32)])
    pts = np.sort(pts[~np.isnan(pts)])
    f, g, ref = fast_mag(pts), v2_mag(pts), e2m1_rne_reference(pts)
    np.testing.assert_array_equal(f, g)
    np.testing.assert_array_equal(f, ref)
    assert np.all(np.diff(f) >= 0)


def test_fast_encoder_scaled_products():
    """MX folds the power-of-two multiplier into the fma: fast_mag(x, 2^k) equals the code of
    the float32 product x * 2^k for every bf16 x and the multipliers the MX scales give."""
    x = np.arange(1 << 15, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(F32)
    x = x[np.isfinite(x)]
    for k in (-127, -126, -100, -3, 0, 1, 5, 60, 126, 127):
        m = float(np.ldexp(1.0, k))
        with np.errstate(over="ignore"):
            y = x * F32(m)
        np.testing.assert_array_equal(fast_mag(x, m), e2m1_rne_reference(y), err_msg=f"2^{k}")


# -- the kernels ---------------------------------------------------------------------------------


SCHEMES = [("nvfp4", {}), ("mxfp4", {}), ("mxfp4", {"scale_rule": "rceil"}), ("mxfp4", {"scale_rule": "even"}),
           ("mxfp4", {"scale_rule": "ceil"}), ("mxfp4", {"profile": "torchao"})]
IDS = [n + "".join(f"-{v}" for v in o.values()) for n, o in SCHEMES]
# (BR, num_warps) of rows_bf16: several programs with masked blocks, one program
TILES = [(16, 1), (64, 2), (128, 4)]
NO_FALLBACK = replace(DEFAULT_CONFIG, exact_fallback=False)


def v2(xt, sch, **kw):
    """The other rowwise kernels' result (rows_split for MX, rows for two-level schemes)."""
    sch = fp4spec.get_scheme(sch) if isinstance(sch, str) else sch
    return quantize_packed(xt, sch, variant="rows_split" if sch.structure == "mx" else "rows", **kw)


def fast(xt, sch, br=None, w=None, **kw):
    return quantize_packed(xt, sch, variant="rows_bf16", BM=br, num_warps=w, **kw)


def _dev(x, backend):
    return torch.from_numpy(np.ascontiguousarray(x, F32)).to(torch.bfloat16).to(backend.device)


def _check(out, ref, scales_of=None):
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref["packed"].cpu().numpy())
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref["scales"].cpu().numpy())
    if ref["global_scale"] is not None:
        assert out["global_scale"].cpu().view(torch.int32).item() == ref["global_scale"].cpu().view(torch.int32).item()


def _check_emulator(out, xt, sch):
    ref = fp4spec.quantize(xt.float().cpu().numpy(), sch)
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref.pack())
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales)


def tie_blocks(rows=16, seed=0):
    """bf16 rows of 64 whose every 16- and 32-block has amax 6 * 2^j and elements at the E2M1
    midpoints times 2^j (signs mixed), and one element 2688 = 448 * 6 (global amax: TE's
    S_enc = 1): the UE4M3 scale is 2^j and the element multiplier 2^-j, so every element is
    an exact tie after scaling (MX: the scale is a power of two anyway)."""
    rng = np.random.default_rng(seed)
    mids = F32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 0.0, 6.0])
    x = np.empty((rows, 64), F32)
    for r in range(rows):
        for b in range(4):
            j = int(rng.integers(-6, 8))
            x[r, 16 * b:16 * b + 16] = rng.permutation(mids) * rng.choice(F32([-1, 1]), 16) * F32(2.0 ** j)
    x[0, 5] = -0.0
    x[rows - 1, 48:64] = 0.0
    x[rows - 1, 63] = 2688.0
    return x


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_variants_adversarial(backend, name, over):
    """Adversarial blocks (tiny, huge, subnormal, zero and -0, ties, binade edges) with NaN/Inf:
    rows_bf16 == rows / rows_split == the emulator (tiles with NaN scales or a tiny TE
    multiplier take the exact branch)."""
    sch = fp4spec.get_scheme(name, **over)
    for x in (with_nonfinite(adversarial(7)), adversarial(11, 16, 128)):
        xt = _dev(x, backend)
        ref = v2(xt, sch)
        _check(quantize_packed(xt, sch), ref)  # the default: rows_bf16
        for br, w in TILES:
            out = fast(xt, sch, br, w)
            _check(out, ref)
        _check_emulator(out, xt, sch)


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_fast_path_alone_on_ties(backend, name, over):
    """The fast path without the exact branch, on data where it must be exact (finite, TE
    multipliers >= 2^-16): exact ties after scaling, zeros, -0, saturating blocks."""
    sch = fp4spec.get_scheme(name, **over)
    x = tie_blocks()
    x[3, 16:32] *= F32(1.4)  # block max 8.4 * 2^j: saturation (7 after scaling for MX floor)
    x[4, :16] = 0.0
    x[5, :16] = -0.0
    xt = _dev(x, backend)
    ref = v2(xt, sch)
    for br, w in TILES:
        out = fast(xt, sch, br, w, config=NO_FALLBACK)
        _check(out, ref)
    _check_emulator(out, xt, sch)
    if sch.structure != "mx":  # a given tensor scale
        sed = (ref["global_scale"] * 0 + 1, ref["global_scale"])
        _check(fast(xt, sch, s_enc_dec=sed, config=NO_FALLBACK), v2(xt, sch, s_enc_dec=sed))


def _consts(xt, name):
    """The call constants of the contiguous 2-D bf16 tensor xt."""
    sch = fp4spec.get_scheme(name)
    if sch.structure == "mx":
        return trq.mx_consts(sch, xt.device)
    M, N = xt.shape
    return trq.two_level_consts(sch, xt.device, amax=trl.global_amax(xt, M, N, N, 1))


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_every_bf16_pattern(backend, name):
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(F32).reshape(128, 512)
    xt = _dev(x, backend)
    ref = v2(xt, name)
    _check(quantize_packed(xt, name), ref)
    _check(fast(xt, name, 256), ref)
    _check_emulator(fast(xt, name), xt, fp4spec.get_scheme(name))
    out = quantize_packed(xt, name)  # rows_bf16 with and without the hardware UE4M3 conversion
    for hw in (False, True) if capability.gpu_features(xt.device).hw_e4m3 else (False,):
        pk, sc = torch.empty_like(out["packed"]), torch.empty_like(out["scales"])
        ts = _consts(xt, name)
        trl.rows_bf16_launcher(xt, pk, sc, ts, fp4spec.get_scheme(name), replace(DEFAULT_CONFIG, hw_instructions=hw))()
        assert torch.equal(pk, out["packed"]) and torch.equal(sc, out["scales"])


def test_hw_e4m3_only_on_a_gpu_that_has_it():
    """The hardware UE4M3 conversion is inline PTX: never in the interpreter or on the CPU."""
    assert not capability.gpu_features(torch.device("cpu")).hw_e4m3
    if not torch.cuda.is_available():
        assert not capability.gpu_features(torch.device("cuda")).hw_e4m3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="the hardware e4m3 conversion needs a GPU of compute capability 8.9+")
def test_hw_ue4m3_conversion_equals_integer_rounding():
    """_ue4m3_cvt (cvt.rn.satfinite.e4m3x2.f32) equals _ue4m3_sat (the clamp at 448, then RNE) on
    every 64th non-negative float32 pattern and on every pattern near the UE4M3 range's
    ties (test_triton_gpu.py checks all 2^31)."""
    import triton
    import triton.language as tl

    @triton.jit
    def both(x_ptr, hw_ptr, sw_ptr, N, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(x_ptr + i, mask=i < N, other=0.0)
        tl.store(hw_ptr + i, tp._ue4m3_cvt(s), mask=i < N)
        tl.store(sw_ptr + i, tp._ue4m3_sat(s), mask=i < N)

    codes = np.arange(0x7F, dtype=np.uint8)
    vals = fp4spec.decode(codes, "ue4m3").astype(F32)
    mids = (vals[:-1].astype(np.float64) + vals[1:]) / 2
    pats = np.concatenate([np.arange(0, 1 << 31, 64, dtype=np.int64).astype(np.int32),
                           _near(np.concatenate([vals, mids.astype(F32), [F32(448), F32(464), F32(480)]]), 4)
                           .view(np.int32), np.array([0x7F800000, 0x7FC00000, 0x7FFFFFFF], np.int32)])
    x = torch.from_numpy(pats.view(F32)).cuda()
    hw = torch.empty(x.numel(), dtype=torch.int32, device="cuda")
    sw = torch.empty_like(hw)
    both[(triton.cdiv(x.numel(), 1024),)](x, hw, sw, x.numel(), BLOCK=1024)
    assert torch.equal(hw, sw)


# -- the MX encoder on bf16x2 words (primitives._mag_bf16x2, _nibbles_bf16x2) ------------------


def _bf16_fma_bits(a, m, c):
    """bits(bf16(a * m + c)) rounded once (fma.rn.bf16x2) for a * m in [0, 8) and c in {64, 65,
    66}: the sum lies in [64, 128), where the bf16 ulp is 1/2, so the result is 0x4280 +
    RNE(2 (a * m + c - 64)); float64 holds a * m exactly and rounds 2 (c - 64) + 2 a * m only
    where it is far from a tie."""
    n = np.rint(2.0 * (c - 64) + 2.0 * (np.asarray(a, np.float64) * m))
    return (0x4280 + n).astype(np.int64)


def _prmt_signs(a, b):
    """prmt.b32 d, a, b, 0xFBD9 on uint32 words: bytes (sign of a's low half, of b's low half,
    of a's high half, of b's high half), each 0x00 or 0xFF."""
    bit = lambda w, i: ((w >> i) & 1) * 0xFF  # noqa: E731
    return bit(a, 15) | (bit(b, 15) << 8) | (bit(a, 31) << 16) | (bit(b, 31) << 24)


def bf16x2_codes_model(xb, k):
    """The word encoder in numpy: [n, 8] bf16 bit patterns (a group of 8 elements each), all
    times 2^k -> [n] uint32 words of their 8 MX codes (element j in bits 4j..4j+3)."""
    xb = np.asarray(xb, np.int64)
    m = float(np.ldexp(1.0, k))
    words = xb[:, :4] | (xb[:, 4:] << 16)  # word r: elements r (low half), r + 4 (high half)
    a = (words & 0x7FFF7FFF)
    halves = [(a & 0xFFFF), (a >> 16)]
    vals = [(h.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for h in halves]
    mags = []
    for v in vals:
        u = np.minimum(np.minimum(_bf16_fma_bits(v, m, 64), _bf16_fma_bits(v, m / 2, 65)),
                       np.minimum(_bf16_fma_bits(v, m / 4, 66), 0x4287))
        mags.append(u)
    u = mags[0] | (mags[1] << 16)  # [n, 4]
    mag = (u[:, 0] + (u[:, 1] << 4) + (u[:, 2] << 8) + (u[:, 3] << 12) - (tp._B0_NIBBLES.value % (1 << 32)))
    mag &= 0xFFFFFFFF
    ev = _prmt_signs(words[:, 0], words[:, 2])
    od = _prmt_signs(words[:, 1], words[:, 3])
    sgn = (ev & 0x0F0F0F0F) | (od & 0xF0F0F0F0)
    return (mag | (sgn & 0x88888888)).astype(np.uint32)


def _mx_domain(k):
    """Every finite bf16 pattern x with |x| * 2^k < 8 (the fast path's values: a block's values
    times its MX multiplier), in groups of 8 (zero-padded), and their codes by the emulator."""
    xb = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = xb.view(ml_dtypes.bfloat16).astype(np.float64)
    keep = np.isfinite(x) & (np.abs(x) * np.ldexp(1.0, k) < 8)
    xb = xb[keep]
    xb = np.concatenate([xb, np.zeros((-len(xb)) % 8, np.uint16)]).reshape(-1, 8)
    y = (xb.view(ml_dtypes.bfloat16).astype(np.float64) * np.ldexp(1.0, k)).astype(F32)
    codes = e2m1_rne_reference(y) | (((xb >> 15) & 1) << 3)
    want = (codes << (4 * np.arange(8))).sum(axis=1).astype(np.uint32)
    return xb, want


@pytest.mark.parametrize("k", [-127, -126, -125, -60, -3, -2, 0, 1, 2, 30, 100, 125, 126, 127])
def test_bf16x2_word_encoder_model(k):
    """The MX word encoder's arithmetic (bf16 grid magic 64, the three fma roundings, the
    shifted sum of four words less one constant, the sign bits by byte permutes), modelled in
    numpy, equals the emulator's E2M1 encoder on every finite bf16 value in the fast path's
    domain (|x| * 2^k < 8), -0 included (MX keeps its sign)."""
    xb, want = _mx_domain(k)
    np.testing.assert_array_equal(bf16x2_codes_model(xb, k), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="the bf16x2 encoder's min.u16x2 needs a GPU of compute capability 9.0+")
def test_bf16x2_encoder_every_bf16_and_multiplier():
    """_mx_mults_bf16x2 and _mx_codes_bf16x2 (_bf16x2_pack, _mag_bf16x2, _nibbles_bf16x2) on the
    GPU equal the emulator's encoder on every finite bf16 value times every MX multiplier 2^k,
    k = -127..127, where |x| * 2^k < 8 (bf16 subnormal operands and multipliers included:
    fma.rn.bf16x2 must not flush them)."""
    import triton
    import triton.language as tl

    @triton.jit
    def enc(x_ptr, m_ptr, q_ptr, NG, BLOCK: tl.constexpr):
        n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = n < NG
        xw = tl.load(x_ptr + n[:, None] * 4 + tl.arange(0, 4)[None, :], mask=mask[:, None], other=0)
        m = tl.load(m_ptr + n, mask=mask, other=1.0)
        m1, m2, m4 = tp._mx_mults_bf16x2(m)
        x0, x1, x2, x3 = tp._split4(xw)
        tl.store(q_ptr + n, tp._mx_codes_bf16x2(x0, x1, x2, x3, m1, m2, m4), mask=mask)

    xs, ms, wants = [], [], []
    for k in range(-127, 128):
        xb, want = _mx_domain(k)
        xs.append((xb[:, :4].astype(np.uint32) | (xb[:, 4:].astype(np.uint32) << 16)).view(np.int32))
        ms.append(np.full(len(xb), np.ldexp(F32(1), k), F32))
        wants.append(want)
    x = torch.from_numpy(np.concatenate(xs)).cuda()
    m = torch.from_numpy(np.concatenate(ms)).cuda()
    q = torch.empty(x.shape[0], dtype=torch.int32, device="cuda")
    enc[(triton.cdiv(x.shape[0], 256),)](x, m, q, x.shape[0], BLOCK=256)
    got = q.cpu().numpy().view(np.uint32)
    want = np.concatenate(wants)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} of {want.size} groups differ, first {bad[:4]}: {got[bad[:4]]} vs {want[bad[:4]]}"


def test_tiny_multiplier_branch(backend):
    """TE blocks next to a huge value (global amax 3e38): nonzero bf16 products underflow to
    -0 and +0 (code 0, not 8); the exact branch handles them, the fast path alone would not."""
    x = np.full((4, 64), F32(-1e-38))
    x[0, 0] = F32(3e38)
    x[1, :16] = F32(-3e-39) * np.arange(16, dtype=F32)
    xt = _dev(x, backend)
    ref = v2(xt, "nvfp4")
    _check(quantize_packed(xt, "nvfp4"), ref)
    _check(fast(xt, "nvfp4", 16), ref)
    _check_emulator(fast(xt, "nvfp4"), xt, fp4spec.get_scheme("nvfp4"))


def test_leading_dims_and_errors(backend):
    x = _dev(adversarial(3), backend).reshape(2, 16, 64)
    ref = v2(x, "mxfp4")
    _check(fast(x, "mxfp4"), ref)
    _check(quantize_packed(x, "mxfp4"), ref)
    with pytest.raises(ValueError, match="variant"):
        quantize_packed(x, "mxfp4", variant="nope")
    with pytest.raises(NotImplementedError, match="rows_bf16.: rowwise bf16"):
        fast(x.float(), "mxfp4")
    with pytest.raises(NotImplementedError, match="E2M1"):
        fast(x, "nvint4")
    with pytest.raises(ValueError, match="blocks"):
        fast(x[..., :40], "nvfp4")


# -- quantize_packed's default and the one-kernel constants ---------------------------------------


def test_default_route(backend, monkeypatch):
    """quantize_packed runs rows_bf16 for bf16 rowwise E2M1 1 x 16 / 1 x 32 RNE with plain scales
    (with BM blocks per program), other variants for everything else; variant='rows_bf16'
    elsewhere is refused."""
    ran = []
    for name, (check, run) in list(trq.VARIANTS.items()):
        monkeypatch.setitem(trq.VARIANTS, name, (check, lambda p, _n=name, _r=run: ran.append((_n, p.BM)) or _r(p)))
    x = adversarial(5)
    xt = _dev(x, backend)
    for name in ("nvfp4", "mxfp4"):
        ref = v2(xt, name)
        for br in (None, 16):
            ran.clear()
            _check(quantize_packed(xt, name, BM=br), ref)
            assert ran == [("rows_bf16", br)]
        _check_emulator(quantize_packed(xt, name, variant="rows_bf16"), xt, fp4spec.get_scheme(name))
    ran.clear()
    xf = torch.from_numpy(x).to(backend.device)
    rb = torch.zeros(x.shape, dtype=torch.int32)
    for xx, name, kw in ((xf, "nvfp4", {}), (xt, "nvint4", {}), (xt, "mxfp4:block_size=64", {}),
                         (xt, "nvfp4", {"scale_layout": "cublas"}), (xt, "nvfp4", {"rounding": "sr", "rbits": rb}),
                         (xt, "nvfp4", {"rht": "te"}), (xt, "nvfp4_2d", {})):
        sch = fp4spec.backends.base.resolve_scheme(name)
        quantize_packed(xx, sch, **kw)
        with pytest.raises((NotImplementedError, ValueError), match="rows_bf16"):
            quantize_packed(xx, sch, variant="rows_bf16", **kw)
    assert ran and "rows_bf16" not in [n for n, _ in ran]
    with pytest.raises(ValueError, match="variant"):
        quantize_packed(xt, "nvfp4", variant="nope")


def _consts_reference(dev, amax=None, s_enc_dec=None):
    """ts[:132] by torch ops and a table kernel (how quantize_packed built it before
    two_level_consts_kernel)."""
    from fp4spec.backends import torch_backend as tbk

    sch = fp4spec.get_scheme("nvfp4")
    s_enc, s_dec = tbk.tensor_scale(amax, sch) if s_enc_dec is None else s_enc_dec
    ts = torch.zeros(132, dtype=torch.float32, device=dev)
    ts[2] = float(np.float32(1) / np.float32(6))
    ts[3] = 256.0
    ts[0:2] = torch.stack((torch.as_tensor(s_enc, device=dev).reshape(()), torch.as_tensor(s_dec, device=dev).reshape(())))
    _mult_table_kernel[(1,)](ts, ts[4:], num_warps=1)
    return ts


@triton.jit
def _mult_table_kernel(ts_ptr, out_ptr):
    """TE element multipliers of the 128 UE4M3 scale codes: fp32 min(1 / fp32(value(c) * S_dec),
    FLT_MAX) (div_rn)."""
    c = tl.arange(0, 128)
    den = tp._ue4m3_value(c) * tl.load(ts_ptr + 1)
    me = tl.math.div_rn(tl.full(den.shape, 1.0, tl.float32), den)
    tl.store(out_ptr + c, tl.where(me > 3.4028234663852886e38, 3.4028234663852886e38, me))


def _bits(t):
    return t.cpu().view(torch.int32).numpy()


def test_two_level_consts(backend):
    """The one-kernel constants (S_enc, S_dec from the amax, or given; the 128 multipliers)
    equal the torch steps they replace, bit for bit: zero, -0, subnormal and tiny amaxes
    (S_enc overflows to FLT_MAX), huge, Inf, NaN, ordinary values; given tensors, float32
    scalars, float64 values (rounded to float32) and Python floats."""
    sch = fp4spec.get_scheme("nvfp4")
    vals = F32([0.0, -0.0, 1e-45, 3e-39, 1e-38, 1e-30, 2688.0, 1.0, 0.3, 7.5e3, 1e30, 3.4028235e38, np.inf, np.nan])
    vals = np.concatenate([vals, np.random.default_rng(0).standard_normal(6).astype(F32) ** 2])
    for a in vals:
        amax = torch.tensor(a, dtype=torch.float32, device=backend.device)
        ref = _consts_reference(backend.device, amax=amax)
        np.testing.assert_array_equal(_bits(trq.two_level_consts(sch, backend.device, amax=amax)), _bits(ref), err_msg=str(a))
    se = torch.tensor(123.456, dtype=torch.float32, device=backend.device)
    sd = torch.tensor(1 / 123.456, dtype=torch.float32, device=backend.device)
    for given in ((se, sd), (float(se), float(sd)), (np.float64(1 / 3), np.float64(3.0)), (1 / 3, 3.0),
                  (se, 0.01), (se.double() / 3, sd.double())):
        got = trq.two_level_consts(sch, backend.device, s_enc_dec=given)
        np.testing.assert_array_equal(_bits(got), _bits(_consts_reference(backend.device, s_enc_dec=given)))
