"""MX with 6- and 8-bit elements on the triton kernels (``rows_wide``, ``cols_wide`` and their
dequantize) equals the numpy emulator bit for bit: every element format x every scale rule x
RNE / SR (given bits, Philox) x rowwise / axis=0 x float32 / bf16 input, on blocks holding
every element value at scale edges, ties, binade edges, saturating values, NaN and Inf, zero
blocks and float32 subnormals, and on hypothesis tensors. A planted defect (ties away from
zero) is caught.

On a machine without a GPU the kernels run under TRITON_INTERPRET=1 (small shapes); the GPU
test at the end runs them at full size."""

from __future__ import annotations

import os

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
from fp4spec.backends.base import BackendError  # noqa: E402
from fp4spec.backends.triton import capability, dequantize_packed, philox_rbits  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.triton.kernels import mx_wide  # noqa: E402
from fp4spec.layouts import to_blocked  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
NAMES = ["mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"]
RULES = ["floor", "ceil", "even", "rceil"]
DEV = "cuda" if torch.cuda.is_available() else "cpu"


# -- inputs -------------------------------------------------------------------------------------


def wide_adversarial(name: str, seed: int = 0) -> np.ndarray:
    """float32 (rows, 64) blocks of 32 that hit every case of the element encoder of ``name``.

    For scale exponents k from the clamped ends to the middle, blocks whose amax is the
    element's max times 2^k hold: every representable element magnitude times 2^k (both
    signs), every midpoint between neighbours (RNE ties), the float32 neighbours of those
    midpoints, and values just above max (saturation). Then: zero and -0 blocks, float32
    subnormals, NaN and +-Inf in otherwise ordinary blocks, huge values."""
    fmt = fp4spec.get_scheme(name).element
    mags = np.unique(np.abs(np.array([v for v, _ in fmt.grid], np.float64)))
    mids = (mags[:-1] + mags[1:]) / 2
    top = F32(fmt.max)
    body = np.concatenate([mags, mids, np.nextafter(mids.astype(F32), F32(0)), np.nextafter(mids.astype(F32), F32(1e30)),
                           [top * F32(1.0625), top * F32(1.5), top * F32(1.999)]]).astype(F32)
    rng = np.random.default_rng(seed)
    blocks = []
    for k in (-150, -133, -127, -126, -120, -9, 0, 7, 100, 127 - fmt.emax, 120):
        v = np.ldexp(body.astype(np.float64), k)
        v = v.astype(F32) * rng.choice([-1, 1], size=v.shape).astype(F32)
        v = np.concatenate([v, np.zeros((-len(v)) % 31, F32)])
        for part in v.reshape(-1, 31):
            anchor = F32(np.ldexp(float(top), k)) if np.isfinite(np.ldexp(float(top), k)) else F32(3e38)
            blocks.append(np.concatenate([[anchor], part]).astype(F32))
    special = np.zeros((10, 32), F32)
    special[1] = -0.0
    special[2] = np.float32(1e-45) * np.arange(32)
    special[3] = -np.float32(1e-45) * np.arange(32) - np.float32(2.0 ** -126)
    special[4] = rng.standard_normal(32).astype(F32)
    special[4, 5] = np.nan
    special[5] = rng.standard_normal(32).astype(F32)
    special[5, [0, 9]] = [np.inf, -np.inf]
    special[6] = rng.standard_normal(32).astype(F32) * F32(3e38)
    special[7] = np.nan
    special[8, 3] = -np.inf
    special[9] = np.ldexp(F32(1.0), np.arange(-16, 16)).astype(F32)  # binade edges of every element
    blocks.extend(special)
    x = np.stack(blocks)
    x = np.concatenate([x, np.zeros(((-len(x)) % 64, 32), F32)])  # rows a multiple of 32 (blocks along axis 0)
    return x.reshape(-1, 64)


def as_input(x: np.ndarray, dtype: str):
    """(torch tensor on DEV, the float32 values the emulator reads): bf16 rounds x first."""
    if dtype == "bfloat16":
        xb = x.astype(ml_dtypes.bfloat16)
        xt = torch.from_numpy(xb.view(np.int16).copy()).view(torch.bfloat16)
        return xt.to(DEV), xb.astype(F32)
    return torch.from_numpy(x.copy()).to(DEV), x


def reference(x32, sch, axis, rounding, rbits, sr_bits):
    """(codes, scales) of the emulator, the blocked axis last (the kernels' layout)."""
    kw = {} if rounding == "rne" else dict(rounding="sr", rbits=rbits, sr_bits=sr_bits)
    m = fp4spec.quantize(x32, sch, axis=axis, backend="numpy", **kw).moved()
    return np.asarray(m["codes"]), np.asarray(m["scales"])


def run_kernel(xt, sch, axis, rounding, rbits, seed, sr_bits, **kw):
    out = trq.quantize_packed(xt, sch, axis=axis, rounding=rounding, sr_bits=sr_bits, seed=seed,
                              rbits=None if rbits is None else torch.from_numpy(rbits.astype(np.int32)).to(DEV), **kw)
    return out["packed"].cpu().numpy(), out["scales"].cpu().numpy()


def assert_codes(got, want, x32, what):
    (gc, gs), (wc, ws) = got, want
    bad = np.argwhere(gc != wc)
    assert not len(bad), (f"{what}: {len(bad)} codes differ, first at {tuple(bad[0])}: "
                          f"0x{int(gc[tuple(bad[0])]):02x} != 0x{int(wc[tuple(bad[0])]):02x}")
    assert np.array_equal(gs, ws), f"{what}: {int((gs != ws).sum())} scale codes differ"


def check(x, spec, axis, dtype, mode, sr_bits=8, **kw):
    """The kernel of ``spec`` (a name or Scheme) on x (axis=0: on x^T, so the blocks are the
    same) equals the emulator; mode "rne", "sr" (given bits) or "philox" (seed)."""
    sch = fp4spec.get_scheme(spec)
    xt, x32 = as_input(x if axis == -1 else np.ascontiguousarray(x.T), dtype)
    rbits, seed = None, None
    if mode == "sr":
        rbits = np.random.default_rng(1).integers(0, 1 << sr_bits, size=x32.shape).astype(np.uint32)
    elif mode == "philox":
        seed = 2024
        rbits = philox_rbits(seed, x32.shape, sr_bits)
    got = run_kernel(xt, sch, axis, "rne" if mode == "rne" else "sr", None if mode == "philox" else rbits, seed,
                     sr_bits, **kw)
    want = reference(x32, sch, axis, mode, rbits, sr_bits)
    assert_codes(got, want, x32, f"{sch.name}:{sch.scale_rule} axis={axis} {dtype} {mode}")


# -- every format x rule x rounding x axis x dtype -------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("mode", ["rne", "sr", "philox"])
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("name", NAMES)
def test_adversarial_vs_emulator(name, rule, mode, axis, dtype):
    check(wide_adversarial(name), fp4spec.get_scheme(name, scale_rule=rule), axis, dtype, mode)


@pytest.mark.parametrize("sr_bits", [1, 13, 24])
@pytest.mark.parametrize("name", NAMES)
def test_sr_bits(name, sr_bits):
    """SR's fraction floor(rem * 2^N / 2^s) for N above and below the shift s."""
    x = wide_adversarial(name, seed=3)
    for axis in (-1, 0):
        check(x, name, axis, "float32", "sr", sr_bits=sr_bits)
    check(x, name, -1, "float32", "philox", sr_bits=sr_bits)


@pytest.mark.parametrize("name", NAMES)
def test_every_bf16_pattern(name):
    """Every bf16 value as x, in blocks whose amax is large (scaled values near and below the
    element's subnormals) and as its own block of equal values (every scale code)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(F32).reshape(-1, 64)
    check(x, name, -1, "bfloat16", "rne")
    same = np.repeat(x.reshape(-1)[::37], 32).reshape(-1, 64)
    check(same, name, -1, "float32", "rne")


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp6_e3m2"])
def test_torchao_profile(name):
    """torchao's element scaling (divide by max(2^e, 2^-126)) and its Inf blocks (no NaN scale)."""
    x = wide_adversarial(name, seed=5)
    for rule in ("floor", "even"):
        sch = fp4spec.get_scheme(name, profile="torchao", scale_rule=rule)
        check(x, sch, -1, "float32", "rne")
        check(x, sch, 0, "bfloat16", "rne")


def test_other_block_sizes_and_layouts():
    x = wide_adversarial("mxfp8_e4m3", seed=1)
    for k in (8, 16, 64):
        sch = fp4spec.get_scheme("mxfp8_e4m3", block_size=k)
        check(x, sch, -1, "float32", "rne")
        check(x, sch, 0, "float32", "philox")
    sch = fp4spec.get_scheme("mxfp6_e2m3")
    for axis, tiles in ((-1, dict(BM=4)), (0, dict(BM=1, BN=8)), (0, dict(BM=4, BN=128)), (0, dict(num_warps=1))):
        check(x, sch, axis, "float32", "rne", **tiles)
        check(x, sch, axis, "bfloat16", "philox", **tiles)
    # the cuBLAS blocked scale layout
    for axis in (-1, 0):
        xt = torch.from_numpy(np.ascontiguousarray(x if axis == -1 else x.T)).to(DEV)
        plain = trq.quantize_packed(xt, sch, axis=axis)
        blocked = trq.quantize_packed(xt, sch, axis=axis, scale_layout="cublas")
        assert torch.equal(plain["packed"], blocked["packed"])
        assert np.array_equal(blocked["scales"].cpu().numpy(), to_blocked(plain["scales"].cpu().numpy()))


# -- hypothesis --------------------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(arrays(np.float32, (4, 64), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)),
       st.sampled_from(NAMES), st.sampled_from(RULES), st.sampled_from(["rne", "sr", "philox"]),
       st.sampled_from([-1, 0]), st.sampled_from(["float32", "bfloat16"]))
def test_hypothesis(x, name, rule, mode, axis, dtype):
    check(x, fp4spec.get_scheme(name, scale_rule=rule), axis, dtype, mode)


# -- the public call, dequantize, errors ----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_public_call(backend, name):
    """fp4spec.quantize(backend="triton"): rowwise, axis=0, pad=True, seed=; one code per byte."""
    x = torch.from_numpy(wide_adversarial(name, seed=2))
    for kw in ({}, {"axis": 0}, {"rounding": "sr", "seed": 7}, {"rounding": "sr", "seed": 7, "axis": 0}):
        q = fp4spec.quantize(x, name, backend="triton", **kw)
        ref = fp4spec.quantize(x.numpy(), name, backend="numpy", **kw)
        assert q.backend == "triton" and q.equals(ref), kw
    xp = x[:, :-8]  # 56 columns: padded to 64
    q = fp4spec.quantize(xp, name, backend="triton", pad=True)
    assert q.equals(fp4spec.quantize(xp.numpy(), name, backend="numpy", pad=True))
    assert backend.supports(name) and backend.supports(name, "sr")


@pytest.mark.parametrize("name", NAMES)
def test_dequantize(backend, name):
    x = wide_adversarial(name, seed=4)
    q = fp4spec.quantize(torch.from_numpy(x), name, backend="triton")
    got = backend.dequantize(q).numpy()
    want = fp4spec.dequantize(fp4spec.quantize(x, name, backend="numpy"), backend="numpy")
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    qc = fp4spec.quantize(torch.from_numpy(x), name, backend="triton", axis=0)
    got = backend.dequantize(qc).numpy()
    want = fp4spec.dequantize(fp4spec.quantize(x, name, backend="numpy", axis=0), backend="numpy")
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan) and np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    with pytest.raises(ValueError, match="one code per byte"):
        dequantize_packed(q.storage, q.scales, None, name, variant="tile")


def test_requests_and_errors(backend):
    assert "rows_wide" in trq.VARIANTS and capability.is_mx_wide(fp4spec.get_scheme("mxfp8_e5m2"))
    xt = torch.ones((4, 64))
    for v in ("rows", "rows_bf16", "cols", "tile"):
        with pytest.raises(NotImplementedError, match="rows_wide"):
            trq.quantize_packed(xt, "mxfp8_e4m3", variant=v)
    with pytest.raises(NotImplementedError, match="4-bit"):
        trq.quantize_packed(xt, "mxfp4", variant="rows_wide")
    with pytest.raises(NotImplementedError, match="axis 0"):
        trq.quantize_packed(xt, "mxfp8_e4m3", variant="cols_wide")
    with pytest.raises(ValueError, match="powers of two"):
        trq.quantize_packed(torch.ones((64, 64)), "mxfp8_e4m3", axis=0, variant="cols_wide", BN=48)
    with pytest.raises(NotImplementedError, match="rows_wide"):
        trq.quantize_packed(xt, "mxfp8_e4m3", variant="rows", rht="te")
    assert backend.why_unsupported("mxfp6_e3m2", "sr") == "" and backend.why_no_dequantize("mxfp6_e2m3") == ""
    assert "block size" in backend.why_unsupported("mxfp8_e4m3:block_size=256")
    with pytest.raises(BackendError, match="block size"):
        fp4spec.quantize(torch.ones((4, 256)), "mxfp8_e4m3", block_size=256, backend="triton")


@pytest.mark.parametrize("name", NAMES)
def test_rht_unfused(backend, name):
    """rht= (the butterfly and, where claimed, the tensor-core arithmetic): the transform,
    then the wide kernel; rowwise and axis=0, RNE and SR."""
    x = wide_adversarial(name, seed=6).astype(ml_dtypes.bfloat16).astype(F32)  # the mma RHT reads bf16 values
    mma = capability.gpu_features().mma_arith  # the interpreter's and Hopper's
    specs = ["te"] + ([RHT.te(arith=mma)] if mma else [])
    rb = np.random.default_rng(2).integers(0, 256, size=x.shape).astype(np.uint32)
    for r in specs:
        for kw in ({}, {"axis": 0}, {"rounding": "sr", "rbits": rb}):
            q = fp4spec.quantize(torch.from_numpy(x), name, backend="triton", rht=r, **kw)
            ref = fp4spec.quantize(x, name, backend="numpy", rht=r, **kw)
            assert q.backend == "triton" and q.equals(ref), (r, kw)


# -- a planted defect ------------------------------------------------------------------------------


@triton.jit
def _ties_away(a_bits, r, MB: tl.constexpr, BIAS: tl.constexpr, MAXC: tl.constexpr, SR: tl.constexpr,
               SR_BITS: tl.constexpr):
    """mx_wide._wide_magnitude (RNE) with ties rounded away from zero: the planted defect."""
    EMIN: tl.constexpr = 128 - BIAS
    E = a_bits >> 23
    normal = E >= EMIN
    v = tl.where(normal, a_bits - ((127 - BIAS) << 23), (a_bits & 0x7FFFFF) | tl.where(E > 0, 0x800000, 0))
    s = tl.minimum(tl.where(normal, 23 - MB, 23 - MB + EMIN - tl.maximum(E, 1)), 25)
    up = (v & ((1 << s) - 1)) >= (1 << (s - 1))
    return tl.minimum((v >> s) + up.to(tl.int32), MAXC)


def test_planted_defect_ties_away_is_caught(monkeypatch):
    """An encoder that rounds ties away from zero fails the adversarial test."""
    monkeypatch.setattr(mx_wide, "_wide_magnitude", _ties_away)
    with pytest.raises(AssertionError, match="codes differ"):
        check(wide_adversarial("mxfp8_e4m3"), "mxfp8_e4m3", -1, "float32", "rne")


# -- GPU: full size ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", NAMES)
def test_gpu_full_size(name):
    """SIZE x SIZE bf16 (FP4SPEC_GPU_SIZE, default 16384): rowwise equals columnwise of the
    transpose, for RNE and Philox SR of every rule, and both equal the emulator on a 256-row
    slice; the adversarial blocks equal the emulator in every mode."""
    size = int(os.environ.get("FP4SPEC_GPU_SIZE", "16384"))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn((size, size), device="cuda", generator=g)
         * torch.exp2(torch.randint(-40, 40, (size, size // 32), device="cuda", generator=g).float())
         .repeat_interleave(32, dim=1)).to(torch.bfloat16)
    xt = x.T.contiguous()
    for rule in RULES:
        sch = fp4spec.get_scheme(name, scale_rule=rule)
        rows = trq.quantize_packed(x, sch)
        cols = trq.quantize_packed(xt, sch, axis=0)
        assert torch.equal(rows["packed"], cols["packed"]) and torch.equal(rows["scales"], cols["scales"]), rule
        ref = reference(x[:256].float().cpu().numpy(), sch, -1, "rne", None, 8)
        assert_codes((rows["packed"][:256].cpu().numpy(), rows["scales"][:256].cpu().numpy()), ref, None, rule)
        sr = trq.quantize_packed(x[:512], sch, rounding="sr", seed=11)
        x32 = x[:512].float().cpu().numpy()
        ref = reference(x32, sch, -1, "sr", philox_rbits(11, x32.shape, 8), 8)
        assert_codes((sr["packed"].cpu().numpy(), sr["scales"].cpu().numpy()), ref, None, f"{rule} philox")
        for axis in (-1, 0):
            for mode in ("rne", "sr", "philox"):
                check(np.tile(wide_adversarial(name), (4, 4)), sch, axis, "bfloat16", mode)
