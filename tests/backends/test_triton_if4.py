"""IF4 on the triton kernels (``rows_if4``, ``cols_if4`` and the dequantize) equals the numpy
emulator bit for bit -- codes and scale bytes (the INT4 flag included), the tensor scale and
the dequantized values: every UE4M3 scale code (subnormal scales too) with elements on the
E2M1 and INT4 midpoints, every adversarial kind (ties, binade edges, zero blocks, blocks at
the amax, saturation), exact ties between the two branches' errors (E2M1 wins), selection
near-ties, hypothesis tensors; every selection rule and every rounding mode; rowwise and axis
0; float32, bfloat16 and float16 input; Philox bits; bfloat16 and float32 dequantize output,
negative zeros included; 16 x 16 tiles (``if4_2d``) likewise. The error sums' order (torch's CPU
row sum, 16 and 256 terms) is checked on terms whose plain left-to-right sum differs. Three
planted defects (the errors summed in element order, the division by 2688 as a product by its
reciprocal, the INT4 candidate by division) are caught.

On a machine without a GPU the kernels run under TRITON_INTERPRET=1 (small shapes); the GPU
test at the end runs them at 4096 x 4096."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from fp4spec import if4 as spec_if4  # noqa: E402
from fp4spec.backends.triton import capability  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.triton.kernels import if4 as kif4  # noqa: E402
from fp4spec.conformance import builders, selection  # noqa: E402
from fp4spec.emulator import if4 as eif4  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
DEV = "cuda" if torch.cuda.is_available() else "cpu"
RULES = spec_if4.SELECTION_RULES
ROUNDINGS = fp4spec.ROUNDING_MODES
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _as_input(x: np.ndarray, dtype: str):
    """(torch tensor on DEV in dtype, its values as float32 numpy: the emulator's input)."""
    t = torch.from_numpy(np.ascontiguousarray(x, F32)).to(DTYPES[dtype])
    return t.to(DEV), t.float().numpy()


def _same(backend, x, rule="mse", rounding="rne", *, axis=-1, dtype="float32", seed=0, scheme="if4"):
    """backend.quantize == fp4spec.quantize (numpy) in every field, and their dequantized values."""
    sch = fp4spec.get_scheme(scheme, scale_rule=rule)
    xt, xr = _as_input(x, dtype)
    rb = np.random.default_rng(seed).integers(0, 256, x.shape) if rounding == "sr" else None
    ref = fp4spec.quantize(xr, sch, axis=axis, rounding=rounding, rbits=rb)
    q = backend.quantize(xt, sch, axis=axis, rounding=rounding, rbits=None if rb is None else torch.from_numpy(rb))
    assert q.backend == "triton"
    qn = q.to_numpy()
    assert q.equals(ref), (np.argwhere(qn.codes != ref.codes)[:3], np.argwhere(qn.scales != ref.scales)[:3])
    got, want = backend.dequantize(q).cpu().numpy(), fp4spec.dequantize(ref)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    return ref


def test_constants_are_the_spec():
    assert F32(kif4._INT_UP.value) == spec_if4.INT_UP and F32(kif4._INT_DOWN.value) == spec_if4.INT_DOWN
    assert kif4._S2688.value == float(spec_if4.SCALE_MAX * spec_if4.FP_MAX)
    assert kif4._FP_MAX.value == float(spec_if4.FP_MAX) and kif4._INT_FLAG.value == spec_if4.INT_FLAG
    assert capability.IF4_ROUNDINGS == fp4spec.ROUNDING_MODES


# -- every scale code, every rule and rounding ----------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_scale_code(backend, rule, rounding):
    ref = _same(backend, builders.if4_every_scale_code(np.random.default_rng(5)), rule, rounding)
    assert len(np.unique(ref.scales & 0x7F)) == 126  # every non-zero UE4M3 code


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ("rne", "rtz", "rto", "sr"))
def test_adversarial_kinds(backend, rule, rounding):
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        g = builders.global_amax(rng, sch, int(rng.integers(-3, 9)))
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=3, amax=g, spread=20)
        _same(backend, x, rule, rounding, seed=int(rng.integers(1 << 30)))


@pytest.mark.parametrize("rule", RULES)
def test_exact_ties_take_e2m1_and_int4_blocks_are_flagged(backend, rule):
    """Blocks of one value are exact ties (err_int == err_fp: E2M1, step 15's strict <);
    uniform blocks choose INT4. Both kinds occur, at several tensor scales."""
    rng = np.random.default_rng(11)
    x = np.zeros((4, 64), F32)
    x[:2, ::16] = rng.uniform(1e-3, 1, (2, 4)).astype(F32)
    x[2:] = rng.uniform(-1, 1, (2, 64)).astype(F32)
    ref = _same(backend, x, rule)
    assert not (ref.scales[:2] & 0x80).any() and (ref.scales[2:] & 0x80).any()
    amax, s_enc, s_dec = spec_if4.tensor_scales(np.max(np.abs(x)))
    _, _, _, err_fp, err_int = eif4.candidates(x[:2].reshape(2, 4, 16), amax, s_enc, s_dec, rule)
    assert np.array_equal(err_fp, err_int)


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties(backend, rule):
    rng = np.random.default_rng(7)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    for _ in range(2):
        _same(backend, selection.near_tie_tensor(rng, sch), rule)


def test_zero_tensor_subnormal_scales_and_negative_zero(backend):
    z = np.zeros((2, 32), F32)
    z[1, 3] = -0.0
    ref = _same(backend, z)
    assert ref.global_scale == 0
    x = np.zeros((1, 32), F32)
    x[0, :16] = F32(448 * 6.0)  # the tensor amax: the second block's scale is subnormal
    x[0, 16] = F32(0.012)
    x[0, 17] = F32(-1e-7)  # rounds to -0: E2M1 code 8 (the block takes E2M1)
    ref = _same(backend, x)
    assert (ref.scales[0, 1] & 0x7F) < 8
    assert (np.signbit(fp4spec.dequantize(ref)) & (fp4spec.dequantize(ref) == 0)).any()


# -- layouts, input dtypes, random bits -------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("axis", (-1, 0))
def test_dtypes_and_axis(backend, dtype, axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((48, 32)) * np.exp2(rng.integers(-8, 8, (48, 1)))).astype(F32)
    for rounding in ("rne", "rdn", "sr"):
        _same(backend, x, "mse", rounding, axis=axis, dtype=dtype)


def test_columnwise_kernel_on_a_transpose(backend):
    """A 2-D x that is the transpose of a contiguous tensor runs cols_if4 unmoved; quantize_packed
    reads a column slice (row stride above its width) in place; a 3-D x rowwise; all equal the
    emulator."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((48, 40)).astype(F32)
    xt = torch.from_numpy(np.ascontiguousarray(x.T)).to(DEV).T
    assert backend.quantize(xt, "if4", axis=0).equals(fp4spec.quantize(x, "if4", axis=0))
    x3 = rng.standard_normal((2, 3, 32)).astype(F32)
    assert backend.quantize(torch.from_numpy(x3).to(DEV), "if4").equals(fp4spec.quantize(x3, "if4"))
    big = rng.standard_normal((48, 40)).astype(F32)
    rb = rng.integers(0, 256, (48, 32))
    view = torch.from_numpy(big).to(DEV)[:, :32]
    for scheme in ("if4", "if4_2d"):
        kw = dict(axis=0, rounding="sr", rbits=torch.from_numpy(rb).to(DEV))
        q = backend.quantize(view, scheme, **kw)
        assert q.equals(fp4spec.quantize(big[:, :32].copy(), scheme, axis=0, rounding="sr", rbits=rb))
        in_place, packed = trq.quantize_packed(view, scheme, **kw), trq.quantize_packed(view.contiguous(), scheme, **kw)
        assert all(torch.equal(in_place[f], packed[f]) for f in ("packed", "scales"))


@pytest.mark.parametrize("axis", (-1, 0))
def test_variants_and_refusals(axis):
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((32, 32)).astype(F32)).to(DEV)
    name = "rows_if4" if axis == -1 else "cols_if4"
    other = "cols_if4" if axis == -1 else "rows_if4"
    out = trq.quantize_packed(x, "if4", axis=axis, variant=name)
    assert torch.equal(out["packed"], trq.quantize_packed(x, "if4", axis=axis)["packed"])
    with pytest.raises(NotImplementedError, match=f"variant='{other}'"):
        trq.quantize_packed(x, "if4", axis=axis, variant=other)
    with pytest.raises(NotImplementedError, match="'rows_if4' or 'cols_if4'"):
        trq.quantize_packed(x, "if4", axis=axis, variant="rows_bf16")
    with pytest.raises(NotImplementedError, match="a variant of MX and two-level"):
        trq.quantize_packed(x, "nvfp4", axis=axis, variant=name)
    with pytest.raises(ValueError, match="s_enc_dec"):
        trq.quantize_packed(x, "if4", axis=axis, s_enc_dec=(1.0, 1.0))
    with pytest.raises(NotImplementedError, match="plain scales"):
        trq.quantize_packed(x, "if4", axis=axis, scale_layout="cublas")


def test_philox_bits_are_draw_rbits(backend):
    x = np.random.default_rng(8).standard_normal((6, 48)).astype(F32)
    for sr_bits in (3, 8, 24):
        q = backend.quantize(torch.from_numpy(x).to(DEV), "if4", rounding="sr", seed=77, sr_bits=sr_bits)
        rb = fp4spec.draw_rbits(x.shape, sr_bits, 77, method="philox")
        assert q.equals(fp4spec.quantize(x, "if4", rounding="sr", rbits=rb, sr_bits=sr_bits))


def test_rht_unfused(backend):
    x = np.random.default_rng(9).standard_normal((4, 64)).astype(F32)
    q = backend.quantize(torch.from_numpy(x).to(DEV), "if4", rht="te")
    assert q.equals(fp4spec.quantize(x, "if4", rht="te"))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("axis", (-1, 0))
def test_non_finite_input_is_refused(backend, bad, axis):
    x = np.ones((32, 32), F32)
    x[5, 0] = bad
    where = "x\\[0, 5\\]" if axis == 0 else "x\\[5, 0\\]"
    with pytest.raises(ValueError, match=f"IF4 is defined for finite input; {where}"):
        backend.quantize(torch.from_numpy(x).to(DEV), "if4", axis=axis)


@pytest.mark.parametrize("scheme,kernel", [("if4", "quantize_if4_kernel"), ("if4_2d", "quantize_if4_tiles_kernel")])
def test_launch_turns_fp_fusion_off(monkeypatch, scheme, kernel):
    """The kernels launch with enable_fp_fusion=False: compiled for sm_90 with it on, 17 (if4)
    and 34 (if4_2d) float32 products would fuse into the sums after them (PTX fma.rn.f32;
    benchmarks/kernel_fingerprint.py compiles them offline)."""
    seen = {}

    class Spy:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.update(kw)

    monkeypatch.setattr(kif4, kernel, Spy())
    trq.quantize_packed(torch.ones((16, 32), device=DEV), scheme)
    assert seen["enable_fp_fusion"] is False


def test_claims(backend):
    caps = backend.capabilities()
    for name in ("if4", "if4_2d"):
        for spec in (name, f"{name}:scale_rule=mae", f"{name}:scale_rule=abs_max"):
            assert spec in caps.schemes and caps.roundings_for(spec) == fp4spec.ROUNDING_MODES
        assert backend.why_no_dequantize(name) == ""
    assert "rht" in backend.why_unsupported("if4", rht=RHT.te(arith="mma:sm90-bf16"))


@settings(max_examples=30, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.sampled_from([16, 32, 48])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(ROUNDINGS), axis=st.sampled_from([-1, 0]))
def test_hypothesis(backend, x, rule, rounding, axis):
    if axis == 0:
        x = np.ascontiguousarray(x.T)  # blocks of 16 down the columns
    _same(backend, x, rule, rounding, axis=axis)


# -- 16 x 16 tiles (if4_2d) -------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_2d_every_scale_code(backend, rule, rounding):
    x = builders.if4_every_scale_code(np.random.default_rng(5), tile_rows=16)
    _same(backend, x, rule, rounding, scheme="if4_2d")


@pytest.mark.parametrize("rule", RULES)
def test_2d_adversarial_kinds_near_ties_and_axis(backend, rule):
    sch = fp4spec.get_scheme("if4_2d", scale_rule=rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=2, spread=20)
        _same(backend, x, rule, "sr" if kind == "ties" else "rne", seed=int(rng.integers(1 << 30)), scheme="if4_2d")
        _same(backend, np.ascontiguousarray(x.T), rule, "rtz", axis=0, scheme="if4_2d")
    if rule != "abs_max":
        _same(backend, selection.near_tie_tensor(rng, sch, rows=1, cols=3), rule, scheme="if4_2d")


def test_2d_dtypes_philox_and_padding(backend):
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((32, 48)) * np.exp2(rng.integers(-8, 8, (32, 1)))).astype(F32)
    for dtype in ("bfloat16", "float16"):
        _same(backend, x, "mae", "rup", dtype=dtype, scheme="if4_2d")
    q = backend.quantize(torch.from_numpy(x).to(DEV), "if4_2d", rounding="sr", seed=5)
    rb = fp4spec.draw_rbits(x.shape, 8, 5, method="philox")
    assert q.equals(fp4spec.quantize(x, "if4_2d", rounding="sr", rbits=rb))
    xp = torch.from_numpy(x[:20, :40].copy()).to(DEV)  # rows and columns padded with zeros
    q = fp4spec.quantize(xp, "if4_2d", pad=True, backend="triton")
    assert q.equals(fp4spec.quantize(x[:20, :40].copy(), "if4_2d", pad=True))


@settings(max_examples=15, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.sampled_from([16, 32]), st.sampled_from([16, 48])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(ROUNDINGS))
def test_2d_hypothesis(backend, x, rule, rounding):
    _same(backend, x, rule, rounding, scheme="if4_2d")


# -- the error sum's order; dequantize ---------------------------------------------------------------


@triton.jit
def _row_sum16_kernel(t_ptr, o_ptr, BR: tl.constexpr):
    i = (tl.arange(0, BR)[:, None, None] * 16 + tl.arange(0, 2)[None, :, None] * 8
         + tl.arange(0, 8)[None, None, :])
    tl.store(o_ptr + tl.arange(0, BR), kif4._row_sum16(tl.load(t_ptr + i)))


@triton.jit
def _row_sum256_kernel(t_ptr, o_ptr, BT: tl.constexpr):
    i = (tl.arange(0, BT)[:, None, None, None] * 256 + tl.arange(0, 8)[None, :, None, None] * 32
         + tl.arange(0, 4)[None, None, :, None] * 8 + tl.arange(0, 8)[None, None, None, :])
    tl.store(o_ptr + tl.arange(0, BT), kif4._row_sum256(tl.load(t_ptr + i)))


@pytest.mark.parametrize("n", (16, 256))
def test_row_sum_is_torch_cpu_order(n):
    """Terms spread over many binades, where the left-to-right sum differs from torch's order
    on most rows: the kernels' sums (16 terms; 256 for a tile) are eif4.row_sums bit for bit."""
    rng = np.random.default_rng(10)
    t = (rng.random((64, n)) * np.exp2(rng.integers(-30, 30, (64, n)))).astype(F32)
    want = eif4.row_sums(t)
    naive = np.zeros(64, F32)
    for k in range(n):
        naive = (naive + t[:, k]).astype(F32)
    assert (naive != want).sum() > 16
    out = torch.empty(64, dtype=torch.float32, device=DEV)
    kernel = _row_sum16_kernel if n == 16 else _row_sum256_kernel
    kernel[(1,)](torch.from_numpy(t).to(DEV), out, 64)
    assert np.array_equal(out.cpu().numpy().view(np.uint32), want.view(np.uint32))


def test_dequantize_bfloat16_and_float32_out():
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-20, 20, (8, 1)))).astype(F32)
    x[0, 1] = F32(-1e-9)  # a negative zero code
    ref = fp4spec.quantize(x, "if4")
    want = fp4spec.dequantize(ref)
    out = trq.quantize_packed(torch.from_numpy(x).to(DEV), "if4")
    f = trq.dequantize_if4(out["packed"], out["scales"], out["global_scale"])
    assert np.array_equal(f.cpu().numpy().view(np.uint32), want.view(np.uint32))
    b = trq.dequantize_if4(out["packed"], out["scales"], out["global_scale"], out_dtype=torch.bfloat16)
    wb = torch.from_numpy(want).to(torch.bfloat16)  # torch's RNE conversion on the CPU
    assert torch.equal(b.cpu().view(torch.int16), wb.view(torch.int16))
    assert (b.cpu().view(torch.int16) == -32768).any()  # -0 kept in bfloat16 too
    with pytest.raises(ValueError, match="out_dtype"):
        trq.dequantize_if4(out["packed"], out["scales"], out["global_scale"], out_dtype=torch.float16)


def test_dequantize_nan_scales(backend):
    """Scale bytes 0x7F and 0xFF (NaN, E2M1 and INT4 blocks) decode to the emulator's NaN for every
    code, negative ones included (the sign is set only on numbers)."""
    x = np.random.default_rng(14).standard_normal((2, 64)).astype(F32)
    q = fp4spec.quantize(x, "if4")
    s = np.array(q.scales)
    s[0, :2] = (0x7F, 0xFF)
    q = q.replace(scales=s)
    got = backend.dequantize(q.to_torch(DEV)).cpu().numpy()
    assert np.array_equal(got.view(np.uint32), fp4spec.dequantize(q).view(np.uint32))


# -- planted defects --------------------------------------------------------------------------------


@triton.jit
def _sum_in_element_order(t):
    """kif4._row_sum16 adding the 16 terms left to right (a planted defect)."""
    h = tl.arange(0, 2)[None, :, None]
    lane = tl.arange(0, 8)[None, None, :]
    e = tl.zeros((t.shape[0],), tl.float32)
    for k in tl.static_range(16):
        e = e + tl.sum(tl.sum(tl.where((h == k // 8) & (lane == k % 8), t, 0.0), axis=2), axis=1)
    return e


@triton.jit
def _dequantized_by_reciprocal(q, s, amax, INT: tl.constexpr):
    """kif4._dequantized with p * fp32(1/2688) for the division (CUDA's trap; a planted defect)."""
    p = q * s
    p = p * amax
    if INT:
        p = p * 0.8571428656578064
    return p * 0.00037202381645329297


@triton.jit
def _int4_by_division(y, r, MODE: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr, SR_SCALE_FP: tl.constexpr,
                      SR_SCALE_INT: tl.constexpr):
    """kif4._candidates with z = y / fp32(6/7) (a planted defect)."""
    z = tl.math.div_rn(y, tl.full(y.shape, 0.8571428656578064, tl.float32))
    fi = kif4._e2m1_index(y, r, MODE, SR, SR_BITS, SR_SCALE_FP)
    ii = kif4._int4_index(z, r, MODE, SR, SR_BITS, SR_SCALE_INT)
    return tl.where(y < 0.0, fi | 8, fi), tl.where(z < 0.0, (16 - ii) & 15, ii)


@pytest.mark.parametrize("name,defect", [("_row_sum16", _sum_in_element_order),
                                         ("_dequantized", _dequantized_by_reciprocal),
                                         ("_candidates", _int4_by_division)])
def test_planted_defect_is_caught(backend, monkeypatch, name, defect):
    """The error sum in element order and p * fp32(1/2688) flip near-ties; the INT4 candidate
    by division differs on the every-scale-code blocks."""
    monkeypatch.setattr(kif4, name, defect)
    rng = np.random.default_rng(7)
    sch = fp4spec.get_scheme("if4")
    xs = [selection.near_tie_tensor(rng, sch, rows=4, cols=8) for _ in range(2)]
    xs.append(builders.if4_every_scale_code(np.random.default_rng(5)))
    with pytest.raises(AssertionError):
        for x in xs:
            _same(backend, x)


# -- GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_full_size():
    """SIZE x SIZE bf16 and float32 (FP4SPEC_GPU_SIZE, default 4096), blocks spread over 80
    binades: rowwise equals columnwise of the transpose; for if4 and if4_2d the triton backend
    equals the torch backend on the whole tensor (every rule; rne, rtz and given-bits SR) and
    the emulator on its first 256 rows; fp4spec.quantize picks triton, and its dequantize
    equals the emulator's."""
    size = int(os.environ.get("FP4SPEC_GPU_SIZE", "4096"))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn((size, size), device="cuda", generator=g)
         * torch.exp2(torch.randint(-40, 40, (size, size // 16), device="cuda", generator=g).float())
         .repeat_interleave(16, dim=1))
    rows = trq.quantize_packed(x, "if4")
    cols = trq.quantize_packed(x.T.contiguous(), "if4", axis=0)
    for f in ("packed", "scales", "global_scale"):
        assert torch.equal(rows[f], cols[f]), f
    rb = torch.randint(0, 256, x.shape, device="cuda", dtype=torch.int32, generator=g)
    for name in ("if4", "if4_2d"):
        for rule in RULES:
            sch = fp4spec.get_scheme(name, scale_rule=rule)
            for rounding in ("rne", "rtz", "sr"):
                kw = dict(rounding=rounding, rbits=rb if rounding == "sr" else None)
                for xi in (x, x.to(torch.bfloat16)):
                    assert fp4spec.quantize(xi, sch, backend="triton", **kw).equals(
                        fp4spec.quantize(xi, sch, backend="torch", **kw)), (name, rule, rounding, xi.dtype)
        head = x[:256]
        assert fp4spec.select_backend(head, name) == "triton"
        q = fp4spec.quantize(head, name)
        assert q.backend == "triton" and q.equals(fp4spec.quantize(head.cpu().numpy(), name))
        got = fp4spec.dequantize(q).cpu().numpy()
        assert np.array_equal(got.view(np.uint32), fp4spec.dequantize(q.to_numpy()).view(np.uint32))
