"""The RHT on the tensor cores (``arith="mma:sm90-bf16"``, backends/triton/mma.py and kernels/rht_mma.py) equals
the spec's composition ``fp4spec.quantize(rht(x), ...)`` bit for bit: the fused rowwise kernel
(the wide block-diagonal dot, one-tile and persistent grids, the exact-encoder and NaN-spread
fallbacks), the unfused transform (columnwise, SR, float32 output, other elements) and the
RHT + amax pass. Without a GPU the kernels run under TRITON_INTERPRET=1, where every dot is the
accumulator model's (``interpreter_model_dot``); on a Hopper GPU the same tests check the
hardware MMA (benchmarks/bench_gpu_rht_mma.py checks it on larger tensors)."""

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
from dataclasses import replace  # noqa: E402

from fp4spec.backends import triton as trb  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG, capability  # noqa: E402
from fp4spec.backends.triton import mma as rm  # noqa: E402
from fp4spec.backends.triton import quantize as trq  # noqa: E402
from fp4spec.backends.base import resolve_scheme  # noqa: E402
from fp4spec.rht import RHT, TE_SIGNS, hadamard, rht  # noqa: E402

from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # a TritonBackend, skipped where unavailable

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning")]

ARITH = "mma:sm90-bf16"
TE = RHT.te(arith=ARITH)
SEEDED = RHT.from_seed(11, arith=ARITH)


@pytest.fixture(scope="module", autouse=True)
def _claimed(backend):
    if capability.gpu_features().mma_arith != ARITH:
        pytest.skip("the bf16 MMA here is not the sm90-bf16 model (not Hopper, not the interpreter)")


def mma_config(pair=None, per_sm=None, **fields):
    """DEFAULT_CONFIG with mma_* fields replaced: pair sets the operand rows of both block sizes,
    per_sm the programs per SM of both persistent grids."""
    kw = {f"mma_{k}": v for k, v in fields.items() if v is not None}
    if pair is not None:
        kw["mma_pair_rows"] = {16: pair, 32: pair}
    if per_sm is not None:
        kw.update(mma_tma_per_sm=per_sm, mma_per_sm=per_sm)
    return replace(DEFAULT_CONFIG, **kw)


def bf16_values(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def adversarial(seed, rows=32, cols=128) -> np.ndarray:
    """bf16 values (as float32): normal rows, wide exponent spans, subnormals, +-0 rows, huge
    values, the documented span example, Inf / NaN in a few rows (the NaN-spread path)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[1] *= np.exp2(rng.integers(-60, 60, cols)).astype(np.float32)
    x[2, :16] = [2.0 ** 24, 1, -(2.0 ** 24)] + [0] * 13
    x[3] *= np.float32(2.0 ** -128)
    x[4] = -0.0
    x[5, :32] = 0.0
    x[6] *= np.float32(2.0 ** 120)
    x[7, :16] = np.float32(3.3895314e38)
    if seed % 2:
        x[9, 3] = np.inf
        x[11, cols // 2 + 6] = -np.inf
        x[13, cols - 3] = np.nan
        x[15, 0], x[15, 1] = np.inf, -np.inf
    return bf16_values(x)


def reference(x, r, scheme, axis=-1, **kw):
    y = rht(x, 16, signs=r.signs, axis=axis, arith=r.arith, out_dtype=r.out_dtype)
    if axis == 0:
        y = np.ascontiguousarray(y.T)
    return fp4spec.quantize(np.asarray(y, np.float32), scheme, backend="numpy", **kw)


def codes(out, shape):
    pk = out["packed"].cpu().numpy()
    return np.stack((pk & 15, pk >> 4), -1).reshape(shape)


def assert_equal(out, ref, shape):
    m = ref.moved()
    np.testing.assert_array_equal(codes(out, shape), np.asarray(m["codes"]).reshape(shape))
    np.testing.assert_array_equal(out["scales"].cpu().numpy().reshape(-1), np.asarray(m["scales"]).reshape(-1))
    if ref.global_scale is not None and out["global_scale"] is not None:
        assert np.float32(out["global_scale"].cpu()).view(np.uint32) == np.float32(ref.global_scale).view(np.uint32)


def dev(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).to(trb.TritonBackend().device)


SCHEMES = ["nvfp4", "mxfp4", "mxfp4:scale_rule=rceil"]


@pytest.mark.parametrize("spec", SCHEMES)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("r", [TE, SEEDED], ids=["te", "seeded"])
def test_fused_rowwise(spec, seed, r):
    x = adversarial(seed)
    sch = resolve_scheme(spec)
    out = trb.quantize_packed(dev(x), sch, rht=r)
    assert_equal(out, reference(x, r, sch), x.shape)


@pytest.mark.parametrize("mode", ["grid", "persist", "tma"])
@pytest.mark.parametrize("spec,shape", [("nvfp4", (5, 48)), ("mxfp4", (3, 96)), ("nvfp4", (64, 64)),
                                        ("mxfp4", (32, 128))])
def test_fused_grids_and_ragged(spec, shape, mode):
    """The three loops (one tile per program, persistent with pointer loads, persistent with
    TMA loads), tensors that are not a whole number of tiles (masked loads and stores; TMA
    takes whole tiles only and leaves those to the pointer loads)."""
    x = bf16_values(np.random.default_rng(3).standard_normal(shape) * 3)
    sch = resolve_scheme(spec)
    xt = dev(x)
    packed = torch.empty((shape[0], shape[1] // 2), dtype=torch.uint8, device=xt.device)
    scales = torch.empty((shape[0], shape[1] // sch.block_size), dtype=torch.uint8, device=xt.device)
    ref = reference(x, TE, sch)
    if sch.structure == "two_level":
        ts = trq.two_level_consts(sch, xt.device, amax=rm.rht_amax(xt, TE))
        assert np.float32(ts[1].cpu()).view(np.uint32) == np.float32(ref.global_scale).view(np.uint32)
    else:
        ts = trq.mx_consts(sch, xt.device)
    rm.mma_launcher(xt, packed, scales, ts, sch, TE, mma_config(persist=mode == "persist", tma=mode == "tma"), R=16)()
    assert_equal({"packed": packed, "scales": scales, "global_scale": None}, ref, shape)


@pytest.mark.parametrize("defer,block_stores,pair_t", [(True, True, False), (True, False, False), (False, False, False),
                                                      (True, True, True), (False, False, True)],
                         ids=["defer-block-stores", "defer-row-stores", "per-tile", "defer-tmajor-box",
                              "per-tile-tmajor-box"])
@pytest.mark.parametrize("pair", [True, False], ids=["pair", "plain"])
@pytest.mark.parametrize("spec", ["nvfp4", "mxfp4"])
def test_tma_and_pointer_loads_agree(spec, pair, defer, block_stores, pair_t):
    """The TMA loop (8 tiles of 16 rows over tma_view, two per program) and the pointer loads
    give the same bytes on adversarial data, the NaN-spread and exact-encoder branches
    included, for both operand row orders (paired rows: the 5-D view; plain rows: 2-D) and
    both placements of the rare-case check (defer: once per program after the fast loop,
    then the program's tiles again by the checked path; per-tile: a branch per tile) and of
    the deferred loop's stores (per block, or 16-byte rows of codes); paired rows also by the
    box with its column group outermost."""
    x = adversarial(1, rows=64)
    sch = resolve_scheme(spec)
    xt = dev(x)
    ts = trq.two_level_consts(sch, xt.device, amax=rm.rht_amax(xt, TE)) if sch.structure == "two_level" else \
        trq.mx_consts(sch, xt.device)
    outs = []
    for tma in (False, True):
        packed = torch.zeros((64, 64), dtype=torch.uint8, device=xt.device)
        scales = torch.zeros((64, 128 // sch.block_size), dtype=torch.uint8, device=xt.device)
        cfg = mma_config(tma=tma, pair=pair, per_sm=1, defer=defer, block_stores=block_stores, pair_tmajor=pair_t)
        rm.mma_launcher(xt, packed, scales, ts, sch, TE, cfg, R=16)()
        outs.append((packed, scales))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert_equal({"packed": outs[1][0], "scales": outs[1][1], "global_scale": None}, reference(x, TE, sch), x.shape)


MX_RULES = ["mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even", "mxfp4:scale_rule=ceil",
            "mxfp4:profile=torchao"]


@pytest.mark.parametrize("pair", [True, False], ids=["pair", "plain"])
@pytest.mark.parametrize("spec", MX_RULES)
def test_mx_bf16x2_encoder(spec, pair):
    """MX 1 x 32 blocks by the deferred TMA loop: the encoder on bf16x2 words (GPU only) and
    the float32 one give the spec's bytes for every MX scale rule and profile, on adversarial
    data (subnormal and huge blocks: multipliers up to 2^127 and down to 2^-125; Inf and NaN:
    NaN-scale blocks redone by the exact encoder), for both operand row orders. In the
    interpreter only the float32 encoder runs."""
    x = adversarial(1, rows=64)
    x[17] *= np.float32(2.0 ** -133)  # bf16 subnormals after the RHT, multiplier 2^127
    x = bf16_values(x)
    sch = resolve_scheme(spec)
    xt = dev(x)
    ts = trq.mx_consts(sch, xt.device)
    ref = reference(x, TE, sch)
    for bf16x2 in (False, True) if capability.gpu_features(xt.device).hw_bf16x2 else (None,):
        packed = torch.zeros((64, 64), dtype=torch.uint8, device=xt.device)
        scales = torch.zeros((64, 4), dtype=torch.uint8, device=xt.device)
        rm.mma_launcher(xt, packed, scales, ts, sch, TE, mma_config(tma=True, pair=pair, per_sm=1, bf16x2=bf16x2),
                        R=16)()
        assert_equal({"packed": packed, "scales": scales, "global_scale": None}, ref, x.shape)


def test_tma_view_is_the_operand_permutation():
    """Box g of tma_view, reshaped to [R, 64], is _load_a's operand: paired rows, row
    m = 16 g + 8 h + l, column 16 t + k holds element ((8 g + l) * 4 + t) * 32 + 16 h + k;
    plain rows, row m holds the 64 elements from 64 m."""
    R = 32
    x16 = torch.arange(2 * R * 64, dtype=torch.int16)
    d = rm.tma_view(x16, R)
    v = x16.as_strided(d.shape, d.strides)[R // 16:2 * (R // 16)]  # the second box
    got = v.reshape(R, 64).numpy()
    m, k = np.arange(R)[:, None], np.arange(64)[None, :]
    g, h, l, t, kk = m // 16, (m // 8) % 2, m % 8, k // 16, k % 16
    want = R * 64 + ((8 * g + l) * 4 + t) * 32 + 16 * h + kk
    np.testing.assert_array_equal(got, want)
    d = rm.tma_view(x16, R, tmajor=True)  # paired rows, column group outermost: [t, g, h, l, k]
    v = x16.as_strided(d.shape, d.strides)[:, R // 16:2 * (R // 16)]
    np.testing.assert_array_equal(v.permute(1, 2, 3, 0, 4).reshape(R, 64).numpy(), want)
    d = rm.tma_view(x16, R, pair=False)  # plain rows: box g is elements g R 64 .. (g + 1) R 64 in order
    v = x16.as_strided(d.shape, d.strides)[R:2 * R]
    np.testing.assert_array_equal(v.numpy(), R * 64 + m * 64 + k)


def test_fast_encoder_alone_on_benign_data():
    """No fallback taken or needed: the fast path by itself."""
    x = bf16_values(np.random.default_rng(5).standard_normal((16, 128)))
    sch = resolve_scheme("nvfp4")
    xt = dev(x)
    packed = torch.empty((16, 64), dtype=torch.uint8, device=xt.device)
    scales = torch.empty((16, 8), dtype=torch.uint8, device=xt.device)
    ts = trq.two_level_consts(sch, xt.device, amax=rm.rht_amax(xt, TE))
    rm.mma_launcher(xt, packed, scales, ts, sch, TE, replace(DEFAULT_CONFIG, exact_fallback=False))()
    assert_equal({"packed": packed, "scales": scales, "global_scale": None}, reference(x, TE, sch), x.shape)


@pytest.mark.parametrize("spec", ["nvfp4", "mxfp4", "ufp4", "nvint4"])
def test_unfused_rowwise_and_columnwise(spec):
    x = adversarial(1, rows=32, cols=64)
    sch = resolve_scheme(spec)
    out = trb.quantize_packed(dev(x), sch, rht=TE, variant="unfused")
    assert_equal(out, reference(x, TE, sch), x.shape)
    out = trb.quantize_packed(dev(x), sch, rht=TE, axis=0)
    assert_equal(out, reference(x, TE, sch, axis=0), (x.shape[1], x.shape[0]))


def test_sr_float32_output_and_cublas_layout():
    x = adversarial(0, rows=16, cols=64)
    rb = np.random.default_rng(9).integers(0, 256, x.shape).astype(np.uint8)
    out = trb.quantize_packed(dev(x), "nvfp4", rht=TE, rounding="sr",
                              rbits=torch.from_numpy(rb.astype(np.int32)).to(trb.TritonBackend().device))
    assert_equal(out, reference(x, TE, "nvfp4", rounding="sr", rbits=rb), x.shape)
    r32 = RHT.te(arith=ARITH, out_dtype="float32")
    out = trb.quantize_packed(dev(x), "mxfp4", rht=r32)
    assert_equal(out, reference(x, r32, "mxfp4"), x.shape)
    out = trb.quantize_packed(dev(x), "nvfp4", rht=TE, scale_layout="cublas")
    ref = reference(x, TE, "nvfp4")
    np.testing.assert_array_equal(codes(out, x.shape), np.asarray(ref.moved()["codes"]).reshape(x.shape))
    np.testing.assert_array_equal(out["scales"].cpu().numpy(),
                                  fp4spec.to_blocked(np.asarray(ref.moved()["scales"]).reshape(16, -1)).reshape(-1))


@pytest.mark.parametrize("seed", range(2))
def test_rht_amax(seed):
    x = adversarial(seed)
    a = float(rm.rht_amax(dev(x), TE).cpu())
    y = rht(x, 16, signs=TE_SIGNS, arith=ARITH, out_dtype="bfloat16").astype(np.float32)
    if np.isnan(y).any():
        assert np.isnan(a)
    else:
        assert np.float32(a) == np.max(np.abs(y))


def test_backend_quantize_and_auto(backend):
    """The backend interface: QuantizedTensor equal to numpy's, the transform recorded."""
    x = adversarial(0)
    q = backend.quantize(x, "nvfp4", rht=TE)
    ref = fp4spec.quantize(x, "nvfp4", rht=TE, backend="numpy")
    np.testing.assert_array_equal(np.asarray(q.codes), np.asarray(ref.codes))
    np.testing.assert_array_equal(np.asarray(q.scales), np.asarray(ref.scales))
    assert q.rht == TE


def test_refusals(backend):
    caps = backend.capabilities()
    assert "16/" + ARITH in caps.rht
    assert caps.supports_rht(TE)
    r64 = RHT.from_seed(1, size=64, arith=ARITH)
    assert not caps.supports_rht(r64)
    with pytest.raises(NotImplementedError):
        trb.quantize_packed(torch.ones((4, 64), dtype=torch.bfloat16), "nvfp4", rht=r64)
    with pytest.raises(ValueError, match="bfloat16"):  # step M1: the operand is bf16
        trb.quantize_packed(torch.full((4, 32), 1.00390625), "nvfp4", rht=TE)
    with pytest.raises(ValueError, match="variant"):
        trb.quantize_packed(torch.ones((4, 32), dtype=torch.bfloat16), "nvfp4", rht=TE, variant="cols")
    with pytest.raises(NotImplementedError):
        trb.quantize_packed(torch.ones((4, 32), dtype=torch.bfloat16), "nvfp4", rht=TE, variant="rows",
                            rounding="sr", seed=1)
    # float32 holding bf16 values is accepted (quantize converts inputs to float32 first)
    out = trb.quantize_packed(torch.ones((4, 32), device=backend.device), "nvfp4", rht=TE)
    assert out["packed"].shape == (4, 16)


def test_wide_matrix_places_each_rht_row_in_one_thread():
    """W[16 t + k, 8 i + 2 t + e] = T[k, 2 i + e]: x_rows(4 x 16) . W = the four rows' RHTs,
    row t's output 2 i + e at column 8 i + 2 t + e (exact small integers: any order sums them)."""
    t16 = (np.asarray(TE_SIGNS)[:, None] * hadamard(16)).astype(np.float64) / 4
    wb = rm.wide_matrix_bits(TE_SIGNS).astype(np.uint32) << 16
    w = wb.view(np.float32).astype(np.float64)
    x = np.random.default_rng(1).integers(-8, 9, (3, 64)).astype(np.float64)
    y = x @ w
    for t in range(4):
        want = x[:, 16 * t:16 * t + 16] @ t16
        for i in range(8):
            for e in range(2):
                np.testing.assert_array_equal(y[:, 8 * i + 2 * t + e], want[:, 2 * i + e])
    tb_ = rm.t_matrix_bits(TE_SIGNS).astype(np.uint32) << 16
    np.testing.assert_array_equal(tb_.view(np.float32), t16.astype(np.float32))
