"""HiF4 on the triton kernels (``rows_hif4``, ``cols_hif4`` and the dequantize) equals the numpy
emulator bit for bit -- codes, E6M2 scale bytes and every micro-exponent bit: groups around
exact element ties, the E1_8 / E1_16 thresholds, the E6M2 clamps and bfloat16 ties of the scale
factor (one float32 ulp either side), every E6M2 scale byte, every bfloat16 pattern, zero and
-0 groups, float32 subnormals, NaN and Inf groups (``nonfinite="propagate"``, and the error),
hypothesis tensors; float32, bfloat16 and float16 input; rowwise and axis 0. Two planted
defects (ties to even; float32-rounded products) are caught.

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
from fp4spec.backends.triton import capability  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.triton.kernels import hif4 as khif4  # noqa: E402
from fp4spec.emulator import hif4 as nh  # noqa: E402
from fp4spec.hif4 import e6m2_value  # noqa: E402

from .test_torch_generic import hif4_adversarial  # noqa: E402
from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
DEV = "cuda" if torch.cuda.is_available() else "cpu"
FIELDS = ("codes", "scales", "e1_8", "e1_16")
DTYPES = ["float32", "bfloat16", "float16"]


# -- inputs -------------------------------------------------------------------------------------


def every_scale_code(seed: int = 0) -> np.ndarray:
    """float32 (255, 64): group c has the E6M2 scale code c (its maximum 7 * value(c): SF =
    BF16(value(c) * 511/512) = value(c)), the rest element values, their ties (k + 1/2) *
    2^(DE - 2) / REC and the E1 thresholds with their float32 neighbours, random signs."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(255):
        v = float(e6m2_value(c))
        rec = float(nh.bf16_rne(np.float64(1.0 / v)))
        cands = [4 / rec, 2 / rec, 1 / rec] + [(k + 0.5) * 2.0 ** (de - 2) / rec for k in range(7) for de in range(3)]
        vals = np.array([np.nextafter(F32(x), F32(d)) for x in cands for d in (0, np.inf)] + cands, F32)
        vals = vals[vals <= F32(7 * v)]
        row = rng.choice(vals, 64).astype(F32) * rng.choice(np.array([-1, 1], F32), 64)
        row[rng.integers(0, 64)] = F32(7 * v)
        rows.append(row)
    return np.stack(rows)


def special_groups() -> np.ndarray:
    """Zero and -0 groups, float32 subnormals, negative values that round to -0, the float32
    extremes (E6M2 saturated at 49152: element codes saturate), one value per group."""
    g = np.zeros((8, 64), F32)
    g[1] = -0.0
    g[2] = F32(2.0 ** -149) * np.arange(-32, 32, dtype=F32)
    g[3] = -F32(2.0 ** -149)
    g[3, 0] = F32(1.0)
    g[4] = np.float32(3.4028235e38) * np.linspace(-1, 1, 64, dtype=F32)
    g[5, 17] = F32(-2.0 ** -140)
    g[6] = F32(1e30) * (np.arange(64, dtype=F32) % 7 - 3)
    g[7] = np.ldexp(F32(1.0), np.arange(-20, 44))  # every level at its own binade
    return g


ADV = np.concatenate([hif4_adversarial(192, seed=11), every_scale_code(), special_groups()])  # 455 groups


def _clipped(x: np.ndarray, top: float) -> np.ndarray:
    """Finite values clipped to +-top (they stay finite in a narrower dtype); NaN, Inf kept."""
    return np.where(np.isfinite(x), np.clip(x, -top, top), x)


def as_input(x: np.ndarray, dtype: str):
    """(torch tensor on DEV, the float32 values the emulator reads)."""
    if dtype == "bfloat16":
        xb = _clipped(x, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)).astype(ml_dtypes.bfloat16)
        return torch.from_numpy(xb.view(np.int16).copy()).view(torch.bfloat16).to(DEV), xb.astype(F32)
    if dtype == "float16":
        xh = _clipped(x, 65504.0).astype(np.float16)
        return torch.from_numpy(xh).to(DEV), xh.astype(F32)
    return torch.from_numpy(x.copy()).to(DEV), x


def kernel_fields(out) -> dict:
    return {"codes": trq.unpack_lo_first(out["packed"]).cpu().numpy(), "scales": out["scales"].cpu().numpy(),
            "e1_8": out["e1_8"].cpu().numpy(), "e1_16": out["e1_16"].cpu().numpy()}


def assert_fields(got: dict, want: dict, what: str):
    for f in FIELDS:
        g, w = got[f], np.asarray(want[f])
        assert g.shape == w.shape, f"{what}: {f} shape {g.shape} != {w.shape}"
        bad = np.argwhere(g != w)
        assert not len(bad), (f"{what}: {len(bad)} {f} differ, first at {tuple(bad[0])}: "
                              f"{int(g[tuple(bad[0])])} != {int(w[tuple(bad[0])])}")


def check(x, dtype="float32", axis=-1, nonfinite="error", **kw):
    """quantize_packed of x (rows of whole groups; axis=0: of x^T along axis 0, the same
    groups) equals the emulator in every field."""
    xt, x32 = as_input(x if axis == -1 else np.ascontiguousarray(x.T), dtype)
    out = trq.quantize_packed(xt, "hif4", axis=axis, nonfinite=nonfinite, **kw)
    want = nh.hif4_quantize(x32 if axis == -1 else x32.T, nonfinite=nonfinite)
    assert_fields(kernel_fields(out), want, f"{dtype} axis={axis}")
    return out


# -- adversarial ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adversarial_vs_emulator(dtype, axis):
    x = ADV.reshape(-1, 5 * 64) if axis == -1 else ADV[:448].reshape(64, -1)  # axis 0: 64 rows of 7 groups
    check(x, dtype, axis, BM=128)


def test_every_scale_code_and_its_edges():
    out = check(every_scale_code(seed=1), BM=256)
    assert sorted(set(out["scales"].reshape(-1).tolist())) == list(range(255))
    check(every_scale_code(seed=2), "bfloat16", BM=256)


def test_every_bf16_pattern():
    """Every bfloat16 value, in groups of 64 consecutive patterns (NaN and Inf groups
    propagate) and scaled into the groups of an ordinary maximum (products near and below the
    element grid)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(F32).reshape(-1, 8 * 64)
    check(x, "bfloat16", nonfinite="propagate", BM=1024)
    finite = x.reshape(-1)[np.isfinite(x.reshape(-1))]
    y = np.resize(finite * F32(2.0 ** -120), -(-len(finite) // 512) * 512).reshape(-1, 64)
    y[:, 0] = F32(7 * 2.0 ** 8)
    check(y.reshape(-1, 8 * 64), "bfloat16", BM=1024)


def test_nonfinite_groups():
    x = ADV[:64].reshape(8, 512).copy()
    x[0, 3], x[1, 70], x[2, 200], x[2, 201], x[3, :64], x[5, 511] = np.nan, np.inf, -np.inf, -np.nan, np.inf, np.nan
    for axis in (-1, 0):
        for dtype in ("float32", "bfloat16"):
            out = check(x if axis == -1 else x.reshape(64, 64), dtype, axis, nonfinite="propagate")
            assert int((out["scales"] == 0xFF).sum()) == 5
    with pytest.raises(ValueError, match=r"element \(0, 3\) is nan; HiF4 has no encoding"):
        trq.quantize_packed(torch.from_numpy(x).to(DEV), "hif4")
    with pytest.raises(ValueError, match="nonfinite"):
        trq.quantize_packed(torch.from_numpy(x).to(DEV), "hif4", nonfinite="zero")


def test_tiles():
    """Programs with fewer groups than BR (masked), and other tiles."""
    x = ADV[:24].reshape(-1, 4 * 64)
    for kw in (dict(BM=2, num_warps=1), dict(BM=16), dict(BM=32)):
        check(x, "float32", **kw)
        check(x.reshape(24, 64), "bfloat16", axis=0, **kw)


# -- hypothesis --------------------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402


@settings(max_examples=20, deadline=None)
@given(arrays(np.float32, (2, 128), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)),
       st.sampled_from(DTYPES), st.sampled_from([-1, 0]))
def test_hypothesis(x, dtype, axis):
    check(x if axis == -1 else x.reshape(4, 64), dtype, axis, nonfinite="propagate")


# -- the public call, dequantize, errors ----------------------------------------------------------


def test_public_call(backend):
    """fp4spec.quantize(backend="triton"): rowwise, axis=0, a 3-d x along its middle axis,
    pad=True, rht="te"; every field, and the device dequantize."""
    x = ADV[:128].reshape(16, 512)
    cases = [(x, {}), (x.reshape(64, 128), {"axis": 0}), (x.reshape(2, 64, 64), {"axis": 1}),
             (x * F32(2.0 ** -20), {"rht": "te"}),  # scaled: no sum overflows to Inf
             (x[:, :-40], {"pad": True})]
    for xx, kw in cases:
        q = fp4spec.quantize(torch.from_numpy(np.ascontiguousarray(xx)), "hif4", backend="triton", **kw)
        ref = fp4spec.quantize(xx, "hif4", backend="numpy", **kw)
        assert q.backend == "triton" and q.equals(ref), kw
        got, want = backend.dequantize(q).numpy(), fp4spec.dequantize(ref, backend="numpy")
        assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32)), kw
    y = x.copy()
    y[3, 5] = np.inf
    with pytest.raises(ValueError, match=r"element \(3, 5\) is inf; HiF4 has no encoding"):
        fp4spec.quantize(torch.from_numpy(y), "hif4", backend="triton")


def test_dequantize_nan_groups():
    x = ADV[:64].reshape(4, 1024).copy()
    x[1, 64:128] = np.nan
    out = check(x, nonfinite="propagate")
    got = trq.dequantize_hif4(out["packed"], out["scales"], out["e1_8"], out["e1_16"]).cpu().numpy()
    want = nh.hif4_dequantize(**nh.hif4_quantize(x, nonfinite="propagate"))
    nan = np.isnan(want)
    assert nan.sum() == 64 and np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def test_kernel_constants_are_the_spec():
    from fp4spec import hif4 as spec

    recs = [spec.e6m2_reciprocal((48 << 2) | m) for m in (1, 2, 3)]
    assert [khif4._REC1.value, khif4._REC2.value, khif4._REC3.value] == [float(r) for r in recs]
    assert khif4._CONST_REC.value == float(spec.CONST_REC)
    assert (khif4._SCALE_MIN.value, khif4._SCALE_MAX.value) == (float(spec.E6M2_MIN), float(spec.E6M2_MAX))
    assert khif4._NAN_CODE.value == spec.E6M2_NAN_CODE


def test_requests_and_errors(backend):
    xt = torch.ones((4, 64))
    assert backend.why_unsupported("hif4") == "" and backend.why_no_dequantize("hif4") == ""
    assert "'rne' only" in backend.why_unsupported("hif4", "sr")
    assert backend.capabilities().roundings_for("hif4") == ("rne",)
    with pytest.raises(BackendError, match="'rne' only"):
        fp4spec.quantize(xt, "hif4", rounding="sr", seed=1, backend="triton")
    for v in ("rows", "rows_bf16", "cols", "tile", "rows_wide"):
        with pytest.raises(NotImplementedError, match="rows_hif4"):
            trq.quantize_packed(xt, "hif4", variant=v)
    with pytest.raises(NotImplementedError, match="MX and two-level"):
        trq.quantize_packed(xt, "mxfp4", variant="rows_hif4")
    with pytest.raises(NotImplementedError, match="axis 0"):
        trq.quantize_packed(xt, "hif4", variant="cols_hif4")
    with pytest.raises(ValueError, match="not a whole number"):
        trq.quantize_packed(torch.ones((4, 96)), "hif4")
    assert capability.check_request(fp4spec.get_scheme("hif4"), "rne") is None


# -- planted defects ------------------------------------------------------------------------------


@triton.jit
def _ties_to_even(a, r2, SPLIT: tl.constexpr):
    """khif4._magnitude with ties to even (the golden model rounds half up): a planted defect."""
    p = a * r2
    f = tl.floor(p + 0.5)
    f = tl.where((f - p == 0.5) & (f % 2 == 1), f - 1.0, f)
    return tl.minimum(f, 7.0).to(tl.int32)


@triton.jit
def _float32_product(a, r2, SPLIT: tl.constexpr):
    """khif4._magnitude with float32-rounded products (arith="float32"): a planted defect."""
    return tl.minimum(tl.floor(a * r2 + 0.5), 7.0).to(tl.int32)


@pytest.mark.parametrize("defect", [_ties_to_even, _float32_product])
def test_planted_defect_is_caught(monkeypatch, defect):
    monkeypatch.setattr(khif4, "_magnitude", defect)
    with pytest.raises(AssertionError, match="codes differ"):
        check(ADV.reshape(-1, 5 * 64), "float32", BM=128)


# -- GPU: full size ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_full_size():
    """SIZE x SIZE bf16 (FP4SPEC_GPU_SIZE, default 16384): rowwise equals columnwise of the
    transpose in every field; both equal the emulator on a 256-row slice (bf16 and float32);
    fp4spec.quantize picks triton and its dequantize equals the emulator's; the adversarial
    groups equal the emulator in every dtype and layout."""
    size = int(os.environ.get("FP4SPEC_GPU_SIZE", "16384"))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn((size, size), device="cuda", generator=g)
         * torch.exp2(torch.randint(-40, 40, (size, size // 64), device="cuda", generator=g).float())
         .repeat_interleave(64, dim=1)).to(torch.bfloat16)
    rows = trq.quantize_packed(x, "hif4")
    cols = trq.quantize_packed(x.T.contiguous(), "hif4", axis=0)
    for f in ("packed", "scales", "e1_8", "e1_16"):
        assert torch.equal(rows[f], cols[f]), f
    x32 = x[:256].float().cpu().numpy()
    head = {f: rows[f][:256] for f in ("packed", "scales", "e1_8", "e1_16")}
    assert_fields(kernel_fields(head), nh.hif4_quantize(x32), "bf16 slice")
    xf = x[:256].float() * 1.0009765625  # float32 values with more than 8 significant bits
    assert_fields(kernel_fields(trq.quantize_packed(xf, "hif4")), nh.hif4_quantize(xf.cpu().numpy()), "f32 slice")
    assert fp4spec.select_backend(x, "hif4") == "triton"
    q = fp4spec.quantize(x[:256], "hif4")
    got = fp4spec.dequantize(q).cpu().numpy()
    assert np.array_equal(got.view(np.uint32), nh.hif4_dequantize(**nh.hif4_quantize(x32)).view(np.uint32))
    big = np.tile(ADV[:448], (4, 1)).reshape(64, -1)
    for dtype in DTYPES:
        check(big, dtype)
        check(big, dtype, axis=0)
