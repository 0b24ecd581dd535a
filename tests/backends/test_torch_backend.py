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
        backend.quantize(np.ones((16, 32), np.float32), fp4spec.get_scheme("mxfp4"), rounding="rtz")
