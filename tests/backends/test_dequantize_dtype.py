"""``fp4spec.dequantize(q, dtype="bfloat16")``: each float32 value rounded to nearest even on its
bit pattern, overflow to +-Inf, every NaN 0x7FC0 (:func:`fp4spec.rht.bf16_rne` with the float32
NaN 0x7FC00000) -- on every backend, bit for bit: the triton kernels write bfloat16 themselves,
the others round their float32 values (the torch rounding in integer ops, since
``Tensor.to(torch.bfloat16)`` gives a different NaN on CUDA than on the CPU)."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")

import fp4spec  # noqa: E402
from fp4spec.api.eager import dequantize_dtype  # noqa: E402
from fp4spec.backends.torch_ops import bf16_rne as torch_bf16_rne  # noqa: E402
from fp4spec.rht import bf16_rne  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
HAS_TRITON = pytest.importorskip("importlib").util.find_spec("triton") is not None
BACKENDS = ["numpy", "torch"] + (["triton"] if HAS_TRITON else [])
SCHEMES = ["mxfp4", "nvfp4", "nvfp4_2d", "ufp4", "nvint4", "hif4", "mxfp8_e4m3", "mxfp6_e3m2", "if4"]
NAN32 = 0x7FC00000


def u16(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.view(torch.int16).cpu().numpy().view(np.uint16)
    return np.asarray(a).view(np.uint16)


def adversarial_f32() -> np.ndarray:
    """Every float32 high half with the low halves that decide a rounding: 0 (exact), 1, 0x7FFF
    (below a tie), 0x8000 (the tie), 0x8001, 0xFFFF -- NaNs, Infs, the largest finites,
    subnormals and both zeros among them."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    return (hi[:, None] | lows[None, :]).reshape(-1).view(np.float32)


def test_torch_rounding_equals_the_spec_on_every_high_half():
    x = adversarial_f32()
    want = bf16_rne(x, NAN32).view(np.uint16)
    assert np.array_equal(u16(torch_bf16_rne(torch.from_numpy(x))), want)
    if CUDA:
        assert np.array_equal(u16(torch_bf16_rne(torch.from_numpy(x).cuda())), want)
    # the spec's rounding: ties to even, NaN canonical, overflow to Inf
    assert bf16_rne(np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], np.float32), NAN32).view(np.uint16).tolist() \
        == [0x3F80, 0x3F82]
    assert bf16_rne(np.array([np.nan, -np.nan, 3.4028235e38], np.float32), NAN32).view(np.uint16).tolist() \
        == [0x7FC0, 0x7FC0, 0x7F80]


def _operands(scheme: str):
    """QuantizedTensors of ``scheme`` (numpy) whose values hit bfloat16 ties and the edges:
    random blocks, a huge and a tiny block, a NaN scale where the scale format has one, and
    for two-level schemes tensor scales that put element values on ties (1 + 2^-8: 1, 2, 4
    times it are ties), just below them and at random."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 128)).astype(np.float32)
    x[1] *= 2.0 ** 60
    x[2] *= 2.0 ** -60
    x[3, :64] = 0.0
    x[3, 64:] = -0.0
    q = fp4spec.quantize(x, scheme)
    out = [q]
    nan_code = {"e8m0": 0xFF, "ue4m3": 0x7F, "e6m2": 0xFF}.get(q.scheme.scale.name)
    if nan_code is not None and scheme != "if4":
        s = np.array(q.scales)
        s.reshape(-1)[5] = nan_code
        out.append(q.replace(scales=s))
    if q.global_scale is not None:
        for g in (1 + 2.0 ** -8, 1 - 2.0 ** -9, 3 * (1 + 2.0 ** -8), float(rng.uniform(0.01, 100))):
            out.append(q.replace(global_scale=np.float32(g)))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_bfloat16_is_the_rounded_float32(scheme, backend):
    """dequantize(q, dtype=bf16) == bf16_rne(dequantize(q)) on numpy and torch fields, on each
    backend that dequantizes the scheme, rowwise and axis=0."""
    b = fp4spec.get_backend(backend)
    if hasattr(b, "why_no_dequantize") and b.why_no_dequantize(fp4spec.get_scheme(scheme)):
        pytest.skip(f"{backend} does not dequantize {scheme}")
    for q in _operands(scheme):
        want = bf16_rne(fp4spec.dequantize(q), NAN32).view(np.uint16)
        if backend == "numpy":
            got = fp4spec.dequantize(q, dtype="bfloat16", backend="numpy")
            assert got.dtype == ml_dtypes.bfloat16
        else:
            got = fp4spec.dequantize(q.to_torch(DEVICE), dtype=torch.bfloat16, backend=backend)
            assert got.dtype == torch.bfloat16 and got.device.type == DEVICE
        assert np.array_equal(u16(got), want), (scheme, backend)
    x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    if fp4spec.get_scheme(scheme).tile_rows == 1 and scheme != "if4":
        qc = fp4spec.quantize(torch.from_numpy(x).to(DEVICE), scheme, axis=0, backend=backend)
        want = bf16_rne(fp4spec.dequantize(qc).cpu().numpy(), NAN32).view(np.uint16)
        assert np.array_equal(u16(fp4spec.dequantize(qc, dtype="bfloat16", backend=backend)), want)


def test_numpy_fields_on_a_torch_backend_come_back_as_numpy():
    q = fp4spec.quantize(np.linspace(-6, 6, 64, dtype=np.float32).reshape(2, 32), "mxfp4")
    got = fp4spec.dequantize(q, dtype=ml_dtypes.bfloat16, backend="torch")
    assert isinstance(got, np.ndarray) and got.dtype == ml_dtypes.bfloat16
    assert np.array_equal(u16(got), bf16_rne(fp4spec.dequantize(q), NAN32).view(np.uint16))


@pytest.mark.parametrize("dtype,name", [(None, "float32"), ("float32", "float32"), (np.float32, "float32"),
                                        (torch.float32, "float32"), ("bfloat16", "bfloat16"),
                                        (ml_dtypes.bfloat16, "bfloat16"), (np.dtype(ml_dtypes.bfloat16), "bfloat16"),
                                        (torch.bfloat16, "bfloat16")])
def test_dtype_spellings(dtype, name):
    assert dequantize_dtype(dtype) == name


@pytest.mark.parametrize("dtype", ["float16", np.float64, torch.float16, "bf16", 3])
def test_other_dtypes_are_refused_by_name(dtype):
    q = fp4spec.quantize(np.ones((1, 32), np.float32), "mxfp4")
    with pytest.raises(ValueError, match="dtype: .* is not None, 'float32' or 'bfloat16'"):
        fp4spec.dequantize(q, dtype=dtype)


def test_compiled_dequantize_to_bfloat16_is_one_graph():
    x = torch.randn(16, 64)
    q = fp4spec.quantize(x, "nvfp4")
    f = torch.compile(lambda t: fp4spec.dequantize(fp4spec.quantize(t, "nvfp4"), dtype=torch.bfloat16),
                      fullgraph=True, backend="aot_eager")
    assert np.array_equal(u16(f(x)), u16(fp4spec.dequantize(q, dtype=torch.bfloat16)))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_full_size_bfloat16():
    """On the GPU at 4096 x 4096: the triton kernels' bfloat16 equals the emulator's rounding,
    every scheme they dequantize."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for scheme in ("mxfp4", "nvfp4", "hif4", "mxfp8_e4m3"):
        q = fp4spec.quantize(x, scheme)
        got = fp4spec.dequantize(q, dtype=torch.bfloat16)
        want = bf16_rne(fp4spec.dequantize(q.to_numpy()), NAN32).view(np.uint16)
        assert np.array_equal(u16(got), want), scheme
