"""Stochastic rounding on the fast rowwise path (variant ``rows_sr``, quantize_packed's default
for rowwise SR of E2M1 / E1M2 / INT4 1 x 16 and 1 x 32 blocks): its integer SR encoder equals
the emulator's rounding (a numpy twin of every step, checked on the points where the rounding
can change), and the kernel equals the numpy emulator bit for bit given the same random bits
-- ``draw_rbits(..., method="philox")`` for a seed, the caller's otherwise -- for every scheme,
input dtype and sr_bits, on adversarial and hypothesis tensors. Planted defects (a Philox
counter off by one, an encoder off by one) are caught.

On a machine without a GPU the kernels run under TRITON_INTERPRET=1 (small shapes)."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fp4spec.backends.triton import quantize_packed  # noqa: E402
from fp4spec.backends.triton import launch as trl  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.triton.kernels import primitives as tp  # noqa: E402
from fp4spec.backends.triton.kernels import row16  # noqa: E402
from fp4spec.conformance import strategies as cst  # noqa: E402

from .test_torch_backend import adversarial, with_nonfinite  # noqa: E402
from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
SCHEMES = ["nvfp4", "mxfp4", "ufp4", "nvint4"]
ELEMENTS = {"nvfp4": "e2m1", "mxfp4": "e2m1", "ufp4": "e1m2", "nvint4": "int4_sym"}
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
SR_BITS = [1, 8, 24]


# -- the encoder: a numpy twin of primitives._sr_index against the emulator -------------------------


def sr_index_model(a, r, sr_bits, elem):
    """primitives._sr_index in numpy: the magnitude index of |a| rounded stochastically."""
    e2m1, step = trl.SR_ELEMENTS[elem]
    top = F32(fp4spec.get_format(elem).max)
    a = np.abs(np.asarray(a, F32))
    xi = (np.where(a < top, a, top) * F32(2.0 ** sr_bits / step)).astype(np.int64)  # exact: below 2^28
    r = np.asarray(r, np.int64)
    c = (xi + r) >> sr_bits
    if e2m1:
        c = np.minimum(c, np.minimum(((xi >> 1) + r >> sr_bits) + 2, ((xi >> 2) + r >> sr_bits) + 4))
    return c


def _rd32(v):
    """float64 v rounded down to float32 (directed rounding toward -inf)."""
    f = np.asarray(v, np.float64).astype(F32)
    return np.where(f.astype(np.float64) > v, np.nextafter(f, F32(-np.inf)), f)


def sr_index_fp32_model(a, r, sr_bits, elem):
    """primitives._sr_index_fp32 in numpy: per grid bits(RD(RD(a' / step + rho1) + magic)).
    The float64 sums are exact where they matter: a' / step + rho1 is exact for a' / step
    >= 2^-26 (at most 56 - 3 bits), and below that both roundings give rho1; t + magic is
    exact (t < 16, magic < 2^24)."""
    e2m1, step = trl.SR_ELEMENTS[elem]
    top = F32(fp4spec.get_format(elem).max)
    a = np.abs(np.asarray(a, F32))
    ap = np.where(a < top, a, top).astype(np.float64)
    rho1 = ((np.asarray(r, np.int64) << (23 - sr_bits)) | 0x3F800000).astype(np.int32).view(F32).astype(np.float64)

    def grid(inv_step, first):
        t = _rd32(ap * inv_step + rho1).astype(np.float64)
        return _rd32(t + (2.0 ** 23 - 1 + first)).view(np.int32).astype(np.int64) - 0x4B000000

    if e2m1:
        return np.minimum(np.minimum(grid(2.0, 0), grid(1.0, 2)), grid(0.5, 4))
    return grid(1.0 / step, 0)


def emulator_index(a, r, sr_bits, elem):
    codes = fp4spec.encode(np.abs(np.asarray(a, F32)), elem, "sr", rbits=np.asarray(r, np.uint32), sr_bits=sr_bits)
    return codes.astype(np.int64) & 7


def decision_points(elem, sr_bits):
    """Magnitudes where SR with sr_bits bits can change its answer, +- a few ulps: every grid
    point, and lo + j * step / 2^N for the first and last few j of every interval (the
    fraction's N-bit floor steps there), the midpoints, binade edges, saturation and beyond."""
    mags = np.asarray(fp4spec.get_format(elem).values, np.float64)
    mags = np.unique(np.abs(mags[np.isfinite(mags)]))
    pts = [mags]
    n = 1 << sr_bits
    js = np.unique(np.clip(np.r_[np.arange(4), n // 2 - 1, n // 2, n // 2 + 1, n - np.arange(1, 5)], 0, n - 1))
    for lo, hi in zip(mags[:-1], mags[1:]):
        pts.append(lo + (hi - lo) * js / n)
    base = np.concatenate(pts).astype(F32)
    near = base.view(np.int32)[:, None] + np.arange(-3, 4, dtype=np.int32)[None, :]
    big = F32(2.0) ** np.arange(-149, 128).astype(F32)
    out = np.concatenate([near[near >= 0].view(F32), big, F32([np.inf, 3.4028235e38, 7.9, 8.0, 100.0])])
    return np.unique(out[np.isfinite(out) | np.isinf(out)])


@pytest.mark.parametrize("elem", ["e2m1", "e1m2", "int4_sym"])
@pytest.mark.parametrize("sr_bits", [1, 2, 8, 12, 22, 23, 24])
def test_sr_encoder_model_equals_emulator(elem, sr_bits):
    """The integer SR encoder's steps equal the emulator's SR rounding at every decision point
    for random integers 0, 1, the middle, max - 1, max and random ones."""
    a = decision_points(elem, sr_bits)
    top = (1 << sr_bits) - 1
    rng = np.random.default_rng(sr_bits)
    for r in (0, 1, top >> 1, (top + 1) >> 1, max(top - 1, 0), top, None):
        rr = rng.integers(0, top + 1, a.shape) if r is None else np.full(a.shape, r)
        np.testing.assert_array_equal(sr_index_model(a, rr, sr_bits, elem), emulator_index(a, rr, sr_bits, elem),
                                      err_msg=f"{elem} sr_bits={sr_bits} r={r}")


@pytest.mark.parametrize("elem", ["e2m1", "e1m2", "int4_sym"])
@pytest.mark.parametrize("sr_bits", [1, 2, 8, 12, 16, 22, 23])
def test_fp32_pipe_encoder_model_equals_emulator(elem, sr_bits):
    """The FP32-pipe encoder's steps (directed-rounding fma and add, emulated) equal the
    emulator at every decision point: its arithmetic checked on the CPU; the GPU tests check
    the PTX against the integer encoder."""
    a = decision_points(elem, sr_bits)
    top = (1 << sr_bits) - 1
    rng = np.random.default_rng(sr_bits)
    for r in (0, 1, top >> 1, (top + 1) >> 1, max(top - 1, 0), top, None):
        rr = rng.integers(0, top + 1, a.shape) if r is None else np.full(a.shape, r)
        np.testing.assert_array_equal(sr_index_fp32_model(a, rr, sr_bits, elem), emulator_index(a, rr, sr_bits, elem),
                                      err_msg=f"{elem} sr_bits={sr_bits} r={r}")


@triton.jit
def _sr_index_kernel(a_ptr, r_ptr, out_ptr, n, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr,
                     SR_SCALE: tl.constexpr, HALF_STEP: tl.constexpr, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    c = tp._sr_index(tl.load(a_ptr + i, mask=m, other=0.0), tl.load(r_ptr + i, mask=m, other=0), SR_BITS, E2M1,
                     SR_MAX, SR_SCALE)
    tl.store(out_ptr + i, c, mask=m)


@pytest.mark.parametrize("elem", ["e2m1", "e1m2", "int4_sym"])
@pytest.mark.parametrize("sr_bits", [1, 8, 24])
def test_sr_index_kernel_equals_model(backend, elem, sr_bits):
    a = decision_points(elem, sr_bits)
    a = np.concatenate([a, F32([np.nan])])
    r = np.random.default_rng(1).integers(0, 1 << sr_bits, a.shape).astype(np.int32)
    r[::3] = (1 << sr_bits) - 1
    r[1::3] = 0
    dev = backend.device
    at, rt = torch.from_numpy(a).to(dev), torch.from_numpy(r).to(dev)
    out = torch.empty(a.shape, dtype=torch.int32, device=dev)
    sch = fp4spec.get_scheme({"e2m1": "nvfp4", "e1m2": "ufp4", "int4_sym": "nvint4"}[elem])
    _sr_index_kernel[(triton.cdiv(a.size, 1024),)](at, rt, out, a.size, SR_BITS=sr_bits, B=1024,
                                                   **trl.sr_flags(sch, sr_bits))
    got = out.cpu().numpy()
    fin = ~np.isnan(a)
    np.testing.assert_array_equal(got[fin], sr_index_model(a[fin], r[fin], sr_bits, elem))


# -- the kernel against the emulator ---------------------------------------------------------------


def grid_blocks(scheme, rows=16, seed=0):
    """Rows of 64 whose every block has amax max_elem * 2^j and elements on the element grid,
    at its midpoints and at quarter points, times 2^j (signs mixed), plus zero and -0 blocks,
    a saturating block and one element 448 * max_elem (TE's S_enc = 1): the block scale is
    2^j and the multiplier 2^-j, so the scaled values are exactly these points."""
    sch = fp4spec.get_scheme(scheme)
    top = F32(sch.max_elem)
    mags = np.unique(np.abs(np.asarray(sch.element.values, F32)))
    pts = np.unique(np.concatenate([mags, (mags[:-1] + mags[1:]) / 2, mags[:-1] + (mags[1:] - mags[:-1]) / 4]))
    rng = np.random.default_rng(seed)
    x = np.empty((rows, 64), F32)
    for r in range(rows):
        for b in range(0, 64, 16):
            v = rng.choice(pts, 16)
            v[rng.integers(16)] = top
            x[r, b:b + 16] = v * rng.choice(F32([-1, 1]), 16) * F32(2.0 ** int(rng.integers(-6, 8)))
    x[1, :32] = 0.0
    x[2, :32] = -0.0
    x[3, 32:64] *= F32(1.3)  # saturation above max_elem * 2^j
    x[rows - 1, 48:64] = 0.0
    x[rows - 1, 63] = 448.0 * top
    return x


def _dev(x, dtype, dev):
    return torch.from_numpy(np.ascontiguousarray(x, F32)).to(dtype).to(dev)


def _emulator(xt, scheme, rb, sr_bits, **kw):
    return fp4spec.quantize(xt.float().cpu().numpy(), scheme, rounding="sr", rbits=rb, sr_bits=sr_bits, **kw)


def assert_same(out, ref, what=""):
    """Codes, scale bytes and the tensor scale: equal, bit for bit."""
    got, want = out["packed"].cpu().numpy(), ref.pack()
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{what}: {len(bad)} code bytes differ, first at {bad[:3].tolist()}"
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales, err_msg=what)
    if ref.global_scale is not None:
        assert out["global_scale"].cpu().view(torch.int32).item() == np.float32(ref.global_scale).view(np.int32)


def _rbits_cases(shape, sr_bits, seed):
    """Bits all 0 (toward zero), all max, mixed, and the thresholds of the grid inputs'
    fractions 1/2 and 1/4 (r = 2^N (1 - frac) rounds up, one less rounds down)."""
    n = 1 << sr_bits
    rng = np.random.default_rng(seed)
    mix = rng.integers(0, n, shape).astype(np.uint32)
    mix[::2, ::3] = n - 1
    mix[1::2, ::5] = 0
    out = {"zero": np.zeros(shape, np.uint32), "max": np.full(shape, n - 1, np.uint32), "mixed": mix}
    for r in sorted({n // 2, n // 2 - 1, 3 * n // 4, 3 * n // 4 - 1} - {0, n - 1}):
        out[f"all {r}"] = np.full(shape, r, np.uint32)
    return out


def _inputs(scheme):
    return {"grid": grid_blocks(scheme), "adversarial": with_nonfinite(adversarial(7, 16, 64))}


def check_seed(scheme, sr_bits, dtype, dev):
    """Philox drawn in the kernel == the emulator with draw_rbits(method="philox")."""
    for name, x in _inputs(scheme).items():
        xt = _dev(x, dtype, dev)
        for seed in (0, 2**40 + 5, -3):
            out = quantize_packed(xt, scheme, rounding="sr", seed=seed, sr_bits=sr_bits, variant="rows_sr")
            rb = fp4spec.draw_rbits(x.shape, sr_bits, seed, method="philox")
            assert_same(out, _emulator(xt, scheme, rb, sr_bits), f"{name} seed={seed}")


def check_given_bits(scheme, sr_bits, dtype, dev):
    """Explicit bits (all 0: toward zero, all max, mixed) == the emulator with the same bits."""
    for name, x in _inputs(scheme).items():
        xt = _dev(x, dtype, dev)
        for bits, rb in _rbits_cases(x.shape, sr_bits, 3).items():
            rbt = torch.from_numpy(rb.astype(np.int32)).to(dev)
            out = quantize_packed(xt, scheme, rounding="sr", rbits=rbt, sr_bits=sr_bits, variant="rows_sr")
            assert_same(out, _emulator(xt, scheme, rb, sr_bits), f"{name} rbits={bits}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("sr_bits", SR_BITS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_equals_emulator(backend, scheme, sr_bits, dtype):
    check_seed(scheme, sr_bits, DTYPES[dtype], backend.device)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("sr_bits", SR_BITS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_given_bits_equal_emulator(backend, scheme, sr_bits, dtype):
    check_given_bits(scheme, sr_bits, DTYPES[dtype], backend.device)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_equals_generic_rows_kernel(backend, scheme):
    """rows_sr == rows (the generic kernel) with tiles that leave masked blocks, the cuBLAS scale
    layout, float16 input, leading dimensions and a given tensor scale."""
    x = with_nonfinite(adversarial(5, 16, 64))
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        xt = _dev(np.clip(x, -6e4, 6e4) if dtype == torch.float16 else x, dtype, backend.device).reshape(2, 8, 64)
        for kw in (dict(seed=9, BM=16, num_warps=1), dict(seed=9, scale_layout="cublas"),
                   dict(rbits=torch.full(xt.shape, 255, dtype=torch.int32, device=xt.device), BM=32)):
            a = quantize_packed(xt, scheme, rounding="sr", variant="rows_sr", **kw)
            b = quantize_packed(xt, scheme, rounding="sr", variant="rows", **kw)
            for k in ("packed", "scales"):
                assert torch.equal(a[k], b[k]), (dtype, kw.keys(), k)
    if fp4spec.get_scheme(scheme).structure != "mx":
        # a given tensor scale; S_dec = 3e38: multipliers 0 for large scales (Inf * 0 is NaN)
        for sed in ((F32(2.0), F32(0.5)), (F32(1.0), F32(3e38))):
            a = quantize_packed(xt, scheme, rounding="sr", seed=1, s_enc_dec=sed, variant="rows_sr")
            b = quantize_packed(xt, scheme, rounding="sr", seed=1, s_enc_dec=sed, variant="rows")
            assert torch.equal(a["packed"], b["packed"]) and torch.equal(a["scales"], b["scales"]), sed


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("scheme", SCHEMES)
def test_hypothesis_tensors(backend, scheme, data):
    x = data.draw(cst.adversarial_tensors(scheme))
    sr_bits = data.draw(st.sampled_from([1, 4, 8, 16, 24]))
    rb = data.draw(cst.rbits(x.shape, sr_bits))
    dtype = data.draw(st.sampled_from(list(DTYPES)))
    xt = _dev(x, DTYPES[dtype], backend.device)
    rbt = torch.from_numpy(np.asarray(rb, np.uint32).astype(np.int32)).to(backend.device)
    assert_same(quantize_packed(xt, scheme, rounding="sr", rbits=rbt, sr_bits=sr_bits, variant="rows_sr"),
                _emulator(xt, scheme, rb, sr_bits), "rbits")
    seed = data.draw(st.integers(-(2**63), 2**64 - 1))
    assert_same(quantize_packed(xt, scheme, rounding="sr", seed=seed, sr_bits=sr_bits, variant="rows_sr"),
                _emulator(xt, scheme, fp4spec.draw_rbits(x.shape, sr_bits, seed, method="philox"), sr_bits), "seed")


# -- planted defects ---------------------------------------------------------------------------------


@triton.jit
def _philox_bits4_next_counter(seed, g, SR_BITS: tl.constexpr):
    return tp._philox_bits4(seed, g + 1, SR_BITS)


_sr_index = tp._sr_index  # the real one, for the defect that wraps it


@triton.jit
def _sr_index_one_up(a, r, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr,
                     SR_SCALE: tl.constexpr):
    return _sr_index(a, tl.minimum(r + 1, (1 << SR_BITS) - 1), SR_BITS, E2M1, SR_MAX, SR_SCALE)


_signed_code = tp._signed_code


@triton.jit
def _signed_code_no_nan_test(y, idx, INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                             NAN_CHECK: tl.constexpr = True):
    return _signed_code(y, idx, INT4, NEGZERO, ZERO_POS, False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="patches jit globals: interpreter only")
@pytest.mark.parametrize("module,name,defect,check", [
    (row16, "_philox_bits4", _philox_bits4_next_counter, check_seed),
    (tp, "_sr_index", _sr_index_one_up, check_given_bits),
    (tp, "_signed_code", _signed_code_no_nan_test, check_seed),
], ids=["philox-counter-plus-1", "rbits-plus-1", "no-nan-test"])
@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "nvint4"])
def test_planted_defects_are_caught(backend, monkeypatch, module, name, defect, check, scheme):
    """A Philox counter one group ahead, random integers one too large (the encoder off by
    one), and NaN products never tested (the kernel's per-program branch) fail the checks
    above (8 bits, bf16)."""
    monkeypatch.setattr(module, name, defect)
    with pytest.raises(AssertionError, match="differ"):
        check(scheme, 8, torch.bfloat16, backend.device)


# -- routing -----------------------------------------------------------------------------------------


def test_default_variant_takes_sr(backend, monkeypatch):
    """quantize_packed (and so fp4spec.quantize on the triton backend) runs rows_sr for rowwise
    SR of E2M1 / E1M2 / INT4 1 x 16 / 1 x 32 blocks, seed or bits, bf16 / float16 / float32,
    either scale layout; the generic kernels for what it does not take; variant='rows_sr'
    elsewhere is refused with the reason."""
    ran = []
    for name, (check, run) in list(trq.VARIANTS.items()):
        monkeypatch.setitem(trq.VARIANTS, name, (check, lambda p, _n=name, _r=run: ran.append(_n) or _r(p)))
    x = adversarial(5, 16, 64)
    dev = backend.device
    rb = torch.zeros(x.shape, dtype=torch.int32, device=dev)
    for scheme in SCHEMES:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            xt = _dev(np.clip(x, -6e4, 6e4), dtype, dev)
            for kw in (dict(seed=3), dict(rbits=rb), dict(seed=3, scale_layout="cublas")):
                ran.clear()
                quantize_packed(xt, scheme, rounding="sr", **kw)
                assert ran == ["rows_sr"], (scheme, dtype, kw)
    ran.clear()
    q = fp4spec.quantize(_dev(x, torch.bfloat16, dev), "nvfp4", rounding="sr", seed=4, backend="triton")
    assert ran == ["rows_sr"] and q.backend == "triton"
    xt = _dev(x, torch.bfloat16, dev)
    for scheme, kw in (("nvfp4", {}), ("nvfp4", {"rht": "te", "seed": 1, "rounding": "sr"}),
                       ("mxfp4:block_size=64", {"seed": 1, "rounding": "sr"}),
                       ("nvfp4_2d", {"rbits": rb, "rounding": "sr"}), ("nvfp4", {"seed": 1, "rounding": "sr", "axis": 0}),
                       ("mxfp6_e3m2", {"seed": 1, "rounding": "sr"})):
        ran.clear()
        sch = fp4spec.backends.base.resolve_scheme(scheme)
        quantize_packed(xt, sch, **kw)
        assert "rows_sr" not in ran, (scheme, kw)
        with pytest.raises((NotImplementedError, ValueError), match="rows_sr"):
            quantize_packed(xt, sch, variant="rows_sr", **kw)


# -- on a GPU: full size ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "nvint4"])
def test_gpu_full_size(scheme):
    """16384^2 bf16 (and 4096 x 16384 float32): rows_sr == the generic rows kernel with a seed and
    with given bits; 64 x 16384 == the emulator."""
    g = torch.Generator(device="cuda").manual_seed(0)
    for shape, dtype in (((16384, 16384), torch.bfloat16), ((4096, 16384), torch.float32)):
        x = (torch.randn(shape, device="cuda", generator=g) * 3).to(dtype)
        rb = torch.randint(0, 256, shape, device="cuda", dtype=torch.int32, generator=g)
        for kw in (dict(seed=1234), dict(rbits=rb)):
            a = quantize_packed(x, scheme, rounding="sr", variant="rows_sr", **kw)
            b = quantize_packed(x, scheme, rounding="sr", variant="rows", **kw)
            assert torch.equal(a["packed"], b["packed"]) and torch.equal(a["scales"], b["scales"])
            del b
        xs = x[:64]  # the stream's first 64 rows: the slice's own draw_rbits
        out = quantize_packed(xs, scheme, rounding="sr", seed=1234, variant="rows_sr")
        bits = fp4spec.draw_rbits(tuple(xs.shape), 8, 1234, method="philox")
        ref = fp4spec.quantize(xs.float().cpu().numpy(), scheme, rounding="sr", rbits=bits)
        np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref.pack())
        np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales)


@triton.jit
def _sr_index_pair_kernel(a_ptr, r_ptr, out_ptr, fp_ptr, n, SR_BITS: tl.constexpr, E2M1: tl.constexpr,
                          SR_MAX: tl.constexpr, SR_SCALE: tl.constexpr, HALF_STEP: tl.constexpr, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    a = tl.load(a_ptr + i, mask=m, other=0.0)
    r = tl.load(r_ptr + i, mask=m, other=0)
    tl.store(out_ptr + i, tp._sr_index(a, r, SR_BITS, E2M1, SR_MAX, SR_SCALE), mask=m)
    tl.store(fp_ptr + i, tp._sr_index_fp32(a, r, SR_BITS, E2M1, SR_MAX, HALF_STEP), mask=m)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (directed-rounding PTX)")
@pytest.mark.parametrize("elem", ["e2m1", "e1m2", "int4_sym"])
def test_gpu_fp32_pipe_encoder_equals_integer(elem):
    """_sr_index_fp32 == _sr_index (== the model above) for every sr_bits 1..23, on the
    decision points, every non-negative bf16 value (as float32) and random float32 below 8,
    with random integers 0, 1, half, max - 1, max and random ones."""
    sch = fp4spec.get_scheme({"e2m1": "nvfp4", "e1m2": "ufp4", "int4_sym": "nvint4"}[elem])
    bf = np.arange(1 << 15, dtype=np.uint32) << 16
    rng = np.random.default_rng(0)
    for sr_bits in range(1, 24):
        a = np.concatenate([decision_points(elem, sr_bits), bf.view(F32),
                            rng.uniform(0, 8, 1 << 16).astype(F32), F32([np.nan])])
        n = 1 << sr_bits
        for r in (0, 1, n // 2, max(n - 2, 0), n - 1, None):
            rr = rng.integers(0, n, a.shape) if r is None else np.full(a.shape, r)
            at = torch.from_numpy(a).cuda()
            rt = torch.from_numpy(rr.astype(np.int32)).cuda()
            o1, o2 = (torch.empty(a.shape, dtype=torch.int32, device="cuda") for _ in range(2))
            _sr_index_pair_kernel[(triton.cdiv(a.size, 1024),)](at, rt, o1, o2, a.size, SR_BITS=sr_bits, B=1024,
                                                                **trl.sr_flags(sch, sr_bits))
            assert torch.equal(o1[:-1], o2[:-1]), (elem, sr_bits, r)
            fin = ~np.isnan(a)
            np.testing.assert_array_equal(o1.cpu().numpy()[fin], sr_index_model(a[fin], rr[fin], sr_bits, elem))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_gpu_fp32_pipe_kernel(scheme):
    """rows_sr with config rows_sr_fp32_pipe == without, 4096 x 16384 bf16 and float32, seed
    and given bits, sr_bits 8, 16, 23 (and 24, where the integer encoder runs)."""
    from dataclasses import replace

    from fp4spec.backends.triton import DEFAULT_CONFIG

    fp = replace(DEFAULT_CONFIG, rows_sr_fp32_pipe=True)
    assert trl.sr_fp32_pipe(fp, 23) and not trl.sr_fp32_pipe(fp, 24) and not trl.sr_fp32_pipe(DEFAULT_CONFIG, 8)
    g = torch.Generator(device="cuda").manual_seed(1)
    for dtype in (torch.bfloat16, torch.float32):
        x = (torch.randn((4096, 16384), device="cuda", generator=g) * 3).to(dtype)
        x[0, :16] = float("nan")
        x[1, 16:32] = float("inf")
        for sr_bits in (8, 16, 23, 24):
            rb = torch.randint(0, 1 << sr_bits, x.shape, device="cuda", dtype=torch.int32, generator=g)
            for kw in (dict(seed=77), dict(rbits=rb)):
                a = quantize_packed(x, scheme, rounding="sr", sr_bits=sr_bits, config=fp, **kw)
                b = quantize_packed(x, scheme, rounding="sr", sr_bits=sr_bits, **kw)
                assert torch.equal(a["packed"], b["packed"]) and torch.equal(a["scales"], b["scales"])
