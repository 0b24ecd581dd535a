"""The torch backend equals the numpy emulator bit for bit (codes, scale codes, tensor-scale bits,
dequantized bits) on adversarial inputs: ties after scaling, binade edges, subnormals, zero
blocks, NaN/Inf blocks, every bf16 pattern; RNE and SR with given random bits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4spec  # noqa: E402
from fp4spec.backends.torch_backend import TorchBackend, quantize_tensors  # noqa: E402

SCHEMES = [("mxfp4", {}), ("mxfp4", {"scale_rule": "rceil"}), ("mxfp4", {"scale_rule": "ceil"}),
           ("mxfp4", {"scale_rule": "even"}), ("nvfp4", {}), ("nvfp4_2d", {}), ("ufp4", {}), ("nvint4", {})]
IDS = [n + "".join(f"-{v}" for v in o.values()) for n, o in SCHEMES]


@pytest.fixture(scope="module")
def backend():
    return TorchBackend(device="cpu")


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def assert_same(q, ref):
    assert q.scheme == ref.scheme and q.shape == ref.shape and q.axis == ref.axis
    np.testing.assert_array_equal(q.scales, ref.scales)
    np.testing.assert_array_equal(q.codes, ref.codes)
    if ref.global_scale is None:
        assert q.global_scale is None
    else:
        assert _bits(q.global_scale) == _bits(ref.global_scale)
    assert q.equals(ref)


def adversarial(seed: int, rows: int = 32, cols: int = 64) -> np.ndarray:
    """Blocks of every kind, rows x cols float32 (cols a multiple of 32, rows of 16)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    # per-block magnitudes from tiny (subnormal) to huge
    e = rng.integers(-140, 120, size=(rows, cols // 16))
    x *= np.repeat(np.ldexp(np.float32(1), e).astype(np.float32), 16, axis=1)
    # ties after scaling: grid midpoints (E2M1, E1M2, INT4) times a power of two, block max 6 or 7
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.5, 3.0, 6.0, 7.0, 6.5, 5.5, 4.5, 3.25], np.float32)
    for r in range(0, rows, 4):
        sign = rng.choice([-1, 1], size=16).astype(np.float32)
        x[r, :16] = mids * sign * np.float32(2.0 ** int(rng.integers(-10, 10)))
    # binade edges
    edge = np.array([2.0 ** k for k in range(-8, 8)], np.float32)
    x[1, 16:32] = edge
    x[2, 16:32] = np.nextafter(edge, np.float32(0))
    x[3, 16:32] = np.nextafter(edge, np.float32(np.inf)) * -1
    x[5, 32:48] = 0.0  # zero block
    x[6, 32:48] = -0.0
    x[6, 35] = 0.0
    x[7, 32:48] = np.float32(1e-45) * np.arange(16)  # subnormals
    x[8, 48:64] = np.float32(448.0 * 6)
    x[9, 48:64] = rng.standard_normal(16).astype(np.float32) * np.float32(3e38)
    return x


def with_nonfinite(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[10, 3] = np.nan
    x[11, 40] = np.inf
    x[12, 20] = -np.inf
    x[12, 21] = np.nan
    return x


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
@pytest.mark.parametrize("seed", range(4))
def test_quantize_rne_adversarial(backend, name, over, seed):
    x = adversarial(seed)
    assert_same(backend.quantize(x, fp4spec.get_scheme(name, **over)), fp4spec.quantize(x, name, **over))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_quantize_rne_nonfinite(backend, name, over):
    x = with_nonfinite(adversarial(7))
    assert_same(backend.quantize(x, fp4spec.get_scheme(name, **over)), fp4spec.quantize(x, name, **over))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_quantize_special_tensors(backend, name, over):
    sch = fp4spec.get_scheme(name, **over)
    for x in (np.zeros((16, 32), np.float32), -np.zeros((16, 32), np.float32),
              np.full((16, 32), np.inf, np.float32), np.full((16, 32), np.nan, np.float32),
              np.full((16, 32), np.float32(1e-45))):
        assert_same(backend.quantize(x, sch), fp4spec.quantize(x, sch))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_every_bf16_pattern(backend, name, over):
    pats = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    x = pats.reshape(128, 512)
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch), fp4spec.quantize(x, sch))
    finite = np.where(np.isfinite(x), x, np.float32(0)).reshape(128, 512)
    assert_same(backend.quantize(finite, sch), fp4spec.quantize(finite, sch))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
@pytest.mark.parametrize("sr_bits", [1, 8, 16])
def test_quantize_sr_given_rbits(backend, name, over, sr_bits):
    x = with_nonfinite(adversarial(3))
    rb = np.random.default_rng(sr_bits).integers(0, 1 << sr_bits, size=x.shape, dtype=np.uint64).astype(np.uint32)
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch, rounding="sr", rbits=rb, sr_bits=sr_bits),
                fp4spec.quantize(x, sch, rounding="sr", rbits=rb, sr_bits=sr_bits))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_dequantize_bits(backend, name, over):
    x = with_nonfinite(adversarial(5))
    ref = fp4spec.quantize(x, name, **over)
    got = backend.dequantize(ref)
    want = fp4spec.dequantize(ref)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4_sym"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode(backend, fmt, dtype):
    rng = np.random.default_rng(1)
    grid = np.arange(-160, 161, dtype=np.float64) / 16
    x = np.concatenate([grid, rng.standard_normal(1000) * 4, [np.inf, -np.inf, -0.0, 1e30]]).astype(dtype)
    np.testing.assert_array_equal(backend.encode(x, fmt), fp4spec.encode(x, fmt))
    rb = rng.integers(0, 256, size=x.shape).astype(np.uint32)
    np.testing.assert_array_equal(backend.encode(x, fmt, "sr", rbits=rb), fp4spec.encode(x, fmt, "sr", rbits=rb))
    with pytest.raises(ValueError):
        backend.encode(np.array([1.0, np.nan], dtype), fmt)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_torch_in_torch_out(dtype):
    x = torch.from_numpy(adversarial(2)).to(dtype)
    out = quantize_tensors(x, "nvfp4")
    assert out["codes"].dtype == torch.uint8 and out["codes"].device == x.device
    ref = fp4spec.quantize(x.float().numpy(), "nvfp4")
    np.testing.assert_array_equal(out["codes"].numpy(), ref.codes)
    np.testing.assert_array_equal(out["scales"].numpy(), ref.scales)


def test_axis0(backend):
    x = adversarial(4)
    q = backend.quantize(x, fp4spec.get_scheme("nvfp4"), axis=0)
    assert_same(q, fp4spec.quantize(x, "nvfp4", axis=0))


def test_unsupported_raises(backend):
    with pytest.raises(NotImplementedError):
        backend.quantize(np.ones((16, 32), np.float32), fp4spec.get_scheme("nvfp4", profile="torchao"))
    with pytest.raises(NotImplementedError):
        backend.quantize(np.ones((16, 32), np.float32), fp4spec.get_scheme("nvfp4", scale_rule="4over6"))
    with pytest.raises(NotImplementedError):
        backend.quantize(np.ones((16, 64), np.float32), fp4spec.get_scheme("hif4"), rounding="rtz")


# -- the RHT (fwht-fp32) in torch ops --------------------------------------------------------------------

def _rht_inputs(seed: int, size: int) -> np.ndarray:
    """Student-t rows, wide-span rows (the fp32 butterfly drops bits) and special values, 8 x 2*size."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, (8, 2 * size)).astype(np.float32)
    x[1] *= np.exp2(rng.integers(-30, 30, 2 * size)).astype(np.float32)
    x[2, :3] = [2.0 ** 24, 1.0, -(2.0 ** 24)]
    x[3] = 0.0
    x[4] = -0.0
    x[5, :4] = [np.inf, -np.inf, np.nan, 3e38]
    x[6] *= np.float32(1e-42)  # subnormal results
    x[7] = np.float32(3e38)  # overflow in the butterfly
    return x


@pytest.mark.parametrize("size", [16, 32, 64, 128])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_apply_rht_equals_numpy(size, out):
    from fp4spec.backends.torch_backend import apply_rht
    from fp4spec.rht import RHT

    x = _rht_inputs(size, size)
    r = RHT.from_seed(size, size, out_dtype=out)
    with np.errstate(all="ignore"):
        want = r.apply(x).astype(np.float32)
        want0 = r.apply(np.ascontiguousarray(x.T), axis=0).astype(np.float32)
    got = apply_rht(torch.from_numpy(x), r).float().numpy()
    got0 = apply_rht(torch.from_numpy(np.ascontiguousarray(x.T)), r, 0).float().numpy()
    for g, w in ((got, want), (got0, want0)):
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal(_bits(g)[~nan], _bits(w)[~nan])


def test_apply_rht_input_dtypes():
    from fp4spec.backends.torch_backend import apply_rht
    from fp4spec.rht import RHT

    x = np.random.default_rng(0).standard_normal((4, 32))
    for t in (torch.from_numpy(x), torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(x).to(torch.float16)):
        got = apply_rht(t, RHT.te(out_dtype="float32")).numpy()
        ref = t.float().numpy() if t.dtype != torch.float64 else x
        np.testing.assert_array_equal(_bits(got), _bits(RHT.te(out_dtype="float32").apply(ref)))
    assert apply_rht(torch.from_numpy(x), RHT.te()).dtype == torch.bfloat16
    assert apply_rht(torch.from_numpy(x), RHT.te(out_dtype="float64")).dtype == torch.float64
    with pytest.raises(NotImplementedError, match="arith 'float64'"):
        apply_rht(torch.from_numpy(x), RHT.te(arith="float64"))
    with pytest.raises(ValueError, match="not a multiple of size 16"):
        apply_rht(torch.zeros(4, 24), RHT.te())


RHT_SCHEMES = [("nvfp4", {}), ("mxfp4", {}), ("mxfp4", {"scale_rule": "rceil"}), ("nvfp4_2d", {}), ("ufp4", {})]


@pytest.mark.parametrize("name,over", RHT_SCHEMES, ids=[n + "".join(f"-{v}" for v in o.values())
                                                          for n, o in RHT_SCHEMES])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_quantize_with_rht_equals_numpy(backend, name, over, rounding):
    from fp4spec.rht import RHT

    x = with_nonfinite(adversarial(7))
    x[13, :3] = [2.0 ** 24, 1.0, -(2.0 ** 24)]
    sch = fp4spec.get_scheme(name, **over)
    rb = fp4spec.draw_rbits(x.shape, 8, 3) if rounding == "sr" else None
    for r in (RHT.te(), RHT.from_seed(2, 32), RHT.from_seed(4, 64, out_dtype="float32")):
        q = backend.quantize(x, sch, rounding=rounding, rbits=rb, rht=r)
        assert q.rht == r
        assert_same(q, fp4spec.quantize(x, sch, rounding=rounding, rbits=rb, rht=r))
    q0 = backend.quantize(x, sch, rounding=rounding, rbits=rb, rht="te", axis=0) if not sch.is_2d else None
    if q0 is not None:
        assert_same(q0, fp4spec.quantize(x, sch, rounding=rounding, rbits=rb, rht="te", axis=0))


def test_rht_capabilities(backend):
    from fp4spec.rht import RHT

    caps = backend.capabilities()
    assert caps.rht == ("16/fwht-fp32", "32/fwht-fp32", "64/fwht-fp32", "128/fwht-fp32")
    assert caps.supports_rht("te") and not caps.supports_rht(RHT.te(arith="float64"))


@pytest.mark.parametrize("name,kw", [("mxfp8_e4m3", {}), ("hif4", {}), ("mxfp4", {"rounding": "sr"}),
                                     ("mxfp6_e2m3", {"axis": 0}), ("mxfp4", {"rht": "te"})],
                         ids=["mxfp8", "hif4", "mxfp4-sr", "mxfp6-axis0", "mxfp4-rht"])
def test_row_chunks_give_the_same_codes(monkeypatch, name, kw):
    """Row-local schemes run a chunk of rows at a time above CHUNK_ELEMENTS (bounded
    temporaries): every field equals the one-shot call's, and the emulator's."""
    import fp4spec.backends.torch_backend as tbm

    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 10, 64, generator=g) * 5
    if kw.get("axis") == 0:
        x = torch.randn(64, 40, generator=g) * 5
    rb = torch.randint(0, 256, x.shape, generator=g) if kw.get("rounding") == "sr" else None
    whole = fp4spec.quantize(x, name, rbits=rb, backend="torch", **kw)
    monkeypatch.setattr(tbm, "CHUNK_ELEMENTS", 3 * 64)  # a few rows per chunk, and a ragged last one
    chunked = fp4spec.quantize(x, name, rbits=rb, backend="torch", **kw)
    assert chunked.equals(whole)
    assert chunked.equals(fp4spec.quantize(x.numpy(), name, rbits=None if rb is None else rb.numpy(), **kw))
