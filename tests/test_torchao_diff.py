"""Differential tests against torchao's CPU eager path (``profile="torchao"``), bit for bit.

torchao 0.18 ``to_mx`` (FLOOR, CEIL, EVEN, RCEIL) and ``nvfp4_quantize`` /
``NVFP4Tensor``. Where torchao and fp4spec's other profiles (OCP, TE) disagree, the
disagreement is pinned here with a concrete input.
"""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
nvfp4_tensor = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
from torchao.prototype.mx_formats.kernels import unpack_uint4  # noqa: E402

import fp4spec
from fp4spec.block_schemes import get_scheme  # noqa: E402
from fp4spec.api.block_scaling import quantize  # noqa: E402

F32 = np.float32
M = mx_tensor.ScaleCalculationMode
MODES = {"floor": M.FLOOR, "ceil": M.CEIL, "even": M.EVEN, "rceil": M.RCEIL}
ELEMENTS = {"mxfp4": torch.float4_e2m1fn_x2, "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2",
            "mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2}


def torchao_mx(x: np.ndarray, name: str, rule: str):
    scale, data = mx_tensor.to_mx(torch.from_numpy(np.ascontiguousarray(x)), ELEMENTS[name], 32, MODES[rule])
    codes = unpack_uint4(data.view(torch.uint8)) if name == "mxfp4" else data.view(torch.uint8)
    return scale.view(torch.uint8).numpy(), codes.numpy().reshape(x.shape)


def torchao_nvfp4(x: np.ndarray):
    t = torch.from_numpy(np.ascontiguousarray(x))
    pts = nvfp4_tensor.per_tensor_amax_to_scale(t.abs().max())
    scale, data = nvfp4_tensor.nvfp4_quantize(t, 16, pts)
    deq = nvfp4_tensor.NVFP4Tensor.to_nvfp4(t, per_tensor_scale=pts).dequantize(torch.float32)
    return scale.view(torch.uint8).numpy(), unpack_uint4(data).numpy().reshape(x.shape), np.float32(pts.item()), deq.numpy()


def mixed_data(seed: int, rows: int = 64, cols: int = 256) -> np.ndarray:
    """Normal values with a per-row exponent from 2^-130 to 2^120, some exact grid values,
    ties, significands near 1, 1.5, 1.75, 2, zeros and fp32 subnormals."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-130, 120, (rows, 1)).astype(float))
    grid = np.array([0.5, 1, 1.5, 2, 3, 4, 6, 2.5, 5, 1.75, 0.25, 7.5, 448, 57344, 1.25])
    pick = rng.random((rows, cols)) < 0.3
    x = np.where(pick, rng.choice(grid, (rows, cols)) * np.exp2(rng.integers(-60, 60, (rows, 1)).astype(float))
                 * rng.choice([1, 1 + 2.0 ** -23, 1 - 2.0 ** -24, -1], (rows, cols)), x)
    x[rng.random((rows, cols)) < 0.05] = 0.0
    x[-1] = rng.integers(-(1 << 23), 1 << 23, cols) * 2.0 ** -149
    return x.astype(np.float32)


def rceil_log2_quirk(x: np.ndarray, name: str, ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Blocks where torchao's eager RCEIL takes ceil(torch.log2(d)) in floating point: d a few
    ulps above a power of two gives one less than the exact ceiling. Returns the mask of those
    blocks after checking that every mismatch is of that kind."""
    amax = np.max(np.abs(x.reshape(x.shape[0], -1, 32)), axis=-1)
    d = amax / F32(get_scheme(name).element.max)
    frac = d / np.exp2(np.floor(np.log2(np.where(d > 0, d, 1).astype(np.float64))))
    quirk = ours != theirs
    assert (theirs[quirk].astype(int) == ours[quirk].astype(int) - 1).all()
    assert (frac[quirk] - 1 < 2.0 ** -16).all()
    return quirk


# -- MX -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(ELEMENTS))
@pytest.mark.parametrize("rule", list(MODES))
@pytest.mark.parametrize("seed", [0, 1])
def test_to_mx_matches_profile_torchao(name, rule, seed):
    x = mixed_data(seed)
    s_ao, c_ao = torchao_mx(x, name, rule)
    q = quantize(x, name, scale_rule=rule, profile="torchao")
    ok = np.ones(s_ao.shape, bool)
    if rule == "rceil":
        ok = ~rceil_log2_quirk(x, name, q.scales, s_ao)
    assert np.array_equal(q.scales[ok], s_ao[ok])
    blocks = q.codes.reshape(x.shape[0], -1, 32)[ok]
    assert np.array_equal(blocks, c_ao.reshape(x.shape[0], -1, 32)[ok])


@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_bfloat16_input(rule):
    x = mixed_data(5).astype(ml_dtypes.bfloat16)
    t = torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    scale, data = mx_tensor.to_mx(t, torch.float4_e2m1fn_x2, 32, MODES[rule])
    q = quantize(x, "mxfp4", scale_rule=rule, profile="torchao")
    s_ao = scale.view(torch.uint8).numpy()
    ok = np.ones(s_ao.shape, bool) if rule != "rceil" else ~rceil_log2_quirk(x.astype(np.float32), "mxfp4", q.scales, s_ao)
    assert np.array_equal(q.scales[ok], s_ao[ok])
    codes = unpack_uint4(data.view(torch.uint8)).numpy().reshape(x.shape)
    assert np.array_equal(q.codes.reshape(x.shape[0], -1, 32)[ok], codes.reshape(x.shape[0], -1, 32)[ok])


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8_e4m3", "mxfp6_e3m2"])
def test_mx_dequantize_matches_torchao(name):
    x = mixed_data(2)
    t = torch.from_numpy(x)
    m = mx_tensor.MXTensor.to_mx(t, ELEMENTS[name], 32, M.FLOOR)
    d_ao = m.dequantize(torch.float32).numpy()
    d = fp4spec.dequantize(quantize(x, name, profile="torchao"))
    assert np.array_equal(d.view(np.uint32), d_ao.view(np.uint32))


def test_mx_nonfinite_blocks():
    """torchao: NaN amax -> 0xFF; an Inf amax is read as 2^128 (FLOOR/CEIL/EVEN 253 for E2M1,
    RCEIL 254) -- the torchao profile reproduces it, the OCP profile poisons the block (0xFF)."""
    x = np.ones((2, 64), np.float32)
    x[0, 3] = np.inf
    x[1, 40] = np.nan
    for rule in MODES:
        s_ao, c_ao = torchao_mx(x, "mxfp4", rule)
        q = quantize(x, "mxfp4", scale_rule=rule, profile="torchao")
        assert np.array_equal(q.scales, s_ao)
        assert s_ao[0, 0] == (254 if rule == "rceil" else 253) and s_ao[1, 1] == 255
        assert np.array_equal(q.codes[0, :32], c_ao[0, :32])  # Inf -> 6, the ones -> 0
        finite = np.isfinite(x[1, 32:])
        if rule != "rceil":  # torchao RCEIL multiplies the whole NaN block by NaN
            assert np.array_equal(q.codes[1, 32:][finite], c_ao[1, 32:][finite])
        assert quantize(x, "mxfp4", scale_rule=rule).scales[0, 0] == 0xFF  # OCP profile


def test_mx_tiny_blocks_diverge_from_ocp():
    """amax below 2^-124: torchao divides by max(2^e, 2^-126), so a scale code 0 block is
    scaled by 2^126 rather than 2^127 (pytorch/ao#750's Uniform(0, 1e-38) mismatch)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [2.0 ** -125, 2.0 ** -126, 1e-38]
    s_ao, c_ao = torchao_mx(x, "mxfp4", "floor")
    assert np.array_equal(quantize(x, "mxfp4", profile="torchao").codes, c_ao)
    assert not np.array_equal(quantize(x, "mxfp4").codes, c_ao)
    assert s_ao[0, 0] == quantize(x, "mxfp4").scales[0, 0] == 0


def test_rceil_float_log2_divergence_is_pinned():
    """torchao's eager RCEIL: ceil(torch.log2(amax / 6)). For d = 2^-20 (1 + 2^-23) torch.log2
    rounds to exactly -20, so torchao picks 2^-20 (code 107); the exact rule (and the hardware
    cvt.rp.satfinite.ue8m0x2.f32) gives 2^-19 (code 108)."""
    d = F32(2.0 ** -20) * F32(1 + 2.0 ** -23)
    amax = None
    for cand in (np.nextafter(F32(d * F32(6)), F32(0)), F32(d * F32(6)), np.nextafter(F32(d * F32(6)), F32(1))):
        if F32(cand / F32(6)) == d:
            amax = cand
            break
    assert amax is not None
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = amax
    s_ao, _ = torchao_mx(x, "mxfp4", "rceil")
    q = quantize(x, "mxfp4", scale_rule="rceil", profile="torchao")
    assert s_ao[0, 0] == 107 and q.scales[0, 0] == 108


# -- NVFP4 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_quantize_matches_profile_torchao(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-12, 12, (64, 1)))).astype(np.float32)
    x[3, :16] = 0.0  # a zero block
    x[4, :16] *= F32(1e-9)  # tiny blocks: torchao's 2^-6 floor
    s_ao, c_ao, pts, d_ao = torchao_nvfp4(x)
    q = quantize(x, "nvfp4", profile="torchao")
    assert np.array_equal(q.scales, s_ao) and np.array_equal(q.codes, c_ao)
    assert q.global_scale.view(np.uint32) == pts.view(np.uint32)
    assert np.array_equal(fp4spec.dequantize(q).view(np.uint32), d_ao.view(np.uint32))
    te = quantize(x, "nvfp4")  # the same tensor under TE's chain: different on some blocks
    assert (te.scales != s_ao).any()


def test_nvfp4_bfloat16_input():
    x = (np.random.default_rng(4).standard_normal((16, 64)) * 30).astype(ml_dtypes.bfloat16)
    t = torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    pts = nvfp4_tensor.per_tensor_amax_to_scale(t.abs().max())
    scale, data = nvfp4_tensor.nvfp4_quantize(t, 16, pts)
    q = quantize(x, "nvfp4", profile="torchao")
    assert np.array_equal(q.scales, scale.view(torch.uint8).numpy())
    assert np.array_equal(q.codes, unpack_uint4(data).numpy().reshape(x.shape))


# Two tensors (found by a search over E4M3 rounding midpoints) where TE's
# amax * (S_enc * (1/6)) and torchao's (amax / 6) / pts land on opposite sides of an E4M3
# midpoint: (global amax bits, block amax bits, TE scale code, torchao scale code).
OP_ORDER_CASES = [(0x4441F310, 0x43839BCA, 0x72, 0x71), (0x437F3DFE, 0x4363E511, 0x7D, 0x7C),
                  (0x43FC65E3, 0x3FE15AF9, 0x3D, 0x3C), (0x44474AF0, 0x42F1FF92, 0x68, 0x69)]


@pytest.mark.parametrize("g_bits,b_bits,te_code,ao_code", OP_ORDER_CASES)
def test_te_and_torchao_disagree_on_operation_order(g_bits, b_bits, te_code, ao_code):
    g = np.array([g_bits], np.uint32).view(np.float32)[0]
    b = np.array([b_bits], np.uint32).view(np.float32)[0]
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = g, b
    s_ao, c_ao, _, _ = torchao_nvfp4(x)
    assert s_ao[0, 1] == ao_code
    q = quantize(x, "nvfp4", profile="torchao")
    assert np.array_equal(q.scales, s_ao) and np.array_equal(q.codes, c_ao)
    assert quantize(x, "nvfp4").scales[0, 1] == te_code  # TE profile


def test_te_and_torchao_disagree_on_tiny_blocks():
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16:18] = 1.0, [2.0 ** -20, -(2.0 ** -21)]
    s_ao, c_ao, _, _ = torchao_nvfp4(x)
    assert s_ao[0, 1] == 0x08 and list(c_ao[0, 16:18]) == [0, 8]  # 2^-6 floor
    assert np.array_equal(quantize(x, "nvfp4", profile="torchao").codes, c_ao)
    te = quantize(x, "nvfp4")
    assert te.scales[0, 1] == 0x00 and list(te.codes[0, 16:18]) == [7, 15]  # zero scale, saturated codes


def test_torchao_zero_tensor_divergence_is_pinned():
    """All-zero tensor: torchao's per-tensor scale is 0, (0/6)/0 = NaN, and the E4M3 cast
    keeps the NaN's sign bit (0xFF, outside UE4M3); its bit-level FP4 cast of the NaN data gives
    unspecified codes. fp4spec's torchao profile gives the UE4M3 NaN 0x7F and code 0."""
    x = np.zeros((2, 32), np.float32)
    s_ao, c_ao, pts, _ = torchao_nvfp4(x)
    assert pts == 0 and ((s_ao & 0x7F) == 0x7F).all()
    q = quantize(x, "nvfp4", profile="torchao")
    assert (q.scales == 0x7F).all() and (q.codes == 0).all()
    assert quantize(x, "nvfp4").global_scale == 1.0 and (quantize(x, "nvfp4").scales == 0).all()  # TE
