"""The triton backend equals the numpy emulator bit for bit. On a machine without a GPU the
kernels run under TRITON_INTERPRET=1 (small shapes); the module skips if triton is missing."""

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
from fp4spec.backends.triton import TritonBackend, dequantize_packed, philox_rbits, quantize_packed  # noqa: E402
from fp4spec.layouts import to_blocked  # noqa: E402
from fp4spec.packing import pack  # noqa: E402
from fp4spec.philox import philox4x32  # noqa: E402

from .test_torch_backend import IDS, SCHEMES, adversarial, assert_same, with_nonfinite  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def backend():
    b = TritonBackend()
    if not b.is_available():
        pytest.skip(b.is_available().reason)
    return b


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
@pytest.mark.parametrize("seed", range(2))
def test_quantize_rne(backend, name, over, seed):
    x = with_nonfinite(adversarial(seed)) if seed else adversarial(seed)
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch), fp4spec.quantize(x, sch))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_special_tensors(backend, name, over):
    sch = fp4spec.get_scheme(name, **over)
    for x in (np.zeros((16, 32), np.float32), -np.zeros((16, 32), np.float32),
              np.full((16, 32), np.inf, np.float32), np.full((16, 32), np.nan, np.float32),
              np.full((16, 32), np.float32(1e-45))):
        assert_same(backend.quantize(x, sch), fp4spec.quantize(x, sch))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_every_bf16_pattern(backend, name, over):
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32).reshape(128, 512)
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch), fp4spec.quantize(x, sch))
    finite = np.where(np.isfinite(x), x, np.float32(0))
    assert_same(backend.quantize(finite, sch), fp4spec.quantize(finite, sch))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
@pytest.mark.parametrize("sr_bits", [1, 8, 24])
def test_sr_given_rbits(backend, name, over, sr_bits):
    x = with_nonfinite(adversarial(3))
    rb = np.random.default_rng(sr_bits).integers(0, 1 << sr_bits, size=x.shape, dtype=np.uint64).astype(np.uint32)
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch, rounding="sr", rbits=rb, sr_bits=sr_bits),
                fp4spec.quantize(x, sch, rounding="sr", rbits=rb, sr_bits=sr_bits))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_columnwise(backend, name, over):
    x = np.ascontiguousarray(with_nonfinite(adversarial(6)).T)  # (64, 32): blocks run down the columns
    sch = fp4spec.get_scheme(name, **over)
    assert_same(backend.quantize(x, sch, axis=0), fp4spec.quantize(x, sch, axis=0))
    rb = np.random.default_rng(0).integers(0, 256, size=x.shape).astype(np.uint32)
    assert_same(backend.quantize(x, sch, axis=0, rounding="sr", rbits=rb),
                fp4spec.quantize(x, sch, axis=0, rounding="sr", rbits=rb))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_half_inputs_packed(name, dtype, backend):
    xt = torch.from_numpy(adversarial(2)).to(dtype).to(backend.device)
    out = quantize_packed(xt, name)
    ref = fp4spec.quantize(xt.float().cpu().numpy(), name)
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref.pack())  # low nibble first
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales)
    deq = dequantize_packed(out["packed"], out["scales"], out["global_scale"], name)
    np.testing.assert_array_equal(deq.cpu().numpy().view(np.uint32),
                                  np.asarray(fp4spec.dequantize(ref), np.float32).view(np.uint32))


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_dequantize_bits(backend, name, over):
    ref = fp4spec.quantize(with_nonfinite(adversarial(5)), name, **over)
    got = backend.dequantize(ref)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(fp4spec.dequantize(ref), np.float32).view(np.uint32))


def test_unsupported(backend):
    with pytest.raises(NotImplementedError):
        backend.quantize(np.ones((16, 32), np.float32), fp4spec.get_scheme("nvfp4", profile="torchao"))
    with pytest.raises(NotImplementedError):
        backend.quantize(np.ones((16, 32), np.float32), fp4spec.get_scheme("nvfp4"), rounding="rtz")


# -- the variants: rowwise blocks-as-rows, columnwise blocks and tiles, Philox, cuBLAS layout ------

FAST = [s for s in SCHEMES if not (s[0] == "nvfp4_2d")]
FAST_IDS = [n + "".join(f"-{v}" for v in o.values()) for n, o in FAST]


def _dev(x, dtype, backend):
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(backend.device)


def _same_rows(out, ref):
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref.pack())
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales)
    if ref.global_scale is not None:
        assert np.float32(out["global_scale"].cpu()).view(np.uint32) == np.float32(ref.global_scale).view(np.uint32)


def _same_cols(out, ref):
    m = ref.moved()
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), pack(m["codes"], order="lo_first", axis=-1))
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), m["scales"])


@pytest.mark.parametrize("name,over", FAST, ids=FAST_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fast_rows(backend, name, over, dtype):
    sch = fp4spec.get_scheme(name, **over)
    xt = _dev(with_nonfinite(adversarial(7)), dtype, backend)
    ref = fp4spec.quantize(xt.float().cpu().numpy(), sch)
    variants = ["rows", "rows_split"] if (dtype == torch.bfloat16 and sch.element.name == "e2m1") else ["rows"]
    for v in variants:
        for br in (16, 256):  # several programs, and one program with masked blocks
            _same_rows(quantize_packed(xt, sch, variant=v, BM=br), ref)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "nvint4"])
def test_fast_rows_every_bf16_pattern(backend, name):
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32).reshape(128, 512)
    xt = _dev(x, torch.bfloat16, backend)
    ref = fp4spec.quantize(x, name)
    for v in (["rows", "rows_split"] if name != "nvint4" else ["rows"]):
        _same_rows(quantize_packed(xt, name, variant=v), ref)


@pytest.mark.parametrize("name,over", FAST, ids=FAST_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fast_cols(backend, name, over, dtype):
    sch = fp4spec.get_scheme(name, **over)
    x = np.ascontiguousarray(with_nonfinite(adversarial(8, 96, 64)).T)  # (64, 96): 3 bands of 32 rows
    x = np.concatenate([x, x[:, :32]], axis=1)  # 128 columns, 96 rows... transposed below
    xt = _dev(x.T, dtype, backend)  # (128, 96): 8 (k=16) or 4 (k=32) bands
    ref = fp4spec.quantize(xt.float().cpu().numpy(), sch, axis=0)
    for bc, bands in ((32, 3), (64, 8)):  # cols_tile: a masked last band group; masked columns
        old = quantize_packed(xt, sch, axis=0, BN=bc, BM=bands, variant="cols_tile")
        _same_cols(old, ref)
    for bc, nb in ((64, None), (128, 1)):  # cols: bands of 4 blocks (int32 scale words), of 1 block
        new = quantize_packed(xt, sch, axis=0, BN=bc, BM=nb, variant="cols")
        _same_cols(new, ref)
        assert torch.equal(new["packed"], old["packed"]) and torch.equal(new["scales"], old["scales"])
    rb = np.random.default_rng(1).integers(0, 1 << 8, size=xt.shape).astype(np.uint32)
    ref = fp4spec.quantize(xt.float().cpu().numpy(), sch, axis=0, rounding="sr", rbits=rb)
    _same_cols(quantize_packed(xt, sch, axis=0, rounding="sr", rbits=rb, BN=32, BM=3, variant="cols_tile"), ref)
    _same_cols(quantize_packed(xt, sch, axis=0, rounding="sr", rbits=rb, variant="cols"), ref)


def test_philox_known_answer():
    # Random123 known-answer vector for Philox4x32-10: counter 0, key 0
    words = [int(w[0]) for w in philox4x32(np.zeros(1, np.uint64), 0)]
    assert words == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_philox_rbits_equal_device_draws(backend):
    import triton
    import triton.language as tl

    @triton.jit
    def draw(out_ptr, seed, N: tl.constexpr):
        g = tl.arange(0, N).to(tl.int64) + (1 << 33)  # a counter above 2^32: both counter words
        a, b, c, d = tl.randint4x(seed, g)
        tl.store(out_ptr + tl.arange(0, N) * 4, a)
        tl.store(out_ptr + tl.arange(0, N) * 4 + 1, b)
        tl.store(out_ptr + tl.arange(0, N) * 4 + 2, c)
        tl.store(out_ptr + tl.arange(0, N) * 4 + 3, d)

    seed = 0x1234567890AB
    out = torch.empty(4 * 64, dtype=torch.int32, device=backend.device)
    draw[(1,)](out, seed, N=64)
    want = np.stack(philox4x32(np.arange(64, dtype=np.uint64) + np.uint64(1 << 33), seed), axis=-1).reshape(-1)
    np.testing.assert_array_equal(out.cpu().numpy().view(np.uint32), want.astype(np.uint32))


@pytest.mark.parametrize("name,over", FAST, ids=FAST_IDS)
@pytest.mark.parametrize("sr_bits", [1, 24])
def test_sr_philox(backend, name, over, sr_bits):
    sch = fp4spec.get_scheme(name, **over)
    x = with_nonfinite(adversarial(9))
    xt = _dev(x, torch.bfloat16, backend)
    xf = xt.float().cpu().numpy()
    rb = philox_rbits(2026 + sr_bits, x.shape, sr_bits)
    assert rb.dtype == np.uint32 and rb.max() < (1 << sr_bits)
    ref = fp4spec.quantize(xf, sch, rounding="sr", rbits=rb, sr_bits=sr_bits)
    _same_rows(quantize_packed(xt, sch, rounding="sr", seed=2026 + sr_bits, sr_bits=sr_bits, BM=64), ref)
    refc = fp4spec.quantize(xf, sch, axis=0, rounding="sr", rbits=rb, sr_bits=sr_bits)
    _same_cols(quantize_packed(xt, sch, axis=0, rounding="sr", seed=2026 + sr_bits, sr_bits=sr_bits, BN=64), refc)


def test_sr_needs_bits_or_seed(backend):
    x = torch.ones((16, 32), dtype=torch.float32, device=backend.device)
    with pytest.raises(ValueError):
        quantize_packed(x, "nvfp4", rounding="sr")
    with pytest.raises(ValueError):
        quantize_packed(x, "nvfp4", seed=1)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4"])
@pytest.mark.parametrize("shape", [(256, 128), (224, 96), (64, 160)])  # whole tiles; row and column padding
def test_cublas_scale_layout(backend, name, shape):
    rng = np.random.default_rng(shape[0])
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, size=(shape[0], 1))).astype(np.float32)
    xt = _dev(x, torch.bfloat16, backend)
    ref = fp4spec.quantize(xt.float().cpu().numpy(), name)
    out = quantize_packed(xt, name, scale_layout="cublas")
    np.testing.assert_array_equal(out["scales"].cpu().numpy(), to_blocked(ref.scales))  # zero padding included
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), ref.pack())
    refc = fp4spec.quantize(xt.float().cpu().numpy(), name, axis=0)
    outc = quantize_packed(xt, name, axis=0, scale_layout="cublas")
    np.testing.assert_array_equal(outc["scales"].cpu().numpy(), to_blocked(refc.moved()["scales"]))
    with pytest.raises(ValueError):
        quantize_packed(xt, name, scale_layout="swizzled")


@pytest.mark.parametrize("name,over", SCHEMES, ids=IDS)
def test_fast_dequantize_packed(backend, name, over):
    sch = fp4spec.get_scheme(name, **over)
    ref = fp4spec.quantize(with_nonfinite(adversarial(10)), sch)
    pk = torch.from_numpy(ref.pack()).to(backend.device)
    sc = torch.from_numpy(np.ascontiguousarray(ref.scales)).to(backend.device)
    want = np.asarray(fp4spec.dequantize(ref), np.float32)
    for br in (2, 64):
        got = dequantize_packed(pk, sc, None if ref.global_scale is None else float(ref.global_scale), sch, BM=br)
        got = got.cpu().numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(got)], want.view(np.uint32)[~np.isnan(want)])


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("axis,rb_shape", [(-1, (64, 96)), (-1, (96,)), (0, (64, 96))], ids=["rows", "broadcast", "axis0"])
def test_public_sr_rbits_of_any_integer_dtype(name, axis, rb_shape):
    """fp4spec.quantize with torch rbits: int32 bits reach the triton kernels without an int64
    copy, broadcast bits are materialized, and every dtype and backend gives the bits numpy
    rbits give."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    rb = rng.integers(0, 256, rb_shape)
    want = fp4spec.quantize(x, name, rounding="sr", rbits=rb, axis=axis, backend="numpy")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for dtype in (torch.int32, torch.int64, torch.uint8):
        for backend in ("triton", "torch"):
            q = fp4spec.quantize(torch.from_numpy(x).to(dev), name, rounding="sr", rbits=torch.from_numpy(rb).to(dev, dtype),
                                 axis=axis, backend=backend)
            assert q.equals(want), (dtype, backend)
