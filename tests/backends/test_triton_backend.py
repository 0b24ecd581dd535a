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
from fp4spec.backends.triton_backend import TritonBackend, dequantize_packed, quantize_packed  # noqa: E402

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
